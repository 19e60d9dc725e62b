//! The flight recorder end to end (`serve --record-dir`): two minutes at a 10 ms interval on a
//! busy machine with a 1 MiB budget, killed with SIGKILL twice and restarted: the folder never
//! holds more than the budget, files that are not recordings stay untouched, descriptors do not
//! leak, every retained interval reads back, each kill loses at most the interval in flight,
//! and export and `--from` take the folder as one timeline. Bad folders (and one another agent
//! records into) get one line and exit code 11. (`cargo xtask bench soak` is the hour-long version.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ebee_tests::{bin, ebee_top, load, privileged};
use ebee_top::record::dir::is_own_name;
use ebee_top::record::{Reader, Timeline};

const BUDGET: u64 = 1 << 20;

/// Bytes our recordings take on disk in `dir`.
fn used(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| is_own_name(&e.file_name().to_string_lossy()))
        .filter_map(|e| e.metadata().ok())
        .map(|m| (m.blocks() * 512).max(m.len().div_ceil(4096) * 4096))
        .sum()
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

fn agent(dir: &Path) -> Child {
    Command::new(bin("ebee-top"))
        .args(["serve", "-d", "0.01", "--retain", "1M", "--record-dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Run the agent for `secs`, checking the budget twice a second; returns the most seen and the
/// descriptors it held after 5 s and at the end.
fn run_for(c: &Child, dir: &Path, secs: u64) -> (u64, usize, usize) {
    let start = Instant::now();
    let mut most = 0;
    let mut fd_early = 0;
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(500));
        let u = used(dir);
        most = most.max(u);
        assert!(
            u <= BUDGET,
            "the folder holds {u} bytes, over the 1 MiB budget"
        );
        if fd_early == 0 && start.elapsed() > Duration::from_secs(5) {
            fd_early = fds(c.id());
        }
    }
    (most, fd_early, fds(c.id()))
}

#[test]
fn two_minutes_of_flight_recording_within_budget_through_two_kills() {
    if !privileged("two_minutes_of_flight_recording_within_budget_through_two_kills") {
        return;
    }
    let _busy = load(&[
        "mix",
        "--procs",
        "100",
        "--churn-per-s",
        "50",
        "--seconds",
        "150",
    ]);
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("flight");
    // Missing: made 0700.
    std::fs::create_dir(&dir).unwrap();
    std::fs::remove_dir(&dir).unwrap();
    let mut c = agent(&dir);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        std::fs::metadata(&dir).unwrap().mode() & 0o777,
        0o700,
        "DIR made 0700"
    );
    // Not ours: never read as a recording, never deleted.
    std::fs::write(dir.join("notes.txt"), b"keep me").unwrap();
    std::fs::write(
        dir.join("ebee-top-20200101T000000Z.ebr"),
        b"not a recording",
    )
    .unwrap();

    let mut most = 0;
    for round in 0..3 {
        let (m, fd_early, fd_late) = run_for(&c, &dir, 38);
        most = most.max(m);
        assert!(
            fd_late <= fd_early + 2,
            "descriptors grew from {fd_early} to {fd_late} in round {round}"
        );
        if round < 2 {
            c.kill().unwrap(); // SIGKILL
            c.wait().unwrap();
            c = agent(&dir);
        } else {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let st = c.wait().unwrap();
            assert_eq!(st.code(), Some(0), "serve ends cleanly on SIGTERM");
        }
    }
    assert!(
        most > BUDGET / 2,
        "the budget was never approached ({most} bytes): rotation and deletion were not tested"
    );
    assert_eq!(std::fs::read(dir.join("notes.txt")).unwrap(), b"keep me");
    assert_eq!(
        std::fs::read(dir.join("ebee-top-20200101T000000Z.ebr")).unwrap(),
        b"not a recording"
    );

    // Every retained interval reads back; each file has at most one torn record at its end
    // (the interval in flight at a kill).
    let mut total = 0;
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_own_name(&p.file_name().unwrap().to_string_lossy()))
        .filter(|p| !p.ends_with("ebee-top-20200101T000000Z.ebr"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for p in &names {
        let mut r = Reader::open(p).unwrap();
        assert!(r.damage().len() <= 1, "{}: {:?}", p.display(), r.damage());
        for i in 0..r.len() {
            r.read(i)
                .unwrap_or_else(|e| panic!("{}: interval {i}: {e}", p.display()));
        }
        total += r.len();
    }
    let tl = Timeline::open(&dir).unwrap();
    assert_eq!(tl.len(), total);
    assert_eq!(tl.files(), names.len());
    // Two restarts: the timeline has the files of three runs, in time order.
    for i in 1..tl.len() {
        assert!(tl.t_ms(i) >= tl.t_ms(i - 1), "time goes back at {i}");
    }

    // Export takes the folder as one timeline, and --from a time of day finds its place.
    let (code, out, err) = ebee_top(&["export", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), total, "{err}");
    let mid = tl.t_ms(total / 2);
    let s = mid / 1000;
    let hms = format!("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60);
    let (code, out, err) = ebee_top(&["export", dir.to_str().unwrap(), "--from", &hms]);
    assert_eq!(code, 0, "{err}");
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let t0 = first["t_ms"].as_u64().unwrap();
    assert!(
        t0 >= s * 1000 && t0 < s * 1000 + 1000,
        "--from {hms} started at {t0}"
    );
}

#[test]
fn unusable_folders_get_one_line_and_exit_code_11() {
    if !privileged("unusable_folders_get_one_line_and_exit_code_11") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let real = t.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let file = t.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    for (d, what) in [
        (link.to_str().unwrap(), "symbolic link"),
        (file.to_str().unwrap(), "not a directory"),
        ("/proc/1", "not writable"),
    ] {
        let (code, out, err) = ebee_top(&["serve", "--record-dir", d]);
        assert_eq!(code, ebee_top::exit::BAD_RECORD_DIR, "{d}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(what), "{d}: {err}");
        assert!(out.is_empty());
    }
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);

    // The one link taken: systemd's StateDirectory= (DynamicUser=yes makes it a link into
    // /var/lib/private), named in $STATE_DIRECTORY. Its target gets the recordings.
    let c = Command::new(bin("ebee-top"))
        .args(["serve", "--record-dir"])
        .arg(&link)
        .env("STATE_DIRECTORY", &link)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline
        && !std::fs::read_dir(&real)
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| e.metadata().is_ok_and(|m| m.len() > 200))
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    // A second agent in the same folder would delete the first one's files: refused.
    let (code, _, err) = ebee_top(&["serve", "--record-dir", real.to_str().unwrap()]);
    assert_eq!(code, ebee_top::exit::BAD_RECORD_DIR, "{err}");
    assert!(
        err.contains("another ebee-top is recording into it"),
        "{err}"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let out = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let files: Vec<_> = std::fs::read_dir(&real)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.len() == 1 && is_own_name(&files[0]),
        "{files:?}: {err}"
    );
    assert!(!Reader::open(&real.join(&files[0])).unwrap().is_empty());
}
