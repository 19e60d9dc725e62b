//! The Debian package (`cargo xtask deb`, which `cargo xtask test` runs before these tests):
//! installed with dpkg, `ebee-top --version` and `man ebee-top` work, the unit and completions
//! are where systemd and the shells look, and removing it takes it all away.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::path::Path;
use std::process::Command;

use ebee_tests::privileged;

fn run(cmd: &str, args: &[&str]) -> (bool, String) {
    let o = Command::new(cmd)
        .args(args)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn the_debian_package_installs_runs_and_removes() {
    if !privileged("the_debian_package_installs_runs_and_removes") {
        return;
    }
    let deb = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debian/ebee-top.deb");
    if !deb.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but {} is missing: `cargo xtask test` builds it",
            deb.display()
        );
        eprintln!(
            "SKIPPED the_debian_package_installs_runs_and_removes: no {} (run `cargo xtask deb`)",
            deb.display()
        );
        return;
    }
    assert!(
        !Path::new("/usr/bin/ebee-top").exists() || run("dpkg-query", &["-W", "ebee-top"]).0,
        "/usr/bin/ebee-top exists and is not from the package: not overwriting it"
    );
    let (ok, out) = run("dpkg", &["-i", deb.to_str().unwrap()]);
    assert!(ok, "dpkg -i: {out}");
    let result = std::panic::catch_unwind(|| {
        let (ok, out) = run("/usr/bin/ebee-top", &["--version"]);
        assert!(ok, "ebee-top --version: {out}");
        assert_eq!(
            out.trim(),
            format!("ebee-top {}", env!("CARGO_PKG_VERSION")),
            "--version"
        );
        let (ok, man) = run("man", &["ebee-top"]);
        assert!(ok, "man ebee-top: {man}");
        for s in ["ebee-top", "--listen", "EBEE-TOP SERVE", "EXIT STATUS"] {
            assert!(man.contains(s), "no {s} in `man ebee-top`:\n{man}");
        }
        for f in [
            "/lib/systemd/system/ebee-top.service",
            "/usr/share/bash-completion/completions/ebee-top",
            "/usr/share/zsh/vendor-completions/_ebee-top",
            "/usr/share/fish/vendor_completions.d/ebee-top.fish",
            "/usr/share/doc/ebee-top/examples/prometheus.yml",
            "/usr/share/doc/ebee-top/examples/grafana-dashboard.json",
            "/etc/ebee-top/web-config.yml",
        ] {
            assert!(
                Path::new(f).exists() || Path::new(&format!("/usr{f}")).exists(),
                "{f} not installed"
            );
        }
        // The web config: a conffile, root's alone (the unit reads it through
        // LoadCredential=), and not enabled: the unit's ExecStart does not name it.
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::metadata("/etc/ebee-top/web-config.yml").unwrap();
        assert_eq!((m.mode() & 0o777, m.uid()), (0o600, 0), "mode and owner");
        let (ok, conf) = run("dpkg-query", &["-W", "-f=${Conffiles}", "ebee-top"]);
        assert!(
            ok && conf.contains("/etc/ebee-top/web-config.yml"),
            "{conf}"
        );
        let unit = ["/lib/systemd/system", "/usr/lib/systemd/system"]
            .iter()
            .find_map(|d| std::fs::read_to_string(format!("{d}/ebee-top.service")).ok())
            .unwrap();
        let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
        assert!(!exec.contains("--web-config"), "{exec}");
        assert!(unit.contains("#LoadCredential=tls.key:/etc/ebee-top/tls.key"));
    });
    // --purge: the conffile goes too, so the machine is left as it was.
    let (ok, out) = run("dpkg", &["--purge", "ebee-top"]);
    assert!(ok, "dpkg --purge: {out}");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(!Path::new("/usr/bin/ebee-top").exists(), "removed");
    assert!(
        !Path::new("/etc/ebee-top/web-config.yml").exists(),
        "purged"
    );
    let (ok, _) = run("man", &["-w", "ebee-top"]);
    assert!(!ok, "the man page is gone with the package");
}
