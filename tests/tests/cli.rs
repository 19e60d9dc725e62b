//! The real binary end to end: batch output, the JSON schema, privilege errors, signals, and
//! that nothing stays loaded in the kernel after it exits.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::process::{Command, Stdio};
use std::time::Duration;

use ebee_tests::{
    bin, bpf_ids_of, ebee_top, load, loaded_map_ids, loaded_program_ids, privileged, spawn_guarded,
};

#[test]
fn json_lines_follow_the_schema() {
    if !privileged("json_lines_follow_the_schema") {
        return;
    }
    let busy = load(&["burn", "--duty", "1.0"]);
    std::thread::sleep(Duration::from_millis(100));
    let (code, out, err) = ebee_top(&["-b", "-n", "5", "-k", "3", "--format", "json"]);
    assert_eq!(code, 0, "stderr: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5);
    let mut prev_t = 0;
    let mut busy_seen = 0;
    let mut intervals = Vec::new();
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).expect("each line is JSON");
        let t = v["t_ms"].as_u64().expect("t_ms: u64");
        assert!(t >= prev_t);
        prev_t = t;
        let iv = v["interval_ms"].as_u64().expect("interval_ms: u64");
        assert!(iv >= 40, "interval_ms {iv} shorter than -d 0.05");
        intervals.push(iv);
        let cpu = v["cpu"].as_array().expect("cpu: array");
        assert!(cpu.len() <= 3);
        for r in cpu {
            assert!(
                r["pid"]
                    .as_u64()
                    .is_some_and(|p| p > 0 && p <= u64::from(u32::MAX))
            );
            assert!(r["comm"].is_string());
            assert!(r["cpu_ns"].is_u64());
            let pct = r["cpu_pct"].as_f64().expect("cpu_pct: f64");
            assert!(
                (0.0..=100.0 * 1.05).contains(&pct),
                "one process on one CPU: {pct}"
            );
        }
        // The busy child wants a whole CPU; on a shared machine others take part of it (two
        // CPUs, four runnable processes leave it half), so ask for its row among the top 3
        // with at least a quarter of a CPU. How exact the numbers are is the CPU tests' job,
        // against schedstat.
        if let Some(r) = cpu
            .iter()
            .find(|r| r["pid"].as_u64() == Some(u64::from(busy.pid())))
        {
            assert_eq!(r["comm"], "ebee-load");
            if r["cpu_pct"].as_f64().is_some_and(|p| p >= 25.0) {
                busy_seen += 1;
            }
            // The waits pipeline: a number (this kernel has sched_info), not null.
            assert!(r["wait_ns"].is_u64(), "cpu[].wait_ns: {r}");
        }
        for key in ["wait", "io"] {
            for r in v[key].as_array().expect("wait, io: arrays") {
                assert!(r["pid"].is_u64() && r["comm"].is_string(), "{key}: {r}");
            }
        }
        assert_eq!(v["wait_stats"]["available"], true, "wait_stats: {v}");
        assert_eq!(v["wait_stats"]["io_available"], true);
        let d = v["dropped"].as_object().expect("dropped: object");
        for key in [
            "sketch_evicted_ns",
            "sketch_evictions",
            "lifecycle_lost",
            "handshake_timeouts",
        ] {
            assert!(d[key].is_u64(), "dropped.{key}");
        }
    }
    assert!(
        busy_seen >= 4,
        "the busy child was in the top 3 with a quarter of a CPU in only {busy_seen} of 5 \
         intervals:\n{out}"
    );
}

/// `host.cpus[]` against a load of our own: a busy loop pinned to CPU 1 (sched_setaffinity in
/// the child before exec) keeps that CPU busy for the whole run, so /proc/stat's per-interval
/// differences must show CPU 1 busy in every interval the loop spans; each CPU's parts add up
/// to its busy share; memory agrees with /proc/meminfo read here.
#[test]
fn json_host_cpus_see_a_busy_loop_pinned_to_cpu_1() {
    if !privileged("json_host_cpus_see_a_busy_loop_pinned_to_cpu_1") {
        return;
    }
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if ncpus < 2 {
        eprintln!("SKIPPED json_host_cpus_see_a_busy_loop_pinned_to_cpu_1: needs two CPUs");
        return;
    }
    let mut cmd = Command::new(bin("ebee-load"));
    cmd.args(["burn", "--duty", "1.0", "--seconds", "20"])
        .stdin(Stdio::null());
    // SAFETY: runs in the child between fork and exec; sched_setaffinity is a plain syscall on
    // a set built on the child's stack.
    unsafe {
        use std::os::unix::process::CommandExt as _;
        cmd.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(1, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spin = spawn_guarded(&mut cmd).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", spin.pid())).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Cpus_allowed_list:", "1"]),
        "the loop is pinned to CPU 1:\n{status}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let (code, out, err) = ebee_top(&["-b", "--format", "json", "-d", "0.5", "-n", "6"]);
    assert_eq!(code, 0, "stderr: {err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 6, "{out}");
    let mem_total = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024;
    let mut busy1 = Vec::new();
    for (i, v) in lines.iter().enumerate() {
        let cpus = v["host"]["cpus"].as_array().expect("host.cpus: array");
        assert!(!cpus.is_empty() && cpus.len() <= ncpus, "interval {i}: {v}");
        for c in cpus {
            let n = c["cpu"].as_u64().expect("cpu: u64");
            assert!((n as usize) < ncpus, "{c}");
            let part = |k: &str| c[k].as_f64().unwrap_or_else(|| panic!("{k}: f64 in {c}"));
            let busy = part("busy_pct");
            let sum: f64 = [
                "user_pct",
                "system_pct",
                "iowait_pct",
                "irq_pct",
                "steal_pct",
            ]
            .iter()
            .map(|k| part(k))
            .sum();
            assert!((0.0..=100.0).contains(&busy), "{c}");
            // Five parts rounded to 0.01 and the busy share rounded too.
            assert!(
                (sum - busy).abs() <= 0.035,
                "parts {sum} against busy {busy}: {c}"
            );
            if n == 1 {
                busy1.push(busy);
            }
        }
        let m = &v["host"]["mem"];
        let total = m["total_bytes"].as_u64().expect("mem.total_bytes");
        assert_eq!(total, mem_total, "MemTotal does not change");
        let used = m["used_bytes"].as_u64().unwrap();
        let (buffers, cached) = (
            m["buffers_bytes"].as_u64().unwrap(),
            m["cached_bytes"].as_u64().unwrap(),
        );
        assert!(used > 0 && used + buffers + cached <= total, "{m}");
        let s = &v["host"]["swap"];
        assert!(s["used_bytes"].as_u64().unwrap() <= s["total_bytes"].as_u64().unwrap());
    }
    assert_eq!(busy1.len(), 6, "CPU 1 in every interval: {out}");
    // The loop ran before the first interval began and after the last ended; the middle ones
    // are whole intervals of it (the first one spans ebee-top's start as well).
    for (i, b) in busy1.iter().enumerate().skip(1).take(4) {
        assert!(*b > 80.0, "CPU 1 busy {b}% in interval {i}: {busy1:?}");
    }
    drop(spin);
}

#[test]
fn text_batch_mode_prints_a_table() {
    if !privileged("text_batch_mode_prints_a_table") {
        return;
    }
    let (code, out, err) = ebee_top(&["-b", "-n", "2", "-d", "0.1"]);
    assert_eq!(code, 0, "stderr: {err}");
    // One process table per interval (the cgroups block has a %CPU column of its own).
    assert_eq!(out.matches("TIME(ms)  COMMAND").count(), 2, "{out}");
    // And the resident-memory block of each interval.
    assert_eq!(out.matches("RES(MiB)").count(), 2);
}

#[test]
fn print_maps_lists_every_map_with_its_memory() {
    if !privileged("print_maps_lists_every_map_with_its_memory") {
        return;
    }
    let (code, out, err) = ebee_top(&["--print-maps"]);
    assert_eq!(code, 0, "stderr: {err}");
    // Maps of programs that load only when something is pinned are charged too.
    for name in [
        "CPU_SKETCH",
        "CTL",
        "LIFECYCLE",
        "QOS_HIST",
        "QOS_CONNS",
        "MEM_SKETCH",
    ] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing from:\n{out}"));
        let bytes: u64 = line
            .split_whitespace()
            .last()
            .and_then(|b| b.parse().ok())
            .unwrap_or(0);
        assert!(bytes > 0, "{line}");
    }
    let total: u64 = out
        .lines()
        .find(|l| l.starts_with("total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|b| b.parse().ok())
        .expect("a total line");
    let sum: u64 = out
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("total"))
        .filter_map(|l| {
            l.split_whitespace()
                .last()
                .and_then(|b| b.parse::<u64>().ok())
        })
        .sum();
    assert_eq!(total, sum);
}

#[test]
fn without_capabilities_it_says_what_is_missing() {
    if !privileged("without_capabilities_it_says_what_is_missing") {
        return;
    }
    // Root with an empty bounding set has no capabilities after exec; then with CAP_BPF alone.
    for caps in ["-all", "-all,+bpf"] {
        let o = Command::new("setpriv")
            .args([&format!("--bounding-set={caps}"), "--inh-caps=-all", "--"])
            .arg(bin("ebee-top"))
            .args(["-b", "-n", "1"])
            .output()
            .expect("setpriv (util-linux)");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "caps {caps}: stderr {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains("CAP_BPF") && err.contains("CAP_PERFMON") && err.contains("sudo"));
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn bad_flags_exit_2_with_one_message() {
    // No privilege needed: flags are checked before anything is loaded.
    for args in [
        &["-d", "0"][..],
        &["-k", "x"],
        &["--nope"],
        &["-u", "no-such-user-here"],
        &["-u", "root", "-b"],
    ] {
        let (code, out, err) = ebee_top(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty());
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn signals_end_a_batch_run_cleanly_and_nothing_stays_loaded() {
    if !privileged("signals_end_a_batch_run_cleanly_and_nothing_stays_loaded") {
        return;
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let mut c = Command::new(bin("ebee-top"))
            .args(["-b", "--format", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until it is running for real: three intervals printed.
        let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
        let mut lines = Vec::new();
        while lines.len() < 3 {
            let mut l = String::new();
            if std::io::BufRead::read_line(&mut out, &mut l).unwrap() == 0 {
                break;
            }
            lines.push(l);
        }
        assert_eq!(
            lines.len(),
            3,
            "ebee-top stopped printing before the signal"
        );
        let (progs, maps) = bpf_ids_of(c.id());
        assert!(
            progs.len() >= 4 && maps.len() >= 5,
            "loaded while running: {progs:?} {maps:?}"
        );
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, sig) };
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let o = c.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "signal {sig}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        for l in lines.iter().map(String::as_str).chain(rest.lines()) {
            serde_json::from_str::<serde_json::Value>(l.trim_end()).expect("no torn line at exit");
        }
        // The kernel frees programs and maps once their last reference goes; give it a moment.
        std::thread::sleep(Duration::from_millis(200));
        let (live_p, live_m) = (loaded_program_ids(), loaded_map_ids());
        let left: Vec<u32> = progs
            .iter()
            .filter(|p| live_p.contains(p))
            .copied()
            .collect();
        assert!(left.is_empty(), "programs {left:?} left after signal {sig}");
        let left: Vec<u32> = maps
            .iter()
            .filter(|m| live_m.contains(m))
            .copied()
            .collect();
        assert!(left.is_empty(), "maps {left:?} left after signal {sig}");
    }
}

/// `--latency-report` against a reader of the batch output: the reader stamps each JSON line
/// as it arrives (its own wall clock) and subtracts the line's `t_ms` (when its Batch was
/// built, after the drain). That is the report's "shown" latency minus the drain, so the
/// reader's median cannot exceed the report's shown median by more than `t_ms`'s millisecond
/// truncation and the reader's own wake-up (2 ms allowed), and the report counts every
/// interval.
#[test]
fn the_latency_report_agrees_with_a_reader_of_the_output() {
    use std::io::BufRead as _;
    if !privileged("the_latency_report_agrees_with_a_reader_of_the_output") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("latency.json");
    let mut c = std::process::Command::new(ebee_tests::bin("ebee-top"))
        .args([
            "-b",
            "--format",
            "json",
            "-d",
            "0.05",
            "-n",
            "60",
            "--latency-report",
        ])
        .arg(&report)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut lat_ms = Vec::new();
    for line in out.lines() {
        let line = line.unwrap();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            * 1e3;
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        lat_ms.push(now_ms - v["t_ms"].as_f64().unwrap());
    }
    assert!(c.wait().unwrap().success());
    assert_eq!(lat_ms.len(), 60);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["shown"]["count"], 60, "{r}");
    assert_eq!(r["drain"]["count"], 60, "{r}");
    lat_ms.sort_by(f64::total_cmp);
    let reader_p50 = lat_ms[lat_ms.len() / 2];
    let shown_p50 = r["shown"]["p50_us"].as_f64().unwrap() / 1e3;
    eprintln!(
        "reader p50 {reader_p50:.3} ms (min {:.3}), report shown p50 {shown_p50:.3} ms, drain p50 {:.3} ms",
        lat_ms[0],
        r["drain"]["p50_us"].as_f64().unwrap() / 1e3
    );
    assert!(
        lat_ms[0] > -1.0,
        "a line arrived before its batch was built"
    );
    assert!(
        reader_p50 <= shown_p50 + 2.0,
        "reader {reader_p50} ms vs report {shown_p50} ms"
    );
}
