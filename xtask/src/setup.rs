//! Installs what is missing, idempotently: rust-src for the nightly toolchain, bpf-linker built
//! against nightly's own libLLVM (see shared TOOLCHAIN notes), and Debian packages.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::util::{is_root, output, status};

#[derive(Clone, Copy, Debug, Default)]
pub struct Needs {
    pub test: bool,
    pub bench: bool,
    pub screenshots: bool,
    pub kernels: bool,
}

const BPF_LINKER_VERSION: &str = "0.13.0";

/// Debian packages the tests need (tmux drives the TUI end to end; prometheus brings the real
/// Prometheus and promtool the metrics tests scrape and check with; man-db reads the Debian
/// package's man page, gzip compresses it; the servers tests run redis, memcached and nginx
/// under their own load generators, and curl as a client; apache2-utils' htpasswd makes the
/// bcrypt hash of the web-config test; perf records the scheduler's own tracepoints as the
/// independent account the culprits of waits are checked against).
const TEST_PACKAGES: &[&str] = &[
    "tmux",
    "linux-perf",
    "util-linux",
    "procps",
    "prometheus",
    "man-db",
    "gzip",
    "redis-server",
    "redis-tools",
    "memcached",
    "libmemcached-tools",
    "nginx-light",
    "wrk",
    "curl",
    "apache2-utils",
];
/// Debian packages `cargo xtask screenshots` needs (not the tests).
const SCREENSHOT_PACKAGES: &[&str] = &[
    "tmux",
    "aha",
    "chromium",
    "redis-server",
    "redis-tools",
    "nginx-light",
    "wrk",
];
/// Debian packages `cargo xtask kernels` needs: QEMU to boot the kernels, a static busybox as
/// the guests' userland, xz to unpack a compressed loop.ko (the kernel images themselves are
/// downloaded, never installed).
const KERNEL_PACKAGES: &[&str] = &["qemu-system-x86", "busybox-static", "xz-utils"];
/// Debian packages the benchmarks need.
const BENCH_PACKAGES: &[&str] = &[
    "redis-server",
    "redis-tools",
    "stress-ng",
    "htop",
    "tmux",
    "hyperfine",
    "procps",
];

pub fn setup(n: Needs) -> Result<()> {
    rust_src()?;
    bpf_linker()?;
    let mut pkgs: Vec<&str> = Vec::new();
    if n.test {
        pkgs.extend(TEST_PACKAGES);
    }
    if n.bench {
        pkgs.extend(BENCH_PACKAGES);
    }
    if n.screenshots {
        pkgs.extend(SCREENSHOT_PACKAGES);
    }
    if n.kernels {
        pkgs.extend(KERNEL_PACKAGES);
    }
    pkgs.sort_unstable();
    pkgs.dedup();
    debian(&pkgs)
}

fn rust_src() -> Result<()> {
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"]))
        .context("rustup is needed (the eBPF crate builds with nightly)")?;
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        bail!(
            "no nightly toolchain: this project builds its eBPF programs with the machine's \
             nightly (1.97.0, 2026-05-19); bpf-linker is tied to its libLLVM, so install that \
             exact nightly rather than the latest"
        );
    }
    let installed = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))
    .unwrap_or_default();
    if !installed.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("xtask: installing rust-src for nightly");
        status(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok(())
}

fn bpf_linker() -> Result<()> {
    if let Some(v) = output(Command::new("bpf-linker").arg("--version")) {
        if v.contains(BPF_LINKER_VERSION) {
            return Ok(());
        }
    }
    eprintln!("xtask: building bpf-linker {BPF_LINKER_VERSION} against nightly's libLLVM");
    let sysroot = output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))
        .context("rustc +nightly --print sysroot")?;
    let lib = PathBuf::from(&sysroot).join("lib");
    let llvm = std::fs::read_dir(&lib)
        .with_context(|| format!("reading {}", lib.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("libLLVM.so."))
        .with_context(|| format!("no libLLVM.so.* in {}", lib.display()))?;
    let major = llvm
        .trim_start_matches("libLLVM.so.")
        .split('.')
        .next()
        .unwrap_or("22")
        .to_owned();
    // bpf-linker keeps this folder as its RUNPATH, so it must outlive the build: keep it under
    // the user's data directory, not in target/ or /tmp.
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    let prefix = PathBuf::from(home).join(".local/share/ebee-top/llvm-prefix");
    let plib = prefix.join("lib");
    std::fs::create_dir_all(&plib).with_context(|| format!("creating {}", plib.display()))?;
    for name in ["libLLVM.so", llvm.as_str()] {
        let link = plib.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(lib.join(&llvm), &link)
            .with_context(|| format!("linking {}", link.display()))?;
    }
    status(
        Command::new("cargo")
            .args([
                "+nightly",
                "install",
                "bpf-linker",
                "--locked",
                "--version",
                BPF_LINKER_VERSION,
                "--no-default-features",
                "--features",
                &format!("llvm-{major}"),
            ])
            .env("LLVM_PREFIX", &prefix)
            .env_remove("RUSTC")
            .env_remove("CARGO"),
    )
}

fn debian(pkgs: &[&str]) -> Result<()> {
    let missing: Vec<&str> = pkgs
        .iter()
        .copied()
        .filter(|p| {
            !output(Command::new("dpkg-query").args(["-W", "-f=${Status}", p]))
                .is_some_and(|s| s.contains("install ok installed"))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing Debian packages: {}", missing.join(" "));
    let sudo = |c: &str| {
        if is_root() {
            Command::new(c)
        } else {
            let mut s = Command::new("sudo");
            s.arg(c);
            s
        }
    };
    status(sudo("apt-get").args(["update", "-q"]))?;
    status(
        sudo("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}
