//! The deployment files in deploy/ load in the tools that use them: the Prometheus scrape
//! config and alert rules in promtool (and the rules fire on the situations they are for),
//! the Grafana dashboard as JSON whose queries name only metrics ebee-top exports, and the
//! systemd unit in `systemd-analyze verify`. No privileges needed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use ebee_tests::bin;
use ebee_top::frontend::metrics::Meter;
use ebee_top::frontend::metrics::exposition::Kind;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file)
}

fn promtool(args: &[&str]) -> (bool, String) {
    let o = Command::new("promtool")
        .args(args)
        .output()
        .expect("promtool (Debian package prometheus; cargo xtask setup installs it)");
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
fn the_scrape_config_and_the_rules_pass_promtool() {
    let config = deploy("prometheus.yml");
    let (ok, out) = promtool(&["check", "config", config.to_str().unwrap()]);
    assert!(ok, "promtool check config: {out}");
    // The config names the rules file, so this also checked it; check it alone too.
    assert!(out.contains("1 rule files found"), "{out}");
    let rules = deploy("ebee-top-alerts.yml");
    let (ok, out) = promtool(&["check", "rules", rules.to_str().unwrap()]);
    assert!(ok, "promtool check rules: {out}");
}

#[test]
fn the_alerts_fire_when_they_should() {
    let dir = tempfile::tempdir().unwrap();
    let test = dir.path().join("alerts_test.yml");
    let rules = deploy("ebee-top-alerts.yml").canonicalize().unwrap();
    // Host h: one process runs a whole core, another waits 1.5 CPUs' worth: starving.
    // Host ok: the same busy process, but little waiting: no alert.
    std::fs::write(
        &test,
        format!(
            r#"rule_files:
  - {rules}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'ebee_process_cpu_seconds_total{{instance="h",job="ebee-top",pid="1",comm="hog"}}'
        values: '0+60x40'
      - series: 'ebee_process_runqueue_wait_seconds_total{{instance="h",job="ebee-top",pid="2",comm="victim"}}'
        values: '0+90x40'
      - series: 'ebee_process_cpu_seconds_total{{instance="ok",job="ebee-top",pid="3",comm="busy"}}'
        values: '0+60x40'
      - series: 'ebee_process_runqueue_wait_seconds_total{{instance="ok",job="ebee-top",pid="4",comm="w"}}'
        values: '0+6x40'
      - series: 'ebee_cgroup_wait_by_seconds_total{{instance="h",job="ebee-top",cgroup="/db",culprit_cgroup="/batch"}}'
        values: '0+45x40'
      - series: 'ebee_cgroup_wait_by_seconds_total{{instance="h",job="ebee-top",cgroup="/batch",culprit_cgroup="/db"}}'
        values: '0+6x40'
      - series: 'ebee_losses_total{{instance="h",job="ebee-top",pipeline="cpu",kind="sketch_evictions"}}'
        values: '0+1x40'
      - series: 'ebee_losses_total{{instance="ok",job="ebee-top",pipeline="cpu",kind="sketch_evictions"}}'
        values: '0x40'
    alert_rule_test:
      - eval_time: 30m
        alertname: ProcessStarvingOthers
        exp_alerts:
          - exp_labels:
              instance: h
              severity: warning
            exp_annotations:
              summary: "h: a process uses a whole CPU while others wait for one"
              description: "Top CPU user over 0.9 cores and over one CPU of run-queue wait in total for 10 minutes."
      - eval_time: 5m
        alertname: ProcessStarvingOthers
        exp_alerts: []
      - eval_time: 30m
        alertname: CgroupHoldingAnotherWaiting
        exp_alerts:
          - exp_labels:
              instance: h
              job: ebee-top
              cgroup: /db
              culprit_cgroup: /batch
              severity: warning
            exp_annotations:
              summary: "h: /batch holds /db waiting for a CPU (750m CPUs' worth)"
      - eval_time: 30m
        alertname: EbeeTopLosingData
        exp_alerts:
          - exp_labels:
              instance: h
              pipeline: cpu
              kind: sketch_evictions
              severity: info
            exp_annotations:
              summary: "ebee-top on h could not count everything (cpu sketch_evictions)"
"#,
            rules = rules.display()
        ),
    )
    .unwrap();
    let (ok, out) = promtool(&["test", "rules", test.to_str().unwrap()]);
    assert!(ok, "promtool test rules: {out}");
}

/// Every metric name ebee-top can export (histograms with their three series), from the
/// Meter itself fed a Batch with a bit of everything.
fn exported_names() -> BTreeSet<String> {
    let mut m = Meter::new(20);
    let mut b = ebee_top::batch::build::plausible(1, 5);
    b.cost.bpf_ns = Some(1_000);
    b.cost.bpf_runs = Some(1);
    m.ingest(&b);
    let mut names = BTreeSet::new();
    for f in m.snapshot().families() {
        let n = f.exposed_name();
        if f.kind == Kind::Histogram {
            for s in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{n}{s}"));
            }
        }
        names.insert(n);
    }
    names
}

/// The `ebee_...` names a query mentions.
fn names_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("ebee_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

#[test]
fn the_dashboard_and_the_rules_name_only_exported_metrics() {
    let exported = exported_names();
    assert!(
        exported.contains("ebee_process_cpu_seconds_total"),
        "{exported:?}"
    );
    let text = std::fs::read_to_string(deploy("grafana-dashboard.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 6);
    let mut seen = BTreeSet::new();
    for p in panels {
        let targets = p["targets"].as_array().expect("every panel has targets");
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("a PromQL expr");
            let names = names_in(expr);
            assert!(!names.is_empty(), "{expr}");
            for n in names {
                assert!(exported.contains(&n), "dashboard: {n} is not exported");
                seen.insert(n);
            }
        }
    }
    assert!(seen.contains("ebee_process_cpu_seconds_total"));
    assert!(seen.contains("ebee_process_resident_memory_bytes"));
    let rules = std::fs::read_to_string(deploy("ebee-top-alerts.yml")).unwrap();
    let rules: String = rules
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    for n in names_in(&rules) {
        assert!(exported.contains(&n), "alert rules: {n} is not exported");
    }
}

#[test]
fn the_systemd_unit_verifies_and_runs_with_capabilities_not_root() {
    let unit = std::fs::read_to_string(deploy("ebee-top.service")).unwrap();
    let line = |k: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}= in the unit"))
            .to_owned()
    };
    assert!(line("ExecStart").starts_with("/usr/bin/ebee-top serve --listen 127.0.0.1:"));
    assert_eq!(line("Restart"), "on-failure");
    assert_eq!(line("DynamicUser"), "yes");
    for cap in ["CAP_BPF", "CAP_PERFMON"] {
        assert!(line("AmbientCapabilities").contains(cap));
        assert!(line("CapabilityBoundingSet").contains(cap));
    }
    assert!(!unit.contains("User=root") && !line("CapabilityBoundingSet").contains("SYS_ADMIN"));
    let Ok(v) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("SKIPPED systemd-analyze verify: no systemd-analyze on this machine");
        return;
    };
    assert!(v.status.success());
    // Verify a copy whose ExecStart is the binary just built (verify checks it exists); the
    // man page is the Debian package's, not installed here.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("ebee-top.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/bin/ebee-top", bin("ebee-top").to_str().unwrap()),
    )
    .unwrap();
    let o = Command::new("systemd-analyze")
        .args(["verify", "--man=no", copy.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.trim().is_empty(),
        "systemd-analyze verify: {err}"
    );
}

/// The unit's commented-out blocks (TLS through LoadCredential=, the unix socket): each, with
/// its lines uncommented as a drop-in would add them, still passes `systemd-analyze verify`,
/// and the TLS one names the web config and key through the credentials directory.
#[test]
fn the_units_commented_tls_and_unix_socket_blocks_verify() {
    let unit = std::fs::read_to_string(deploy("ebee-top.service")).unwrap();
    // Runs of consecutive `#Key=value` lines.
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    let mut prev_was_setting = false;
    for l in unit.lines() {
        let setting = l.strip_prefix('#').filter(|r| {
            r.split_once('=')
                .is_some_and(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric()))
        });
        match (setting, prev_was_setting) {
            (Some(s), true) => blocks.last_mut().unwrap().push(s),
            (Some(s), false) => blocks.push(vec![s]),
            (None, _) => {}
        }
        prev_was_setting = setting.is_some();
    }
    assert_eq!(
        blocks.len(),
        2,
        "the TLS block and the unix socket block: {blocks:?}"
    );
    let tls = blocks[0].join("\n");
    assert!(
        tls.contains("LoadCredential=tls.key:/etc/ebee-top/tls.key"),
        "{tls}"
    );
    assert!(tls.contains("--web-config %d/web-config.yml"), "{tls}");
    let web = std::fs::read_to_string(deploy("web-config.yml")).unwrap();
    for (key, cred) in [
        ("cert_file", "tls.crt"),
        ("key_file", "tls.key"),
        ("client_ca_file", "client-ca.crt"),
    ] {
        // Relative to the web config's folder: the credentials directory.
        assert!(web.contains(&format!("{key}: {cred}\n")), "{key}");
        assert!(
            tls.contains(&format!("LoadCredential={cred}:/etc/ebee-top/{cred}")),
            "{cred}"
        );
    }
    let unix = blocks[1].join("\n");
    assert!(
        unix.contains("--listen unix:/run/ebee-top/metrics.sock --listen-group"),
        "{unix}"
    );
    assert!(unix.contains("RuntimeDirectory=ebee-top"), "{unix}");
    let Ok(v) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("SKIPPED systemd-analyze verify: no systemd-analyze on this machine");
        return;
    };
    assert!(v.status.success());
    for block in &blocks {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("ebee-top.service");
        // The settings go at the end of [Service], where a drop-in's would apply.
        let text = unit.replace(
            "\n[Install]",
            &format!("\n{}\n\n[Install]", block.join("\n")),
        );
        std::fs::write(
            &copy,
            text.replace("/usr/bin/ebee-top", bin("ebee-top").to_str().unwrap()),
        )
        .unwrap();
        let o = Command::new("systemd-analyze")
            .args(["verify", "--man=no", copy.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && err.trim().is_empty(),
            "systemd-analyze verify with {block:?}: {err}"
        );
    }
}
