//! The host's verdict on one guest's readings: for each pipeline, it works (its numbers agree
//! with the kernel's own counters), it is off (and ebee-top said why, the same in batch JSON
//! and `--print-maps`), or it fails. The rules and their tolerances live here, not in the guest
//! script, which only measures.

use std::collections::HashMap;

use serde_json::Value;

/// The columns of the kernel table, in order.
pub const COLUMNS: [&str; 9] = [
    "cpu",
    "waits",
    "io",
    "cgroups",
    "memory",
    "servers",
    "syscalls",
    "serve",
    "clean exit",
];

/// One cell of the table.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Works; what was compared, e.g. `0.4% off schedstat`.
    Works(String),
    /// Off on this kernel, with ebee-top's own reason.
    Off(String),
    /// Neither: a bug (or a missing reason).
    Fail(String),
}

impl Verdict {
    pub fn cell(&self) -> String {
        match self {
            Verdict::Works(d) => format!("works ({d})"),
            Verdict::Off(r) => format!("off: {r}"),
            Verdict::Fail(d) => format!("FAIL: {d}"),
        }
    }
}

/// Relative tolerances. The compared numbers come from the same kernel clock or counter, read
/// at interval boundaries instead of at the exact moments the guest read its files, and a
/// TCG guest is slow, so a few percent; the memory reading is a percpu counter sum against
/// /proc's approximate read of it.
const CPU_TOL: f64 = 0.03;
const WAIT_TOL: f64 = 0.05;
const IO_TOL: f64 = 0.02;
const REQ_TOL: f64 = 0.02;
const MEM_TOL_BYTES: f64 = 2.0 * 1024.0 * 1024.0;

/// The files the guest sent: name to contents.
pub type Files = HashMap<String, String>;

/// Split the guest's framed serial output into its files.
pub fn parse_files(text: &str) -> Files {
    let mut files = Files::new();
    let mut cur: Option<(String, String)> = None;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(name) = line.strip_prefix("@@ebee-file ") {
            cur = Some((name.to_owned(), String::new()));
        } else if line == "@@ebee-end" {
            if let Some((name, body)) = cur.take() {
                files.insert(name, body.trim_end().to_owned());
            }
        } else if let Some((_, body)) = cur.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    files
}

/// The verdict for every column of one kernel's row.
pub fn judge(files: &Files) -> Vec<(&'static str, Verdict)> {
    let g = Guest::new(files);
    COLUMNS
        .iter()
        .map(|&c| {
            let v = match g.load_failure() {
                Some(f) if c != "clean exit" => Verdict::Fail(f),
                _ => match c {
                    "cpu" => g.cpu(),
                    "waits" => g.waits(),
                    "io" => g.io(),
                    "cgroups" => g.cgroups(),
                    "memory" => g.memory(),
                    "servers" => g.servers(),
                    "syscalls" => g.syscalls(),
                    "serve" => g.serve(),
                    _ => g.clean_exit(),
                },
            };
            (c, v)
        })
        .collect()
}

struct Guest<'a> {
    files: &'a Files,
    lines: Vec<Value>,
}

/// How far `got` is from `want`, relative to `want`.
fn rel(got: f64, want: f64) -> f64 {
    if want == 0.0 {
        if got == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        (got - want).abs() / want
    }
}

impl<'a> Guest<'a> {
    fn new(files: &'a Files) -> Self {
        let lines = files
            .get("batch.json")
            .map(|t| {
                t.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .collect()
            })
            .unwrap_or_default();
        Self { files, lines }
    }

    fn file(&self, name: &str) -> Option<&str> {
        self.files.get(name).map(String::as_str)
    }

    fn number(&self, name: &str) -> Option<u64> {
        self.file(name)?.split_whitespace().next()?.parse().ok()
    }

    /// The run as a whole: ebee-top loaded, printed intervals, exited cleanly.
    fn load_failure(&self) -> Option<String> {
        if self.file("kernel").is_none() {
            return Some("the guest sent nothing (see its console log)".into());
        }
        let rc = self.number("batch_rc");
        if rc != Some(0) || self.lines.len() < 3 {
            let err = self
                .file("batch.err")
                .unwrap_or("")
                .lines()
                .last()
                .unwrap_or("");
            return Some(format!(
                "ebee-top -b exited with {rc:?} after {} intervals: {err}",
                self.lines.len()
            ));
        }
        if self.file("sched_a1").is_none() {
            return Some("the workloads did not run (see the guest log)".into());
        }
        None
    }

    /// The reason `--print-maps` gives for pipeline `name` being off, if it says it is off.
    fn maps_off(&self, name: &str) -> Option<String> {
        self.file("maps")?.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.trim_start();
            rest.strip_prefix("off: ").map(str::to_owned)
        })
    }

    /// The batch run's stderr line for pipeline `name`, if it said it was off.
    fn batch_off(&self, name: &str) -> Option<String> {
        let prefix = format!("ebee-top: {name} pipeline off: ");
        self.file("batch.err")?
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
    }

    /// `available` of `stats.field` in every interval: Some(true/false) when all agree.
    fn available(&self, stats: &str, field: &str) -> Option<bool> {
        let mut all = self.lines.iter().map(|l| l[stats][field].as_bool());
        let first = all.next()??;
        all.all(|v| v == Some(first)).then_some(first)
    }

    /// Off, said the same way in JSON (`available` false), on stderr and in --print-maps; or
    /// a failure naming what disagrees. None: the pipeline is on.
    fn off(&self, name: &str, available: Option<bool>) -> Option<Verdict> {
        let maps = self.maps_off(name);
        let batch = self.batch_off(name);
        match (available, maps, batch) {
            (Some(true), None, None) => None,
            (Some(false), Some(m), Some(b)) if m == b => Some(Verdict::Off(m)),
            (a, m, b) => Some(Verdict::Fail(format!(
                "inconsistent: available {a:?}, --print-maps {m:?}, stderr {b:?}"
            ))),
        }
    }

    fn burners(&self) -> Option<[u64; 3]> {
        let v: Vec<u64> = self
            .file("burners")?
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect();
        v.try_into().ok()
    }

    /// Field `i` (0: on-CPU ns, 1: run-queue wait ns) of the first burner's schedstat, from
    /// before it was let run to after it was stopped.
    fn sched_delta(&self, i: usize) -> Option<u64> {
        let at = |f: &str| -> Option<u64> { self.file(f)?.split_whitespace().nth(i)?.parse().ok() };
        Some(at("sched_a1")?.saturating_sub(at("sched_a0")?))
    }

    /// Sum of `field` over the entries of array `arr` whose `pid` is `pid`, all intervals.
    fn sum(&self, arr: &str, pid: u64, field: &str) -> u64 {
        self.lines
            .iter()
            .filter_map(|l| l[arr].as_array())
            .flatten()
            .filter(|e| e["pid"].as_u64() == Some(pid))
            .filter_map(|e| e[field].as_u64())
            .sum()
    }

    fn cpu(&self) -> Verdict {
        let (Some(b), Some(want)) = (self.burners(), self.sched_delta(0)) else {
            return Verdict::Fail("no burner readings".into());
        };
        let got = self.sum("cpu", b[0], "cpu_ns");
        // Ranking, in the intervals of the burners alone: where the first burner used half a
        // CPU or more and the server and its client (as busy as a burner under TCG) used next to
        // nothing, a burner heads the list.
        let others = [self.number("server"), self.number("client_pid")];
        let pct = |c: &[Value], pid: Option<u64>| {
            c.iter()
                .find(|e| pid.is_some() && e["pid"].as_u64() == pid)
                .and_then(|e| e["cpu_pct"].as_f64())
                .unwrap_or(0.0)
        };
        let alone: Vec<&Value> = self
            .lines
            .iter()
            .filter(|l| {
                l["cpu"].as_array().is_some_and(|c| {
                    pct(c, Some(b[0])) >= 50.0 && others.iter().all(|&p| pct(c, p) < 2.0)
                })
            })
            .collect();
        let misranked: Vec<String> = alone
            .iter()
            .filter(|l| !b.iter().any(|p| l["cpu"][0]["pid"].as_u64() == Some(*p)))
            .map(|l| format!("seq {} headed by pid {}", l["seq"], l["cpu"][0]["pid"]))
            .collect();
        let err = rel(got as f64, want as f64);
        if alone.is_empty() {
            Verdict::Fail("no interval of the burners alone".into())
        } else if !misranked.is_empty() {
            Verdict::Fail(format!(
                "{} intervals not headed by a burner ({})",
                misranked.len(),
                misranked.join(", ")
            ))
        } else if err > CPU_TOL || want == 0 {
            Verdict::Fail(format!("on-CPU {got} ns vs schedstat {want} ns"))
        } else {
            Verdict::Works(format!("{:.2}% off schedstat", err * 100.0))
        }
    }

    fn waits(&self) -> Verdict {
        if let Some(v) = self.off("waits", self.available("wait_stats", "available")) {
            return v;
        }
        let (Some(b), Some(want)) = (self.burners(), self.sched_delta(1)) else {
            return Verdict::Fail("no burner readings".into());
        };
        let got = self.sum("cpu", b[0], "wait_ns");
        let err = rel(got as f64, want as f64);
        if err > WAIT_TOL || want == 0 {
            Verdict::Fail(format!("waited {got} ns vs schedstat run_delay {want} ns"))
        } else {
            Verdict::Works(format!("{:.2}% off run_delay", err * 100.0))
        }
    }

    fn io(&self) -> Verdict {
        if let Some(v) = self.off("io", self.available("wait_stats", "io_available")) {
            return v;
        }
        if let Some(why) = self.file("disk_none") {
            return Verdict::Fail(format!("not measured: {why}"));
        }
        let want = self.file("disk_io").and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
        let (Some(pid), Some(want)) = (self.number("disk_pid"), want) else {
            return Verdict::Fail("no disk writer readings".into());
        };
        let got = self.sum("io", pid, "write_bytes");
        let err = rel(got as f64, want as f64);
        if err > IO_TOL || want == 0 {
            Verdict::Fail(format!("wrote {got} B vs /proc/PID/io {want} B"))
        } else {
            Verdict::Works(format!("{:.2}% off /proc/PID/io", err * 100.0))
        }
    }

    fn cgroups(&self) -> Verdict {
        if let Some(v) = self.off("cgroups", self.available("cgroup_stats", "available")) {
            return v;
        }
        let (Some(b), Some(want)) = (self.burners(), self.sched_delta(0)) else {
            return Verdict::Fail("no burner readings".into());
        };
        let got: u64 = self
            .lines
            .iter()
            .filter_map(|l| l["cgroups"].as_array())
            .flatten()
            .filter(|e| e["path"].as_str() == Some("/ebee-check"))
            .filter_map(|e| e["cpu_ns"].as_u64())
            .sum();
        let labelled = self.lines.iter().any(|l| {
            l["cpu"].as_array().is_some_and(|c| {
                c.iter().any(|e| {
                    e["pid"].as_u64() == Some(b[0]) && e["cgroup"].as_str() == Some("/ebee-check")
                })
            })
        });
        let err = rel(got as f64, want as f64);
        if !labelled {
            Verdict::Fail("the burner's row never named its cgroup /ebee-check".into())
        } else if err > CPU_TOL || want == 0 {
            Verdict::Fail(format!("cgroup on-CPU {got} ns vs schedstat {want} ns"))
        } else {
            Verdict::Works(format!("{:.2}% off schedstat", err * 100.0))
        }
    }

    fn memory(&self) -> Verdict {
        if let Some(v) = self.off("memory", self.available("mem_stats", "available")) {
            return v;
        }
        let want = self.file("mem_vmrss").and_then(|t| {
            t.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<u64>().ok())
                .map(|kb| kb * 1024)
        });
        let (Some(pid), Some(want)) = (self.number("mem_pid"), want) else {
            return Verdict::Fail("no memory holder readings".into());
        };
        // Its last reading, from the last interval that lists it.
        let got = self.lines.iter().rev().find_map(|l| {
            l["mem"]
                .as_array()?
                .iter()
                .find(|e| e["pid"].as_u64() == Some(pid))?["rss_bytes"]
                .as_u64()
        });
        let Some(got) = got else {
            return Verdict::Fail("the memory holder never appeared in mem[]".into());
        };
        let diff = (got as f64 - want as f64).abs();
        if diff > MEM_TOL_BYTES {
            Verdict::Fail(format!("RSS {got} B vs VmRSS {want} B"))
        } else {
            Verdict::Works(format!(
                "{:.2}% off VmRSS",
                100.0 * rel(got as f64, want as f64)
            ))
        }
    }

    /// Requests the client completed (all within the batch run).
    fn client_requests(&self) -> Option<u64> {
        self.number("client.out")
    }

    fn servers(&self) -> Verdict {
        if let Some(v) = self.off("servers", self.available("servers_stats", "available")) {
            return v;
        }
        let (Some(pid), Some(want)) = (self.number("server"), self.client_requests()) else {
            return Verdict::Fail("no server readings".into());
        };
        let got = self.sum("servers", pid, "requests");
        let err = rel(got as f64, want as f64);
        if err > REQ_TOL || want == 0 {
            Verdict::Fail(format!("found {got} requests vs the client's {want}"))
        } else {
            Verdict::Works(format!(
                "found unpinned, {:.2}% off the client",
                err * 100.0
            ))
        }
    }

    fn syscalls(&self) -> Verdict {
        let pinned = self.batch_off("syscalls").is_none();
        if let Some(v) = self.off("syscalls", Some(pinned)) {
            return v;
        }
        let (Some(pid), Some(want)) = (self.number("server"), self.client_requests()) else {
            return Verdict::Fail("no server readings".into());
        };
        let got = self.sum("qos", pid, "requests");
        let err = rel(got as f64, want as f64);
        if err > REQ_TOL || want == 0 {
            Verdict::Fail(format!(
                "pinned server: {got} requests vs the client's {want}"
            ))
        } else {
            Verdict::Works(format!("pinned, {:.2}% off the client", err * 100.0))
        }
    }

    fn serve(&self) -> Verdict {
        let rc = self.number("serve_rc");
        let scraped = self.file("scrape").is_some_and(|t| {
            t.lines()
                .any(|l| l.starts_with("ebee_process_cpu_seconds_total{"))
        });
        match (rc, scraped) {
            (Some(0), true) => Verdict::Works("scraped, exit 0".into()),
            (rc, s) => Verdict::Fail(format!(
                "serve exit {rc:?}, scrape with process rows: {s}; {}",
                self.file("serve.err")
                    .unwrap_or("")
                    .lines()
                    .last()
                    .unwrap_or("")
            )),
        }
    }

    fn clean_exit(&self) -> Verdict {
        match (self.file("bpf_before"), self.file("bpf_after")) {
            (Some(b), Some(a)) if a == b => Verdict::Works(format!("kernel holds {a}")),
            (b, a) => Verdict::Fail(format!("before {b:?}, after {a:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framed_files_are_split() {
        let text = "noise\n@@ebee-file a\n1 2\n\n@@ebee-end\n@@ebee-file b\r\nx\r\n@@ebee-end\n";
        let f = parse_files(text);
        assert_eq!(f["a"], "1 2");
        assert_eq!(f["b"], "x");
        assert_eq!(f.len(), 2);
    }

    /// A guest whose readings agree, with memory off; then one number changed at a time.
    fn files() -> Files {
        let line = |seq: u64, a_ns: u64, a_wait: u64| {
            format!(
                r#"{{"seq":{seq},"cpu":[{{"pid":10,"cpu_ns":{a_ns},"cpu_pct":90.0,"wait_ns":{a_wait},"cgroup":"/ebee-check"}}],"mem":[],"mem_stats":{{"available":false}},"wait_stats":{{"available":true,"io_available":true}},"io":[{{"pid":40,"write_bytes":500}}],"servers":[{{"pid":20,"requests":50}}],"servers_stats":{{"available":true}},"qos":[{{"pid":20,"requests":50}}],"cgroups":[{{"path":"/ebee-check","cpu_ns":{a_ns}}}],"cgroup_stats":{{"available":true}}}}"#
            )
        };
        let batch = (1..=4)
            .map(|s| line(s, 250, 100))
            .collect::<Vec<_>>()
            .join("\n");
        let reason = "no rss_stat tracepoint with (mm, member) arguments (Linux 6.2+)";
        [
            ("kernel", "6.1.0-57-cloud-amd64".to_owned()),
            ("batch.json", batch),
            ("batch_rc", "0".into()),
            (
                "batch.err",
                format!("ebee-top: memory pipeline off: {reason}"),
            ),
            (
                "maps",
                format!("PIPELINE STATUS\ncpu on\nmemory         off: {reason}\nservers on"),
            ),
            ("burners", "10 11 12".into()),
            ("sched_a0", "1000 500 1".into()),
            ("sched_a1", "2000 900 9".into()),
            ("disk_pid", "40".into()),
            ("disk_io", "read_bytes: 0\nwrite_bytes: 2000".into()),
            ("server", "20".into()),
            ("client.out", "200".into()),
            ("serve_rc", "0".into()),
            (
                "scrape",
                "ebee_process_cpu_seconds_total{pid=\"1\"} 1".into(),
            ),
            ("bpf_before", "programs 0 maps 0".into()),
            ("bpf_after", "programs 0 maps 0".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn verdict(f: &Files, col: &str) -> Verdict {
        judge(f).into_iter().find(|(c, _)| *c == col).unwrap().1
    }

    #[test]
    fn agreeing_readings_work_and_an_off_pipeline_says_why() {
        let f = files();
        for col in COLUMNS {
            let v = verdict(&f, col);
            if col == "memory" {
                assert!(
                    matches!(&v, Verdict::Off(r) if r.contains("rss_stat")),
                    "{v:?}"
                );
            } else {
                assert!(matches!(v, Verdict::Works(_)), "{col}: {v:?}");
            }
        }
    }

    #[test]
    fn each_disagreement_fails_its_column() {
        let cases: [(&str, &str, &str); 6] = [
            ("sched_a1", "2100 900 9", "cpu"),
            ("sched_a1", "2000 1200 9", "waits"),
            ("disk_io", "write_bytes: 3000", "io"),
            ("client.out", "300", "servers"),
            ("bpf_after", "programs 3 maps 50", "clean exit"),
            ("serve_rc", "1", "serve"),
        ];
        for (file, text, col) in cases {
            let mut f = files();
            f.insert(file.into(), text.into());
            assert!(
                matches!(verdict(&f, col), Verdict::Fail(_)),
                "{file} = {text} should fail {col}"
            );
        }
        // A burner-alone interval headed by another process fails the ranking; the same
        // interval with the server busy says nothing of it.
        let mut f = files();
        let head = |other: u64| {
            format!(
                r#"{{"seq":5,"cpu":[{{"pid":{other},"cpu_ns":300,"cpu_pct":95.0}},{{"pid":10,"cpu_ns":0,"cpu_pct":90.0,"wait_ns":0,"cgroup":"/ebee-check"}}]}}"#
            )
        };
        let batch = f["batch.json"].clone();
        f.insert("batch.json".into(), format!("{batch}\n{}", head(77)));
        assert!(
            matches!(verdict(&f, "cpu"), Verdict::Fail(r) if r.contains("pid 77")),
            "a misranked interval passed"
        );
        f.insert("batch.json".into(), format!("{batch}\n{}", head(20)));
        assert!(matches!(verdict(&f, "cpu"), Verdict::Works(_)));
        // Off in JSON but no reason in --print-maps: a failure, not "off".
        let mut f = files();
        f.insert("maps".into(), "PIPELINE STATUS\nmemory on".into());
        assert!(matches!(verdict(&f, "memory"), Verdict::Fail(_)));
        // A run that did not load fails every column but the clean exit.
        let mut f = files();
        f.insert("batch_rc".into(), "1".into());
        assert!(matches!(verdict(&f, "cpu"), Verdict::Fail(_)));
        assert!(matches!(verdict(&f, "clean exit"), Verdict::Works(_)));
    }
}
