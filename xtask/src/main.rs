//! cargo xtask: set-up, run, test, benchmarks, screenshots. Every step installs what it needs
//! first, idempotently (seconds when everything is already there).

mod bench;
mod deb;
mod kernels;
mod screenshots;
mod setup;
mod util;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what is missing (rust-src for nightly, bpf-linker, Debian packages).
    Setup {
        /// Also the packages the tests need.
        #[arg(long)]
        test: bool,
        /// Also the packages the benchmarks need.
        #[arg(long)]
        bench: bool,
        /// Also the packages `cargo xtask screenshots` needs.
        #[arg(long)]
        screenshots: bool,
        /// Also the packages `cargo xtask kernels` needs (QEMU, busybox-static).
        #[arg(long)]
        kernels: bool,
    },
    /// Set up, build, and start ebee-top live (as root, through sudo when needed).
    Run {
        /// Arguments passed to ebee-top.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, then run every check: fmt, clippy (userspace and eBPF), unit tests and the
    /// privileged integration tests (as root, through sudo when needed).
    Test {
        /// Only tests whose name contains this.
        filter: Option<String>,
    },
    /// The kernel matrix: boot Debian's 6.1 and 6.12 kernels (and the host's, when /boot has
    /// it) in QEMU, run ebee-top's checks in each, and write the kernel x pipeline table into
    /// README.md.
    Kernels {
        /// Use QEMU's translator (TCG) even where KVM is available.
        #[arg(long)]
        tcg: bool,
    },
    /// Regenerate the PNGs in screenshots/ from the real binary (tmux, aha, headless Chromium).
    Screenshots,
    /// Build the Debian package (cargo-deb): target/debian/ebee-top.deb with the binary, the
    /// systemd unit, the man page, shell completions and the example Prometheus and Grafana
    /// files.
    Deb,
    /// Benchmarks; each prints a table and updates BENCHMARKS.md.
    Bench {
        #[command(subcommand)]
        which: bench::Which,
    },
}

fn main() {
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Setup {
            test,
            bench,
            screenshots,
            kernels,
        } => setup::setup(setup::Needs {
            test,
            bench,
            screenshots,
            kernels,
        }),
        Cmd::Kernels { tcg } => setup::setup(setup::Needs {
            kernels: true,
            ..Default::default()
        })
        .and_then(|()| util::build_release())
        .and_then(|()| kernels::run(tcg, true)),
        Cmd::Run { args } => run(args),
        Cmd::Test { filter } => test(filter),
        Cmd::Bench { which } => bench::run(which),
        Cmd::Screenshots => screenshots::run(),
        Cmd::Deb => setup::setup(setup::Needs::default())
            .and_then(|()| util::build_release())
            .and_then(|()| deb::build()),
    };
    if let Err(e) = r {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Vec<String>) -> Result<()> {
    setup::setup(setup::Needs::default())?;
    util::build_release()?;
    let bin = util::root().join("target/release/ebee-top");
    util::run_as_root(&bin, &args)
}

fn test(filter: Option<String>) -> Result<()> {
    // The kernel matrix runs where /dev/kvm is (see `kernels::accel`): its packages too.
    let matrix = kernels::accel().is_some();
    setup::setup(setup::Needs {
        test: true,
        kernels: matrix,
        ..Default::default()
    })?;
    let f: Vec<String> = filter.into_iter().collect();
    util::step("cargo fmt --check", || {
        util::cargo(&["fmt", "--all", "--", "--check"])
    })?;
    util::step("clippy (userspace)", || {
        util::cargo(&["clippy", "--all-targets", "--", "-D", "warnings"])
    })?;
    util::step("clippy (eBPF)", util::clippy_ebpf)?;
    util::build_release()?;
    // Unit tests of every crate but the privileged suite, in parallel.
    let mut unit = vec![
        "test",
        "--release",
        "--workspace",
        "--exclude",
        "ebee-tests",
        "--exclude",
        "ebee-top-ebpf",
    ];
    unit.extend(f.iter().map(String::as_str));
    util::step("unit tests", || util::cargo(&unit))?;
    // The package the privileged tests install and remove.
    deb::build()?;
    // Privileged tests load eBPF and measure CPU time: one at a time, as root.
    let mut args = vec!["test", "--release", "-p", "ebee-tests"];
    args.extend(f.iter().map(String::as_str));
    args.extend(["--", "--test-threads=1"]);
    util::step("privileged tests", || util::cargo_as_root(&args))?;
    // The kernel matrix (about a minute per kernel under TCG, less with KVM), after the
    // privileged tests: every pipeline on every kernel, the README's table checked, not
    // rewritten. Only with /dev/kvm, as this machine's tests are timed for it.
    if f.is_empty() {
        if matrix {
            util::step("kernel matrix", || kernels::run(false, false))?;
        } else {
            eprintln!("xtask: kernel matrix skipped: no /dev/kvm on this machine");
        }
    }
    Ok(())
}
