//! The guest's root file system: an uncompressed initramfs (cpio "newc", which the kernel
//! unpacks without any decompressor) holding busybox, the host's release binaries with the
//! shared libraries they load, the guest script as /init and, when the kernel has it as a
//! module, loop.ko for the disk I/O check.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

/// One archive being written.
#[derive(Default)]
pub struct Archive {
    out: Vec<u8>,
    ino: u32,
    dirs: std::collections::BTreeSet<String>,
}

impl Archive {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        // newc: a 110-byte ASCII header, the name with its NUL, padded to 4 bytes, the data,
        // padded to 4 bytes.
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.ino += 1;
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    /// A directory and its parents (once each).
    pub fn dir(&mut self, path: &str) {
        let path = path.trim_matches('/');
        let mut so_far = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            if !so_far.is_empty() {
                so_far.push('/');
            }
            so_far.push_str(part);
            if self.dirs.insert(so_far.clone()) {
                let name = so_far.clone();
                self.entry(&name, 0o040755, &[]);
            }
        }
    }

    /// A regular file at `path` (its directory made first) with `mode` (permission bits).
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        let path = path.trim_start_matches('/');
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o100000 | mode, data);
    }

    /// A copy of the host file `src` at `path`, keeping its permission bits.
    pub fn copy(&mut self, src: &Path, path: &str) -> Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        let data = std::fs::read(src).with_context(|| format!("reading {}", src.display()))?;
        let mode = std::fs::metadata(src)
            .with_context(|| format!("reading {}", src.display()))?
            .permissions()
            .mode()
            & 0o7777;
        self.file(path, mode, &data);
        Ok(())
    }

    /// Write the archive (with its trailer) to `dest`.
    pub fn write(mut self, dest: &Path) -> Result<()> {
        self.entry("TRAILER!!!", 0, &[]);
        let mut f =
            std::fs::File::create(dest).with_context(|| format!("creating {}", dest.display()))?;
        f.write_all(&self.out)
            .with_context(|| format!("writing {}", dest.display()))
    }
}

/// The shared libraries `bin` loads (and the dynamic loader), as `ldd` lists them.
pub fn libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .with_context(|| format!("running ldd {}", bin.display()))?;
    if !out.status.success() {
        bail!("ldd {} failed", bin.display());
    }
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

/// The absolute paths in `ldd`'s output: `libc.so.6 => /lib/.../libc.so.6 (0x...)` and the
/// loader's own `/lib64/ld-linux-x86-64.so.2 (0x...)`; the vDSO has none.
fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, right)) => right.trim(),
                None => l,
            };
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines_give_the_library_paths() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f3b)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f3b55b1e000)\n";
        assert_eq!(
            parse_ldd(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }

    #[test]
    fn an_archive_is_newc_with_parents_and_a_trailer() {
        let dir = std::env::temp_dir().join(format!("xtask-cpio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dest = dir.join("a.cpio");
        let mut a = Archive::default();
        a.file("/bin/x", 0o755, b"hello");
        a.write(&dest).unwrap();
        let bytes = std::fs::read(&dest).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(bytes.starts_with(b"070701"));
        assert_eq!(bytes.len() % 4, 0);
        let text = String::from_utf8_lossy(&bytes);
        // The parent directory comes before the file, the trailer last.
        let (d, f, t) = (
            text.find("bin\0").unwrap(),
            text.find("bin/x\0").unwrap(),
            text.find("TRAILER!!!").unwrap(),
        );
        assert!(d < f && f < t, "{text}");
        assert!(text.contains("hello"));
    }
}
