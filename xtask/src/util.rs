//! Small helpers for running commands.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Run a command to completion; fail with its name when it fails.
pub fn status(cmd: &mut Command) -> Result<()> {
    let st = cmd
        .status()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    if !st.success() {
        bail!("{cmd:?} failed ({st})");
    }
    Ok(())
}

/// Run a command and return its stdout (trimmed), or None when it fails to start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let o = cmd.output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

pub fn cargo(args: &[&str]) -> Result<()> {
    status(Command::new(cargo_bin()).args(args).current_dir(root()))
}

fn cargo_bin() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// `cargo <args>` as root: directly when we are root, else through `sudo -E` keeping PATH
/// (so root finds the same toolchain).
pub fn cargo_as_root(args: &[&str]) -> Result<()> {
    if is_root() {
        return cargo(args);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    status(
        Command::new("sudo")
            .args(["-E", "env", &format!("PATH={path}")])
            .arg(cargo_bin())
            .args(args)
            .current_dir(root()),
    )
}

/// A command running `program` as root: directly when we are root, else through sudo.
pub fn root_command(program: &Path) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.arg(program);
        c
    }
}

/// Run a program as root (through sudo when needed), passing its exit code on.
pub fn run_as_root(bin: &Path, args: &[String]) -> Result<()> {
    let st = root_command(bin)
        .args(args)
        .status()
        .context("starting ebee-top")?;
    std::process::exit(st.code().unwrap_or(1));
}

pub fn build_release() -> Result<()> {
    step("build", || cargo(&["build", "--release", "--bins"]))
}

/// Clippy for the eBPF crate, on its own target with nightly.
pub fn clippy_ebpf() -> Result<()> {
    status(
        Command::new("cargo")
            .args([
                "+nightly",
                "clippy",
                "-p",
                "ebee-top-ebpf",
                "--release",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--target-dir",
                "target/ebpf-clippy",
                "--",
                "-D",
                "warnings",
            ])
            .env_remove("RUSTC")
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("CARGO")
            .current_dir(root()),
    )
}

/// Print a step's name, run it, and label its failure.
pub fn step(name: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    eprintln!("xtask: ==> {name}");
    f().with_context(|| format!("step '{name}' failed"))?;
    eprintln!("xtask: {name}: ok");
    Ok(())
}
