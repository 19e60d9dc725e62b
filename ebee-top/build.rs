//! Builds the eBPF object (ebee-top-ebpf) with the nightly toolchain and bpf-linker, and puts
//! it in OUT_DIR for `include_bytes_aligned!`. `AYA_BUILD_SKIP=1` skips it (the binary then
//! embeds an empty object and says so when run).
use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").ok_or(anyhow!("OUT_DIR"))?);
    let skip = std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v == "true");
    if skip {
        // Keep the crate compiling (docs, clippy of userspace alone) without the eBPF toolchain.
        std::fs::write(out.join("ebee-top-ebpf"), b"").context("write empty eBPF object")?;
        println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
        return Ok(());
    }
    // The manifest directory as cargo gives it to this run (not as it was when the script was
    // compiled): a build cache copied from another checkout must still build this one.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").ok_or(anyhow!("CARGO_MANIFEST_DIR"))?;
    let root = std::path::Path::new(&manifest)
        .parent()
        .ok_or(anyhow!("workspace root"))?
        .join("ebee-top-ebpf");
    let root = root.to_str().ok_or(anyhow!("non-UTF-8 path"))?;
    println!("cargo:rerun-if-changed={root}/src");
    println!("cargo:rerun-if-changed=../ebee-shared/src");
    aya_build::build_ebpf(
        [Package {
            name: "ebee-top-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        Toolchain::default(),
    )
}
