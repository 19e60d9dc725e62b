//! `cargo xtask kernels`: the kernel matrix. Each kernel boots in a QEMU virtual machine with
//! an initramfs of our own (busybox, the host's release ebee-top and ebee-load, and
//! `guest.sh` as /init); the guest runs ebee-top against small workloads and sends its raw
//! readings back over a second serial port; [`judge`] decides, per pipeline, whether it works,
//! is off with a reason, or fails. The table goes into the README between two markers.
//!
//! Kernels are Debian's (bookworm's 6.1 and its own 6.12 build), fetched with `apt-get
//! download` and unpacked with `dpkg-deb -x` under target/kernels (never installed), plus the
//! host's own when /boot has its image.

mod cpio;
mod judge;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::util::{self, output, status};

/// The guest's /init.
const GUEST: &str = include_str!("guest.sh");

/// The Debian kernels, by the meta-package that names the newest build of each line: the
/// cloud flavour (smaller, and it has every driver a QEMU guest with an initramfs needs built
/// in), and the PREEMPT_RT flavour of both lines (another configuration, and a scheduler whose
/// locks sleep, so many more context switches). Bookworm's registry has no 5.x image
/// (bullseye's 5.10 is in a suite these machines do not reach).
const DEBIAN: [(&str, &str); 4] = [
    ("Debian 12 (bookworm) 6.1", "linux-image-cloud-amd64"),
    ("Debian 12 6.1 PREEMPT_RT", "linux-image-rt-amd64"),
    ("Debian 12 6.12 build", "linux-image-6.12-cloud-amd64"),
    ("Debian 12 6.12 PREEMPT_RT", "linux-image-6.12-rt-amd64"),
];

/// How long one guest may take from boot to power-off (a TCG guest takes about 15 s).
const GUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The README's table sits between these lines.
const TABLE_START: &str = "<!-- kernel-matrix:start (cargo xtask kernels writes this table) -->";
const TABLE_END: &str = "<!-- kernel-matrix:end -->";

/// One kernel to boot.
struct Kernel {
    label: String,
    release: String,
    vmlinuz: PathBuf,
    /// loop.ko (maybe .xz) when loop is a module of this kernel.
    loop_ko: Option<PathBuf>,
}

/// Where downloads and guest logs go.
fn cache() -> PathBuf {
    util::root().join("target/kernels")
}

/// How QEMU runs a guest here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Accel {
    /// Hardware virtualization through /dev/kvm.
    Kvm,
    /// QEMU's own translator: no KVM, or a KVM that cannot run a stock kernel.
    Tcg,
}

/// KVM when /dev/kvm is there and backed by hardware virtualization (kvm_intel or kvm_amd).
/// Some VMs offer /dev/kvm through PVM (kvm_pvm), which boots only kernels built as PVM guests:
/// a Debian kernel hangs there before its first console line, so those get TCG.
/// None: no /dev/kvm at all.
pub fn accel() -> Option<Accel> {
    if !Path::new("/dev/kvm").exists() {
        return None;
    }
    let hw = ["kvm_intel", "kvm_amd"]
        .iter()
        .any(|m| Path::new("/sys/module").join(m).exists());
    Some(if hw { Accel::Kvm } else { Accel::Tcg })
}

/// `cargo xtask kernels`: fetch, boot, judge, and (with `readme`) write the README table.
/// Fails when a pipeline fails on any kernel or a kernel does not boot. `tcg` forces QEMU's
/// translator. The caller has built the release binaries.
/// `readme`: the command's run, every kernel, the table written into the README. Otherwise
/// the test run's: the kernels but the PREEMPT_RT ones (their guests are the slow and flaky
/// ones under TCG), nothing rewritten.
pub fn run(tcg: bool, readme: bool) -> Result<()> {
    let started = Instant::now();
    let accel = match (accel(), tcg) {
        (_, true) => Accel::Tcg,
        (Some(a), false) => a,
        (None, false) => Accel::Tcg,
    };
    let mut kernels = Vec::new();
    util::step("kernel images", || {
        kernels = fetch(readme)?;
        Ok(())
    })?;
    let root = util::root();
    let bins = [
        root.join("target/release/ebee-top"),
        root.join("target/release/ebee-load"),
    ];
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for k in &kernels {
        let t = Instant::now();
        eprintln!("xtask: ==> kernel {} ({}, {accel:?})", k.release, k.label);
        let mut files = boot(k, &bins, accel).with_context(|| format!("booting {}", k.release))?;
        if !files.contains_key("kernel") {
            // Nothing came back: the guest died before its first reading. Seen once, a
            // PREEMPT_RT guest under TCG oopsed on an int3 in trace_rss_stat while the kernel
            // patched that tracepoint in (TCG's cross-modifying code, not the programs: the
            // next boot ran every check). One more boot tells the two apart; a crash our
            // programs cause comes back.
            let console = cache()
                .join(format!("run-{}", k.release))
                .join("console.log");
            let why = std::fs::read_to_string(&console)
                .ok()
                .and_then(|c| {
                    c.lines()
                        .find(|l| l.contains("Oops") || l.contains("Kernel panic"))
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| "no oops in its console log".into());
            eprintln!(
                "xtask:   the guest sent nothing ({}); booting it once more",
                why.trim()
            );
            files = boot(k, &bins, accel).with_context(|| format!("booting {}", k.release))?;
        }
        let verdicts = judge::judge(&files);
        for (col, v) in &verdicts {
            eprintln!("xtask:   {col:<11} {}", v.cell());
            if matches!(v, judge::Verdict::Fail(_)) {
                failed.push(format!("{} {col}", k.release));
            }
        }
        eprintln!("xtask:   ({:.0} s)", t.elapsed().as_secs_f64());
        rows.push((k, verdicts));
    }
    // The README keeps the verdicts; the measured differences (which move a little from run
    // to run) go to target/kernels/matrix.md beside the guests' logs.
    let detailed = table(&rows, accel, true);
    let file = cache().join("matrix.md");
    std::fs::write(&file, &detailed).with_context(|| format!("writing {}", file.display()))?;
    if readme {
        write_readme(&table(&rows, accel, false))?;
    }
    eprintln!(
        "xtask: kernel matrix: {} kernels in {:.0} s; table in {}{}",
        rows.len(),
        started.elapsed().as_secs_f64(),
        file.display(),
        if readme { " and README.md" } else { "" }
    );
    if !failed.is_empty() {
        bail!("kernel matrix failures: {}", failed.join(", "));
    }
    Ok(())
}

/// The kernels to boot: the Debian ones (downloaded once) and the host's when /boot has it.
fn fetch(all: bool) -> Result<Vec<Kernel>> {
    let dir = cache();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = Vec::new();
    for (label, meta) in DEBIAN {
        if !all && label.contains("PREEMPT_RT") {
            continue;
        }
        let pkg = resolve(meta)?;
        let unpacked = dir.join(&pkg);
        if find_vmlinuz(&unpacked).is_none() {
            download(&pkg, &dir, &unpacked)?;
        }
        let vmlinuz =
            find_vmlinuz(&unpacked).with_context(|| format!("{pkg} has no boot/vmlinuz-*"))?;
        let release = vmlinuz
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("vmlinuz-"))
            .unwrap_or(&pkg)
            .to_owned();
        let loop_ko = find_file(&unpacked.join("lib/modules").join(&release), "loop.ko");
        out.push(Kernel {
            label: label.to_owned(),
            release,
            vmlinuz,
            loop_ko,
        });
    }
    let host = output(Command::new("uname").arg("-r")).unwrap_or_default();
    let image = PathBuf::from(format!("/boot/vmlinuz-{host}"));
    if std::fs::File::open(&image).is_ok() {
        out.push(Kernel {
            label: "this host's".into(),
            loop_ko: find_file(&PathBuf::from(format!("/lib/modules/{host}")), "loop.ko"),
            release: host,
            vmlinuz: image,
        });
    } else {
        eprintln!(
            "xtask: the host's kernel {host} is not in the matrix: no {} to boot (the \
             privileged tests cover it on the host itself)",
            image.display()
        );
    }
    Ok(out)
}

/// The package a Debian meta-package depends on (the newest build of that kernel line).
fn resolve(meta: &str) -> Result<String> {
    let depends = |m: &str| {
        output(Command::new("apt-cache").args(["depends", "--important", m])).and_then(|t| {
            t.lines()
                .find_map(|l| l.trim().strip_prefix("Depends: "))
                .map(|p| p.trim().to_owned())
        })
    };
    if let Some(p) = depends(meta) {
        return Ok(p);
    }
    // The package lists may be missing on a fresh machine.
    status(util::root_command(Path::new("apt-get")).args(["update", "-q"]))?;
    depends(meta).with_context(|| format!("the Debian registry has no {meta}"))
}

/// `apt-get download` the package into `dir` and unpack it into `dest` (never installed).
fn download(pkg: &str, dir: &Path, dest: &Path) -> Result<()> {
    eprintln!("xtask: downloading {pkg}");
    status(
        Command::new("apt-get")
            .args(["download", "-q", pkg])
            .current_dir(dir),
    )?;
    let deb = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb"))
        })
        .with_context(|| format!("apt-get download left no {pkg}_*.deb"))?;
    let tmp = dest.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    status(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp))?;
    let _ = std::fs::remove_dir_all(dest);
    std::fs::rename(&tmp, dest).with_context(|| format!("renaming to {}", dest.display()))?;
    // The unpacked tree is all that is used; the package is not kept twice.
    std::fs::remove_file(&deb).with_context(|| format!("removing {}", deb.display()))
}

fn find_vmlinuz(unpacked: &Path) -> Option<PathBuf> {
    std::fs::read_dir(unpacked.join("boot"))
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
}

/// The first file under `dir` named `name` or `name`.xz (depth first).
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok()) {
        let p = e.path();
        if p.is_dir() {
            if let Some(f) = find_file(&p, name) {
                return Some(f);
            }
        } else if let Some(n) = p.file_name().and_then(|n| n.to_str()) {
            if n == name || n.strip_suffix(".xz") == Some(name) {
                return Some(p);
            }
        }
    }
    None
}

/// Boot `k` with the guest and return the files it sent.
fn boot(k: &Kernel, bins: &[PathBuf], accel: Accel) -> Result<judge::Files> {
    let dir = cache().join(format!("run-{}", k.release));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let initrd = dir.join("initrd.cpio");
    initramfs(k, bins, &initrd)?;
    let (console, data) = (dir.join("console.log"), dir.join("data.log"));
    for f in [&console, &data] {
        let _ = std::fs::remove_file(f);
    }
    let mut qemu = Command::new("qemu-system-x86_64");
    match accel {
        Accel::Kvm => qemu.args(["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => qemu.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
    };
    qemu.args(["-smp", "2", "-m", "1024", "-no-reboot", "-display", "none"])
        .args(["-monitor", "none", "-kernel"])
        .arg(&k.vmlinuz)
        .arg("-initrd")
        .arg(&initrd)
        // noirqdebug: a PREEMPT_RT guest under TCG sees the second UART's interrupt as
        // unhandled ("irq 3: nobody cared"), disables it, and the readings stall mid-transfer.
        .args(["-append", "console=ttyS0 panic=-1 quiet noirqdebug"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-serial")
        .arg(format!("file:{}", data.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let mut child = qemu
        .spawn()
        .context("starting qemu-system-x86_64 (cargo xtask setup --kernels installs it)")?;
    let deadline = Instant::now() + GUEST_TIMEOUT;
    loop {
        if let Some(st) = child.try_wait().context("waiting for qemu")? {
            if !st.success() {
                bail!("qemu exited with {st} (console: {})", console.display());
            }
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the guest did not power off within {} s (console: {})",
                GUEST_TIMEOUT.as_secs(),
                console.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = std::fs::read_to_string(&data).unwrap_or_default();
    Ok(judge::parse_files(&text))
}

/// The guest's initramfs: busybox, the binaries and their libraries, /init, loop.ko.
fn initramfs(k: &Kernel, bins: &[PathBuf], dest: &Path) -> Result<()> {
    let mut a = cpio::Archive::default();
    for d in ["proc", "sys", "dev", "tmp", "run"] {
        a.dir(d);
    }
    a.copy(Path::new("/bin/busybox"), "bin/busybox")
        .context("busybox-static is needed (cargo xtask setup --kernels installs it)")?;
    let mut libs = std::collections::BTreeSet::new();
    for b in bins {
        let name = b
            .file_name()
            .and_then(|n| n.to_str())
            .context("binary name")?;
        a.copy(b, &format!("bin/{name}"))
            .with_context(|| format!("{} (build it first)", b.display()))?;
        libs.extend(cpio::libraries(b)?);
    }
    for l in &libs {
        // The library itself, under the path the loader looks for (symlinks followed).
        let resolved = std::fs::canonicalize(l).with_context(|| format!("{}", l.display()))?;
        a.copy(&resolved, &l.to_string_lossy())?;
    }
    a.file("init", 0o755, GUEST.as_bytes());
    if let Some(ko) = &k.loop_ko {
        let data = if ko.extension().is_some_and(|e| e == "xz") {
            // busybox's insmod takes a plain module.
            let out = Command::new("xz")
                .arg("-dc")
                .arg(ko)
                .output()
                .context("running xz")?;
            if !out.status.success() {
                bail!("xz -dc {} failed", ko.display());
            }
            out.stdout
        } else {
            std::fs::read(ko).with_context(|| format!("reading {}", ko.display()))?
        };
        a.file("loop.ko", 0o644, &data);
    }
    a.write(dest)
}

/// The markdown table: one row per kernel, one column per pipeline; with `detail`, each
/// working cell says by how much its numbers differed from the kernel's own counters.
fn table(
    rows: &[(&Kernel, Vec<(&'static str, judge::Verdict)>)],
    accel: Accel,
    detail: bool,
) -> String {
    let mut t = String::new();
    t.push_str("| kernel | ");
    t.push_str(&judge::COLUMNS.join(" | "));
    t.push_str(" |\n|---|");
    t.push_str(&"---|".repeat(judge::COLUMNS.len()));
    t.push('\n');
    for (k, verdicts) in rows {
        t.push_str(&format!("| {} `{}` |", k.label, k.release));
        for (_, v) in verdicts {
            let cell = match v {
                judge::Verdict::Works(_) if !detail => "works".to_owned(),
                v => v.cell(),
            };
            t.push_str(&format!(" {} |", cell.replace('|', "\\|")));
        }
        t.push('\n');
    }
    let how = match (accel, Path::new("/dev/kvm").exists()) {
        (Accel::Kvm, _) => "QEMU with KVM",
        (Accel::Tcg, true) => {
            "QEMU's TCG: this machine's /dev/kvm is PVM, which boots no stock kernel"
        }
        (Accel::Tcg, false) => "QEMU's TCG: no /dev/kvm",
    };
    t.push_str(&format!(
        "\nMeasured by `cargo xtask kernels` ({how}, 2 vCPUs, 1 GiB) with the release binaries \
         of this commit.\n"
    ));
    t
}

/// Put `table` between the README's markers.
fn write_readme(table: &str) -> Result<()> {
    let path = util::root().join("README.md");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let (Some(a), Some(b)) = (text.find(TABLE_START), text.find(TABLE_END)) else {
        bail!("README.md has no kernel-matrix markers ({TABLE_START})");
    };
    let new = format!("{}{TABLE_START}\n{table}{}", &text[..a], &text[b..]);
    std::fs::write(&path, new).with_context(|| format!("writing {}", path.display()))
}
