//! Recording, replay and export end to end: a live privileged run recorded and replayed gives
//! the same Batches, the same Model and the same screens; export prints what batch mode
//! printed; a recording killed with SIGKILL replays up to its last whole interval; bad files
//! and paths get one line and their exit code; replay runs without privileges.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ebee_tests::{bin, ebee_top, load, privileged};
use ebee_top::app::App;
use ebee_top::batch::Batch;
use ebee_top::model::Model;
use ebee_top::probes::ProbeConfig;
use ebee_top::record::codec::rounded;
use ebee_top::record::writer::{RecordOptions, Writer, local_meta};
use ebee_top::record::{Reader, Recorder, Timeline};
use ebee_top::source::replay::Replay;
use ebee_top::source::{Live, Source, Tee};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Draw the App into a test terminal and return the screen.
fn screen(app: &App) -> ratatui::buffer::Buffer {
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(120, 40)).unwrap();
    t.draw(|f| ebee_top::view::render(app, &Default::default(), f))
        .unwrap();
    t.backend().buffer().clone()
}

#[test]
fn a_recorded_live_run_replays_the_same_frames_model_and_screens() {
    if !privileged("a_recorded_live_run_replays_the_same_frames_model_and_screens") {
        return;
    }
    let _busy = load(&["burn", "--duty", "0.7", "--period-ms", "7"]);
    let _churn = load(&[
        "mix",
        "--procs",
        "20",
        "--churn-per-s",
        "50",
        "--seconds",
        "30",
    ]);
    let dir = tmp();
    let path = dir.path().join("live.ebr");
    let interval = Duration::from_millis(50);
    let live = Live::start(ProbeConfig::default(), interval).unwrap();
    let w = Writer::create(
        RecordOptions {
            path: path.clone(),
            force: false,
            max_size: None,
            rotate: None,
        },
        local_meta(interval),
    )
    .unwrap();
    let rec = Recorder::start(w, Box::new(|_| {})).unwrap();
    let mut src = Tee {
        inner: live,
        tap: rec.tap(),
    };
    // Format 2 keeps each process's on-CPU and wait time to the µs (codec::rounded): the
    // screens are those of the live batches so rounded.
    let mut live_batches: Vec<Batch> = Vec::new();
    let mut live_app = App::new(20, interval);
    let mut live_screens = Vec::new();
    for _ in 0..60 {
        let b = rounded(&src.next_batch().unwrap().unwrap());
        live_app.model.ingest(&b);
        live_screens.push(screen(&live_app));
        live_batches.push(b);
    }
    drop(src);
    let st = rec.finish();
    assert_eq!(st.records, 60);
    assert_eq!(st.dropped, 0);
    assert!(st.stopped.is_none());
    assert!(
        live_batches.iter().any(|b| !b.exits.is_empty()),
        "the churn produced exits"
    );

    let mut replay = Replay::new(Timeline::open(&path).unwrap(), &path, 1.0, false);
    assert!(replay.timeline().notes().is_empty());
    let mut app = App::new(20, interval);
    let mut live_model = Model::new();
    for (i, want) in live_batches.iter().enumerate() {
        let got = replay
            .next_batch()
            .unwrap()
            .expect("as many intervals as recorded");
        assert_eq!(&got, want, "interval {i}");
        app.model.ingest(&got);
        live_model.ingest(want);
        assert_eq!(app.model.top_cpu(10_000), live_model.top_cpu(10_000));
        assert_eq!(screen(&app), live_screens[i], "screen after interval {i}");
    }
    assert!(replay.next_batch().unwrap().is_none());
}

/// Export output against batch mode's: the same lines, but the recording keeps each process's
/// run-queue waits to 4 µs, its sleep to 500 µs and its other times to the µs, so an `_ns`
/// figure may differ by up to 2 µs (250 µs, 500 ns) per interval it sums and a percentage or a printed decimal by its last digit.
fn same_but_for_microseconds(exported: &str, live: &str, fmt: &str) {
    fn close(a: &serde_json::Value, b: &serde_json::Value, key: &str) -> bool {
        use serde_json::Value as V;
        match (a, b) {
            (V::Object(x), V::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .all(|(k, v)| y.get(k).is_some_and(|w| close(v, w, k)))
            }
            (V::Array(x), V::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(v, w)| close(v, w, key))
            }
            (V::Number(x), V::Number(y)) if x.is_f64() || y.is_f64() => {
                (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() <= 0.011
            }
            // Sleep is kept to 500 µs.
            (V::Number(x), V::Number(y)) if key == "sleep_ns" => {
                x.as_u64().unwrap().abs_diff(y.as_u64().unwrap()) <= 250_000 * 40
            }
            // Run-queue waits are kept to 4 µs (at 50 ms; codec::wait_step_ns).
            (V::Number(x), V::Number(y)) if key == "wait_ns" || key == "caused_wait_ns" => {
                x.as_u64().unwrap().abs_diff(y.as_u64().unwrap()) <= 2_000 * 40
            }
            (V::Number(x), V::Number(y)) if key.ends_with("_ns") => {
                x.as_u64().unwrap().abs_diff(y.as_u64().unwrap()) <= 500 * 40
            }
            _ => a == b,
        }
    }
    // Batch mode's own /proc readings (`host`) are not recorded: null in an export.
    let live_lines = live.lines().filter(|l| !l.starts_with("host: "));
    let (e, l): (Vec<&str>, Vec<&str>) = (exported.lines().collect(), live_lines.collect());
    assert_eq!(e.len(), l.len(), "{fmt}: line count");
    for (x, y) in e.iter().zip(&l) {
        if fmt == "json" {
            let (a, mut b): (serde_json::Value, serde_json::Value) = (
                serde_json::from_str(x).unwrap(),
                serde_json::from_str(y).unwrap(),
            );
            assert!(a["host"].is_null(), "{x}");
            assert!(b["host"]["cpus"].is_array(), "{y}");
            b["host"] = serde_json::Value::Null;
            assert!(close(&a, &b, ""), "{fmt}:\n{x}\n{y}");
        } else {
            let (a, b): (Vec<&str>, Vec<&str>) = (
                x.split_whitespace().collect(),
                y.split_whitespace().collect(),
            );
            assert_eq!(a.len(), b.len(), "{fmt}:\n{x}\n{y}");
            for (u, v) in a.iter().zip(&b) {
                // A number with what surrounds it ("63.3%,"): the number within a last digit,
                // the rest the same.
                let num = |s: &str| {
                    let t = s.trim_matches(|c: char| !(c.is_ascii_digit() || c == '.'));
                    t.parse::<f64>().ok().map(|x| (x, s.replacen(t, "", 1)))
                };
                match (num(u), num(v)) {
                    (Some((p, r)), Some((q, t))) => {
                        assert!((p - q).abs() <= 0.11 && r == t, "{fmt}:\n{x}\n{y}")
                    }
                    _ => assert_eq!(u, v, "{fmt}:\n{x}\n{y}"),
                }
            }
        }
    }
}

#[test]
fn export_prints_what_batch_mode_printed() {
    if !privileged("export_prints_what_batch_mode_printed") {
        return;
    }
    let _churn = load(&[
        "mix",
        "--procs",
        "10",
        "--churn-per-s",
        "40",
        "--seconds",
        "20",
    ]);
    let dir = tmp();
    let f = dir.path().join("b.ebr");
    let fs = f.to_str().unwrap();
    for (fmt, k) in [("json", "5"), ("text", "20")] {
        let _ = std::fs::remove_file(&f);
        let (code, live, err) =
            ebee_top(&["-b", "-n", "40", "-k", k, "--format", fmt, "--record", fs]);
        assert_eq!(code, 0, "{err}");
        assert!(err.is_empty(), "nothing on stderr: {err}");
        let (code, exported, err) = ebee_top(&["export", fs, "--format", fmt, "-k", k]);
        assert_eq!(code, 0, "{err}");
        assert!(err.is_empty(), "{err}");
        same_but_for_microseconds(&exported, &live, fmt);
    }
    // The file is the operator's alone.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&f).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // CSV: one header and one row per interval; --from/--to select.
    let (code, csv, err) = ebee_top(&["export", fs, "--format", "csv", "--table", "intervals"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("t_ms,seq,interval_ns"));
    assert_eq!(lines.len(), 41);
    let (_, part, _) = ebee_top(&[
        "export",
        fs,
        "--format",
        "csv",
        "--table",
        "intervals",
        "--from",
        "+1s",
        "--to",
        "-0.5s",
    ]);
    let n = part.lines().count() - 1;
    assert!((5..=25).contains(&n), "{n} rows between +1s and -0.5s");
    let (code, cpu, _) = ebee_top(&["export", fs, "--format", "csv", "--table", "cpu", "-k", "3"]);
    assert_eq!(code, 0);
    assert!(cpu.lines().count() > 40 && cpu.lines().count() <= 121);
    // Resident memory: the top 3 of every interval (the machine always has 3 processes).
    let (code, mem, _) = ebee_top(&["export", fs, "--format", "csv", "--table", "mem", "-k", "3"]);
    assert_eq!(code, 0);
    assert!(mem.starts_with("t_ms,seq,rank,pid,comm,rss_bytes,rss_delta_bytes"));
    assert_eq!(mem.lines().count(), 1 + 40 * 3);
}

#[test]
fn kill_9_while_recording_loses_at_most_the_interval_being_written() {
    if !privileged("kill_9_while_recording_loses_at_most_the_interval_being_written") {
        return;
    }
    let _busy = load(&[
        "mix",
        "--procs",
        "30",
        "--churn-per-s",
        "20",
        "--seconds",
        "20",
    ]);
    let dir = tmp();
    let f = dir.path().join("k.ebr");
    let mut c = Command::new(bin("ebee-top"))
        .args(["-b", "--format", "json", "--record", f.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut printed = 0u64;
    let mut line = String::new();
    while printed < 40 {
        line.clear();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        printed += 1;
    }
    c.kill().unwrap(); // SIGKILL
    c.wait().unwrap();
    let mut r = Reader::open(&f).unwrap();
    // Whole records only; at most one torn at the end.
    assert!(r.damage().len() <= 1, "{:?}", r.damage());
    let n = r.len() as u64;
    assert!(
        n + 2 >= printed,
        "only {n} of {printed} printed intervals recorded"
    );
    for i in 0..r.len() {
        assert_eq!(r.read(i).unwrap().seq, i as u64 + 1, "no gap");
    }
    let (code, exported, err) = ebee_top(&["export", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(exported.lines().count() as u64, n);
}

#[test]
fn recording_refuses_symlinks_directories_and_existing_files() {
    if !privileged("recording_refuses_symlinks_directories_and_existing_files") {
        return;
    }
    let dir = tmp();
    let existing = dir.path().join("existing");
    std::fs::write(&existing, b"keep me").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&existing, &link).unwrap();
    for (p, force, what) in [
        (&existing, false, "already exists"),
        (&link, false, "symbolic link"),
        (&link, true, "symbolic link"),
        (&dir.path().to_path_buf(), true, "directory"),
    ] {
        let mut args = vec!["-b", "-n", "2", "--record", p.to_str().unwrap()];
        if force {
            args.push("--force");
        }
        let (code, out, err) = ebee_top(&args);
        assert_eq!(code, ::ebee_top::exit::BAD_PATH, "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(what), "{err}");
        assert!(out.is_empty());
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
    // --force replaces a regular file.
    let (code, _, err) = ebee_top(&[
        "-b",
        "-n",
        "2",
        "--record",
        existing.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(Reader::open(&existing).unwrap().len(), 2);
}

/// A small recording made without the kernel (no privileges needed).
fn synthetic(path: &Path, n: u64) {
    synthetic_at(path, n, 1_700_000_000_000);
}

/// `n` intervals of 50 ms, the first at `t0_ms` + 50.
fn synthetic_at(path: &Path, n: u64, t0_ms: u64) {
    let mut w = Writer::create(
        RecordOptions {
            path: path.into(),
            force: true,
            max_size: None,
            rotate: None,
        },
        local_meta(Duration::from_millis(50)),
    )
    .unwrap();
    for seq in 1..=n {
        let b = Batch::build(seq, seq * 50_000_000, 50_000_000)
            .wall_ms(t0_ms + seq * 50)
            .cpus(2, 0)
            .cpu(42, 25_000_000, &[])
            .proc(ebee_top::batch::ProcInfo::named(42, "worker"))
            .done();
        w.append(&b).unwrap();
    }
}

#[test]
fn bad_recordings_get_one_line_and_their_exit_code() {
    use ::ebee_top::exit::{BAD_PATH, BAD_RECORDING, NEWER_RECORDING};
    let dir = tmp();
    let p = |n: &str| dir.path().join(n);
    let good = p("good.ebr");
    synthetic(&good, 20);
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(p("empty"), b"").unwrap();
    std::fs::write(p("text"), b"hello\n").unwrap();
    let mut newer = bytes.clone();
    newer[8] = 200;
    std::fs::write(p("newer"), &newer).unwrap();
    let header_len = Reader::open(&good).unwrap().entries()[0].offset as usize;
    std::fs::write(p("header-only"), &bytes[..header_len]).unwrap();
    // A directory is a flight recorder's folder: one with no recording in it is refused.
    let empty_dir = p("empty-dir");
    std::fs::create_dir(&empty_dir).unwrap();
    std::fs::write(empty_dir.join("notes.txt"), b"not a recording").unwrap();
    let cases: Vec<(PathBuf, i32, &str)> = vec![
        (p("missing"), BAD_PATH, "no such file"),
        (empty_dir.clone(), BAD_RECORDING, "no recording in it"),
        (p("empty"), BAD_RECORDING, "empty"),
        (p("text"), BAD_RECORDING, "not an ebee-top recording"),
        (p("newer"), NEWER_RECORDING, "newer ebee-top"),
        (p("header-only"), BAD_RECORDING, "no complete interval"),
    ];
    for (path, want, what) in &cases {
        for sub in ["replay", "export"] {
            let (code, out, err) = ebee_top(&[sub, path.to_str().unwrap()]);
            assert_eq!(code, *want, "{sub} {path:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{sub}: {err}");
            assert!(err.contains(what), "{sub}: {err}");
            assert!(!err.contains("panicked"));
            assert!(out.is_empty());
        }
    }

    // The folder of all of them plays its one good recording; the two it cannot use are a
    // line each, the files that are not recordings are ignored.
    let (code, out, err) = ebee_top(&["export", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 20, "{err}");
    assert_eq!(err.trim().lines().count(), 2, "{err}");
    assert!(
        err.contains("newer ebee-top") && err.contains("no complete interval"),
        "{err}"
    );

    // Cut in the middle of the 11th record: ten intervals and one line saying so.
    let r = Reader::open(&good).unwrap();
    let e = r.entries()[10];
    let cut = (e.offset + e.head.total_len() / 2) as usize;
    std::fs::write(p("cut"), &bytes[..cut]).unwrap();
    let (code, out, err) = ebee_top(&["export", p("cut").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 10);
    assert!(
        err.contains("ends early") && err.contains(&format!("byte {}", e.offset)),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);

    // A bad checksum in the 5th: skipped with a warning, the rest exported. In format 3 the
    // deltas after it up to the next key were coded against it: skipped too, each said.
    let mut bad = bytes.clone();
    let e = r.entries()[4];
    // A byte in the middle of its payload (a short delta's head is 13 bytes or so).
    bad[(e.offset + e.head.head_len() + u64::from(e.head.payload_len) / 2) as usize] ^= 0x10;
    std::fs::write(p("bad"), &bad).unwrap();
    let next_key = (5..r.len())
        .find(|&i| r.entries()[i].head.kind == ebee_top::record::format::KIND_KEY)
        .unwrap_or(r.len());
    let (code, out, err) = ebee_top(&["export", p("bad").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), r.len() - (next_key - 4));
    assert!(err.contains("checksum"), "{err}");
    assert_eq!(err.lines().count(), next_key - 4, "{err}");
    if next_key > 5 {
        assert!(
            err.contains("depends on a damaged interval before it"),
            "{err}"
        );
    }
}

/// tmux with a fixed-size pane running `cmd`; killed on drop.
struct Tmux(String);

impl Tmux {
    fn start(name: &str, cmd: &str) -> Self {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", name])
            .stderr(Stdio::null())
            .status();
        let st = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                name,
                "-x",
                "120",
                "-y",
                "30",
                cmd,
            ])
            .status()
            .expect("tmux");
        assert!(st.success());
        Self(name.into())
    }

    fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        Command::new("tmux")
            .args(["send-keys", "-t", &self.0])
            .args(keys)
            .status()
            .unwrap();
    }

    /// Wait until the screen contains `s` (or fail with what it shows).
    fn wait_for(&self, s: &str) -> String {
        let mut last = String::new();
        for _ in 0..100 {
            last = self.screen();
            if last.contains(s) {
                return last;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("screen never showed {s:?}:\n{last}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn replay_screen_steers_without_privileges() {
    let dir = tmp();
    let f = dir.path().join("tui.ebr");
    synthetic(&f, 2000); // 100 s at 50 ms
    // Readable by nobody, who runs the replay with no capabilities at all.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let cmd = format!(
        "{}{} replay {} --paused",
        if root {
            "setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all -- "
        } else {
            ""
        },
        bin("ebee-top").display(),
        f.display()
    );
    let t = Tmux::start("ebee-rec-test", &cmd);
    let s = t.wait_for("paused");
    assert!(s.contains("#0/2000"), "{s}");
    t.keys(&["."]);
    let s = t.wait_for("#1/2000");
    assert!(s.contains("worker"), "{s}");
    t.keys(&["Right"]);
    t.wait_for("#201/2000");
    t.keys(&["Left"]);
    t.wait_for("#1/2000");
    t.keys(&["End"]);
    t.wait_for("#2000/2000");
    t.keys(&["g", "+", "5", "0", "Enter"]);
    t.wait_for("#1001/2000");
    t.keys(&[">", ">"]);
    t.wait_for("4x");
    t.keys(&["Space"]);
    t.wait_for("playing");
    t.keys(&["q"]);
}

#[test]
fn a_folder_replays_as_one_timeline_across_files_and_its_gap() {
    let dir = tmp();
    // Two runs of the agent, 30 minutes apart; a file that is not a recording beside them.
    let t0 = 1_700_000_000_000; // 2023-11-14 22:13:20 UTC
    synthetic_at(&dir.path().join("ebee-top-20231114T221320Z.ebr"), 400, t0);
    let t1 = t0 + 400 * 50 + 1_800_000; // 22:43:40
    synthetic_at(&dir.path().join("ebee-top-20231114T224340Z.ebr"), 400, t1);
    std::fs::write(dir.path().join("notes.txt"), b"not a recording").unwrap();
    let cmd = format!(
        "{} replay {} --paused",
        bin("ebee-top").display(),
        dir.path().display()
    );
    let t = Tmux::start("ebee-rec-dir", &cmd);
    let s = t.wait_for("paused");
    assert!(s.contains("#0/800"), "{s}");
    assert!(s.contains("(2 files, 1 gaps of 30m 0s in all)"), "{s}");
    assert!(s.contains("UTC"), "{s}");
    // Go to the first interval after the gap by its time of day.
    t.keys(&["g", "2", "2", ":", "4", "3", ":", "4", "0", "Enter"]);
    let s = t.wait_for("#401/800");
    assert!(
        s.contains("gap: nothing was recorded for 30m 0s before this interval"),
        "{s}"
    );
    assert!(s.contains("worker"), "{s}");
    // Back across the file boundary, and forward again: no seam but the gap.
    t.keys(&[","]);
    let s = t.wait_for("#400/800");
    assert!(s.contains("worker") && !s.contains("gap:"), "{s}");
    t.keys(&["."]);
    t.wait_for("#401/800");
    t.keys(&["End"]);
    t.wait_for("#800/800");
    t.keys(&["q"]);
}
