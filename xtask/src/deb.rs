//! `cargo xtask deb`: the Debian package, built by cargo-deb from the release binary, the man
//! page and shell completions that binary generates from its clap definitions, the systemd
//! unit and the example files in deploy/ (see `[package.metadata.deb]` in ebee-top/Cargo.toml).
//! Written to target/debian/ebee-top.deb; the privileged tests install and remove it.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

use crate::util::{self, output, status};

const CARGO_DEB_VERSION: &str = "3.8.0";

/// Where the package is written.
pub fn path() -> PathBuf {
    util::root().join("target/debian/ebee-top.deb")
}

/// Install cargo-deb when it is missing (a crates.io package; a minute or two to build once).
fn cargo_deb() -> Result<()> {
    if output(Command::new("cargo").args(["deb", "--version"]))
        .is_some_and(|v| v.contains(CARGO_DEB_VERSION))
    {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-deb {CARGO_DEB_VERSION}");
    status(Command::new("cargo").args([
        "install",
        "cargo-deb",
        "--locked",
        "--version",
        CARGO_DEB_VERSION,
    ]))
}

/// Run the release binary with `args`, its stdout into `target/assets/<name>`.
fn generate(args: &[&str], name: &str) -> Result<PathBuf> {
    let root = util::root();
    let dir = root.join("target/assets");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join(name);
    let out =
        std::fs::File::create(&file).with_context(|| format!("creating {}", file.display()))?;
    let bin = root.join("target/release/ebee-top");
    let st = Command::new(&bin)
        .args(args)
        .stdout(Stdio::from(out))
        .status()
        .with_context(|| format!("running {} {args:?}", bin.display()))?;
    if !st.success() {
        bail!("{} {args:?} failed: {st}", bin.display());
    }
    Ok(file)
}

/// Build the package from the release binary (built by the caller).
pub fn build() -> Result<()> {
    cargo_deb()?;
    util::step("man page and completions", || {
        let man = generate(&["manpage"], "ebee-top.1")?;
        // gzip -n: no name or time stamp, so the package is reproducible.
        status(Command::new("gzip").args(["-9nf"]).arg(&man))?;
        generate(&["completions", "bash"], "ebee-top.bash")?;
        generate(&["completions", "zsh"], "_ebee-top")?;
        generate(&["completions", "fish"], "ebee-top.fish")?;
        Ok(())
    })?;
    let out = path();
    util::step("Debian package (cargo deb)", || {
        util::cargo(&[
            "deb",
            "-p",
            "ebee-top",
            "--no-build",
            "--output",
            out.to_str().context("non-UTF-8 path")?,
        ])
    })?;
    eprintln!("xtask: wrote {}", out.display());
    Ok(())
}
