//! The interactive screen end to end: the real binary as root inside tmux, driven by keys
//! (filter, pin, sort, pause, help, quit) and by signals, read back with `tmux capture-pane`,
//! and the terminal checked afterwards (alternate screen left, cursor shown, exit code 0).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::process::Command;
use std::time::{Duration, Instant};

use ebee_tests::{bin, load, privileged};

/// A tmux session holding one pane, killed on drop.
struct Tmux {
    name: String,
    pidfile: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// tmux on a server of our own, so the test never touches anyone else's sessions.
fn tmux(args: &[&str]) -> String {
    let o = Command::new("tmux")
        .args(["-L", "ebee-top-tests"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("tmux {args:?}: {e} (is tmux installed? `cargo xtask setup`)"));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

impl Tmux {
    /// Start ebee-top with `args` in a fresh `w`x`h` session, as the child of a shell that
    /// says how it ended and stays, so the terminal's state afterwards can be read. Its
    /// settings live in a directory of its own (never the real `~/.config`).
    fn start(tag: &str, w: u16, h: u16, args: &str) -> Self {
        Self::start_with_config(tag, w, h, args, None)
    }

    /// As `start`, with `XDG_CONFIG_HOME` set to `config` (a directory the test keeps across
    /// runs), else to a fresh one.
    fn start_with_config(
        tag: &str,
        w: u16,
        h: u16,
        args: &str,
        config: Option<&std::path::Path>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let xdg = config.map_or_else(|| dir.path().join("config"), std::path::Path::to_path_buf);
        let name = format!("ebee-tui-{tag}-{}", std::process::id());
        // The server exits with its last session: a session made just after the previous
        // test's was killed can reach the exiting server and be lost (once a full suite's
        // screen stayed empty for 60 s, the pane never having existed). Make sure it is there.
        let t0 = Instant::now();
        loop {
            tmux(&[
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                &w.to_string(),
                "-y",
                &h.to_string(),
            ]);
            let there = Command::new("tmux")
                .args(["-L", "ebee-top-tests", "has-session", "-t", &name])
                .status()
                .is_ok_and(|s| s.success());
            if there {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "tmux would not make session {name}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let cmd = format!(
            "sh -c 'echo $$ > {}; XDG_CONFIG_HOME={} {} {args}; echo ebee-top exited rc=$?; \
             sleep 600'",
            pidfile.display(),
            xdg.display(),
            bin("ebee-top").display()
        );
        tmux(&["respawn-pane", "-k", "-t", &name, &cmd]);
        Self {
            name,
            pidfile,
            _dir: dir,
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", &self.name];
        a.extend_from_slice(keys);
        tmux(&a);
    }

    /// Type `text` literally, a character to an argument: the filter matches command lines,
    /// and a `send-keys` whose command line held the whole text would match it itself.
    fn type_text(&self, text: &str) {
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let mut a = vec!["send-keys", "-t", &self.name, "-l"];
        a.extend(chars.iter().map(String::as_str));
        tmux(&a);
    }

    /// A left click at the screen cell (`x`, `y`), counted from 0, as the terminal sends it
    /// in SGR mouse mode: press then release.
    fn click(&self, x: usize, y: usize) {
        self.mouse(0, x, y);
    }

    /// An SGR mouse event with button code `b` (0 left, 64 wheel up, 65 wheel down), written
    /// to the pane as raw bytes (`send-keys -H`).
    fn mouse(&self, b: u8, x: usize, y: usize) {
        let mut seq = format!("\x1b[<{b};{};{}M", x + 1, y + 1);
        if b < 64 {
            seq += &format!("\x1b[<{b};{};{}m", x + 1, y + 1);
        }
        let hex: Vec<String> = seq.bytes().map(|c| format!("{c:02x}")).collect();
        let mut a = vec!["send-keys", "-t", &self.name, "-H"];
        a.extend(hex.iter().map(String::as_str));
        tmux(&a);
    }

    fn capture(&self) -> String {
        tmux(&["capture-pane", "-p", "-t", &self.name])
    }

    fn format(&self, f: &str) -> String {
        tmux(&["display-message", "-p", "-t", &self.name, f])
            .trim()
            .to_string()
    }

    /// Wait (up to 20 s) until the screen satisfies `ok`; the screen, or a panic with it.
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        self.wait_for(what, 20, ok)
    }

    /// The first screen of a test (up to 60 s: ebee-top loads and verifies its programs
    /// first, which a busy machine can slow). A start that took over 5 s is reported, with
    /// what ebee-top's threads were doing: once in a full suite, nothing showed for 20 s.
    fn started(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        let mut slow = false;
        self.wait_for(what, 60, |s| {
            let done = ok(s);
            if !done && !slow && t0.elapsed() > Duration::from_secs(5) {
                slow = true;
                eprintln!("{what}: nothing after 5 s; ebee-top:\n{}", self.threads());
            }
            done
        });
        if slow {
            eprintln!("{what}: shown after {:.1} s", t0.elapsed().as_secs_f64());
        }
        self.capture()
    }

    fn wait_for(&self, what: &str, secs: u64, mut ok: impl FnMut(&str) -> bool) -> String {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.capture();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < end,
                "waiting for {what}; the screen:\n{s}\nebee-top:\n{}",
                self.threads()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Each thread of ebee-top (the shell's child): name, state, where it sleeps in the
    /// kernel, and its kernel stack (for a report; empty when there is none yet).
    fn threads(&self) -> String {
        let Some(pid) = self.try_pid() else {
            return "(not started)".into();
        };
        let mut out = String::new();
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
        {
            let Ok(t) = t else { continue };
            let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
            let stat = read("stat");
            let state = stat.rsplit(") ").next().and_then(|r| r.split(' ').next());
            out += &format!(
                "{} {} {} {}\n{}",
                t.file_name().to_string_lossy(),
                read("comm").trim(),
                state.unwrap_or("?"),
                read("wchan"),
                read("stack")
            );
        }
        out
    }

    /// Pid of ebee-top: the shell's child.
    fn pid(&self) -> i32 {
        self.try_pid().expect("ebee-top's pid")
    }

    fn try_pid(&self) -> Option<i32> {
        let sh = std::fs::read_to_string(&self.pidfile).ok()?;
        let sh = sh.trim();
        let children = std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// After ebee-top ended: (exit status, alternate screen on, cursor visible).
    fn ended(&self) -> (String, String, String) {
        let s = self.wait("ebee-top to exit", |s| s.contains("ebee-top exited rc="));
        let rc = s
            .lines()
            .find_map(|l| l.split("ebee-top exited rc=").nth(1))
            .unwrap_or("")
            .trim()
            .to_string();
        (
            rc,
            self.format("#{alternate_on}"),
            self.format("#{cursor_flag}"),
        )
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        tmux(&["kill-session", "-t", &self.name]);
    }
}

/// The table's rows: lines that start with the selection mark, the flag column (P pinned, X
/// exited) and a pid.
fn rows(screen: &str) -> Vec<&str> {
    // The process table only: the memory table below it has rows of its own.
    screen
        .lines()
        .take_while(|l| !l.contains("MEMORY by"))
        .filter(|l| {
            let t = l.get(3..).unwrap_or("").trim_start();
            t.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u32>().is_ok())
                && l.len() > 20
        })
        .collect()
}

#[test]
fn keys_drive_the_screen_and_quit_restores_the_terminal() {
    if !privileged("keys_drive_the_screen_and_quit_restores_the_terminal") {
        return;
    }
    let burner = load(&["burn", "--duty", "1.0"]);
    let t = Tmux::start("keys", 120, 40, "-d 0.05");
    let s = t.started("the table with the burner", |s| {
        s.contains("PID") && s.contains(&format!(" {} ", burner.pid()))
    });
    assert!(s.contains("BURST"), "{s}");
    assert_eq!(t.format("#{alternate_on}"), "1");

    // Filter by name: only ebee-load rows stay.
    t.keys(&["/"]);
    t.type_text("ebee-load");
    t.keys(&["Enter"]);
    let s = t.wait("the filter", |s| s.contains("filter: ebee-load"));
    let r = rows(&s);
    assert!(!r.is_empty(), "{s}");
    // An exited row's COMMAND reads "(exited) ebee-l…", cut to the column's width: processes
    // of an earlier test that ended in ebee-top's first seconds still show, marked X.
    assert!(
        r.iter().all(|l| l.contains("ebee-load")
            || (l.get(..4).is_some_and(|f| f.contains('X')) && l.contains("(exited) ebee-l"))),
        "{s}"
    );

    // Filter by pid and pin the burner: its row is marked and the QoS pane appears, which
    // needs the kernel to follow it (the pin reached the live source).
    // Esc on its own: Esc and a key at once read as Alt+key.
    t.keys(&["Escape"]);
    t.wait("the filter cleared", |s| !s.contains("filter: "));
    t.keys(&["/"]);
    t.type_text(&burner.pid().to_string());
    t.keys(&["Enter"]);
    let s = t.wait("the pid filter", |s| rows(s).len() == 1);
    assert!(rows(&s)[0].contains(&burner.pid().to_string()), "{s}");
    t.keys(&["p"]);
    let qos = format!("QoS {}", burner.pid());
    let s = t.wait("the QoS pane of the pinned burner", |s| s.contains(&qos));
    assert!(
        rows(&s)
            .iter()
            .any(|l| l.get(1..3) == Some("P ") && l.contains(&burner.pid().to_string())),
        "{s}"
    );
    t.keys(&["Escape"]);
    t.wait("the filter cleared", |s| !s.contains("filter: "));

    // Sort keys: M sorts by resident memory (or says there is no memory data); P by CPU.
    t.keys(&["M"]);
    t.wait("sorted by memory", |s| {
        s.contains("sorted by resident memory") || s.contains("memory pipeline not loaded")
    });
    t.keys(&["P"]);
    t.wait("sorted by CPU", |s| s.contains("sorted by CPU"));

    // Pause: the clock in the header stops while paused, and goes on after.
    t.keys(&["Space"]);
    let a = t.wait("paused", |s| s.contains("[paused]"));
    std::thread::sleep(Duration::from_millis(400));
    let b = t.capture();
    assert_eq!(
        a.lines().next(),
        b.lines().next(),
        "the paused screen changed"
    );
    t.keys(&["Space"]);
    t.wait("running again", |s| {
        !s.contains("[paused]") && s.lines().next() != a.lines().next()
    });

    // Help, then quit.
    t.keys(&["?"]);
    t.wait("the help", |s| s.contains("pin/unpin the selected process"));
    t.keys(&["Escape"]);
    t.wait("the help closed", |s| {
        !s.contains("pin/unpin the selected process")
    });
    t.keys(&["q"]);
    let (status, alt, cursor) = t.ended();
    assert_eq!(status, "0", "exit status; screen:\n{}", t.capture());
    assert_eq!(alt, "0", "still on the alternate screen");
    assert_eq!(cursor, "1", "cursor left hidden");
}

#[test]
fn signals_restore_the_terminal() {
    if !privileged("signals_restore_the_terminal") {
        return;
    }
    for (sig, name) in [
        (libc::SIGTERM, "term"),
        (libc::SIGINT, "int"),
        (libc::SIGHUP, "hup"),
    ] {
        let t = Tmux::start(name, 80, 24, "--ascii --color never");
        t.started("the screen", |s| s.contains("PID"));
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        assert_eq!(unsafe { libc::kill(t.pid(), sig) }, 0);
        let (status, alt, cursor) = t.ended();
        assert_eq!(status, "0", "{name}: exit status");
        assert_eq!(alt, "0", "{name}: still on the alternate screen");
        assert_eq!(cursor, "1", "{name}: cursor left hidden");
        assert_eq!(
            t.format("#{mouse_any_flag}"),
            "0",
            "{name}: mouse capture left on"
        );
    }
}

#[test]
fn a_small_terminal_gets_a_message_not_a_panic() {
    if !privileged("a_small_terminal_gets_a_message_not_a_panic") {
        return;
    }
    let t = Tmux::start("small", 30, 6, "");
    t.started("the message", |s| s.contains("terminal too small"));
    tmux(&["resize-window", "-t", &t.name, "-x", "80", "-y", "24"]);
    t.wait("the screen after growing", |s| s.contains("PID"));
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
}

/// `C` shows the cgroups table (the root at least, where this test's processes run unless a
/// cgroup holds them) and back; `H` turns the live source's per-thread mode on: a process of
/// two burning threads shows as two rows named by thread, with `TID` in the header.
#[test]
fn cgroups_and_threads_keys_on_the_real_screen() {
    if !privileged("cgroups_and_threads_keys_on_the_real_screen") {
        return;
    }
    let load = ebee_tests::spawn_guarded(
        std::process::Command::new(bin("ebee-load"))
            .args([
                "threads",
                "--procs",
                "1",
                "--threads",
                "2",
                "--top-duty",
                "0.6",
                "--skew",
                "0.5",
                "--seconds",
                "60",
            ])
            .stdout(std::process::Stdio::null()),
    )
    .unwrap();
    // Wide enough for every automatic column and the whole THREAD header.
    let t = Tmux::start("cg", 160, 40, "-d 0.05");
    // The first Batches have come when the load's rows are up.
    t.started("the table with the load", |s| {
        s.contains("ebee-load thread")
    });
    t.keys(&["C"]);
    let s = t.wait("the cgroups table", |s| s.contains("CGROUPS ("));
    assert!(s.contains("%CPU") && s.contains("CGROUP"), "{s}");
    t.keys(&["C"]);
    t.wait("the processes again", |s| s.contains("BURST"));
    t.keys(&["H"]);
    let s = t.wait("thread rows", |s| {
        s.contains("    TID") && s.contains("ebee-load (")
    });
    assert!(s.contains("THREAD (PID: COMMAND)"), "{s}");
    t.keys(&["H"]);
    t.wait("process rows", |s| {
        s.contains("    PID") && s.contains("COMMAND")
    });
    t.keys(&["q"]);
    let (status, alt, _) = t.ended();
    assert_eq!(status, "0", "exit status; screen:\n{}", t.capture());
    assert_eq!(alt, "0");
    drop(load);
}

/// Filter the table down to `pid` and wait until its row is the only one.
fn only(t: &Tmux, pid: u32) -> String {
    t.keys(&["/"]);
    t.type_text(&pid.to_string());
    t.keys(&["Enter"]);
    t.wait(&format!("the row of {pid} alone"), |s| {
        let r = rows(s);
        r.len() == 1 && r[0].contains(&format!(" {pid} "))
    })
}

/// Clear the filter.
fn unfilter(t: &Tmux) {
    t.keys(&["Escape"]);
    t.wait("the filter cleared", |s| !s.contains("filter: "));
}

/// A burner of our own (its exit status is read), killed by the kernel if the test dies.
fn burner(duty: &str) -> ebee_tests::Proc {
    ebee_tests::spawn_guarded(
        Command::new(bin("ebee-load"))
            .args(["burn", "--duty", duty, "--seconds", "120"])
            .stdin(std::process::Stdio::null()),
    )
    .unwrap()
}

/// F9, Enter, y sends SIGTERM to the process on the screen (its exit status says so); a pid
/// that died and was given to another process between the menu's opening and the
/// confirmation is not signalled: the pidfd taken at the opening names the dead one.
#[test]
fn f9_terminates_a_child_and_never_signals_a_reused_pid() {
    if !privileged("f9_terminates_a_child_and_never_signals_a_reused_pid") {
        return;
    }
    use std::os::unix::process::ExitStatusExt as _;
    let mut a = burner("0.3");
    let t = Tmux::start("sig", 120, 30, "-d 0.05 --ascii");
    t.started("the table", |s| s.contains("PID"));
    only(&t, a.pid());
    t.keys(&["F9"]);
    t.wait("the signal menu", |s| {
        s.contains(&format!("signal to {}", a.pid())) && s.contains("15 TERM")
    });
    t.keys(&["Enter"]);
    t.wait("the question", |s| {
        s.contains(&format!("send SIGTERM (15) to {}", a.pid()))
    });
    t.keys(&["y"]);
    t.wait("the status line", |s| {
        s.contains(&format!("SIGTERM sent to {}", a.pid()))
    });
    let st = a.0.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st:?}");
    unfilter(&t);

    // The reuse: B is chosen, the menu opens, then B dies and its pid goes to C.
    let mut b = burner("0.3");
    let pid = b.pid();
    only(&t, pid);
    t.keys(&["F9"]);
    t.wait("the menu for B", |s| {
        s.contains(&format!("signal to {pid}"))
    });
    b.0.kill().unwrap();
    b.0.wait().unwrap();
    let mut c = None;
    for _ in 0..50 {
        // The next pid the kernel gives is ns_last_pid + 1 (something else may take it first).
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let p = ebee_tests::spawn_guarded(Command::new("sleep").arg("60")).unwrap();
        if p.pid() == pid {
            c = Some(p);
            break;
        }
    }
    let mut c = c.expect("pid reuse forced");
    t.keys(&["Enter"]);
    t.wait("the question", |s| s.contains("send SIGTERM (15)"));
    t.keys(&["y"]);
    let s = t.wait("the refusal", |s| s.contains(&format!("{pid} has exited")));
    assert!(!s.contains("SIGTERM sent"), "{s}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        c.0.try_wait().unwrap().is_none(),
        "the process that took the pid was signalled"
    );
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
}

/// The nice value of every thread of `pid`, from /proc/PID/task/*/stat (field 19).
fn thread_nices(pid: u32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|d| {
            let stat = std::fs::read_to_string(d.unwrap().path().join("stat")).unwrap();
            let rest = stat.rsplit(") ").next().unwrap();
            rest.split(' ').nth(16).unwrap().parse().unwrap()
        })
        .collect()
}

/// F8 makes every thread of a real multi-threaded process one nicer, F7 takes it back.
#[test]
fn f8_and_f7_renice_every_thread() {
    if !privileged("f8_and_f7_renice_every_thread") {
        return;
    }
    let p = ebee_tests::spawn_guarded(
        Command::new(bin("ebee-load"))
            .args([
                "thread-group",
                "--index",
                "0",
                "--procs",
                "1",
                "--threads",
                "4",
            ])
            .args(["--top-duty", "0.2", "--skew", "0", "--seconds", "120"])
            .stdout(std::process::Stdio::null())
            .stdin(std::process::Stdio::null()),
    )
    .unwrap();
    let pid = p.pid();
    let t0 = Instant::now();
    while thread_nices(pid).len() < 4 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "threads not started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(thread_nices(pid).iter().all(|n| *n == 0));
    let t = Tmux::start("nice", 120, 30, "-d 0.05");
    t.started("the table", |s| s.contains("PID"));
    only(&t, pid);
    t.keys(&["F8"]);
    t.wait("the status line", |s| {
        s.contains(&format!("{pid}: nice 0 -> 1 ("))
    });
    let n = thread_nices(pid);
    assert!(n.len() >= 4 && n.iter().all(|n| *n == 1), "{n:?}");
    t.keys(&["F7"]);
    t.wait("the status line", |s| {
        s.contains(&format!("{pid}: nice 1 -> 0 ("))
    });
    assert!(thread_nices(pid).iter().all(|n| *n == 0));
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
}

/// A real three-level tree (a shell, a shell under it, two burners under that) shows in
/// order with its branches, and folded, the middle shell's row sums its members' %CPU.
#[test]
fn the_tree_shows_three_levels_and_a_folded_row_sums_them() {
    if !privileged("the_tree_shows_three_levels_and_a_folded_row_sums_them") {
        return;
    }
    let b = bin("ebee-load");
    let b = b.display();
    let inner =
        format!("{b} burn --duty 0.4 --seconds 90 & {b} burn --duty 0.15 --seconds 90 & wait");
    use std::os::unix::process::CommandExt as _;
    let family = ebee_tests::spawn_guarded(
        Command::new("sh")
            .arg("-c")
            .arg(format!("sh -c '{inner}' & wait"))
            .process_group(0)
            .stdin(std::process::Stdio::null()),
    )
    .unwrap();
    let top = family.pid();
    // The whole family goes when the test ends, however it ends.
    struct Group(i32);
    impl Drop for Group {
        fn drop(&mut self) {
            // SAFETY: kill has no memory preconditions; the group is the one we started.
            unsafe { libc::kill(-self.0, libc::SIGKILL) };
        }
    }
    let _group = Group(top as i32);
    let t = Tmux::start("tree", 160, 40, "-d 0.05 --ascii");
    t.started("the table", |s| s.contains("PID"));
    t.keys(&["t"]);
    t.wait("the tree", |s| {
        s.contains("tree: processes under their parents")
    });
    t.keys(&["/"]);
    t.type_text(" burn --duty");
    t.keys(&["Enter"]);
    // Rows: the ancestors of the outer shell (this test, cargo, ... init), the outer shell,
    // the inner one, the two burners (heavier first).
    let me = |r: &[&str]| r.iter().position(|l| l.contains(&format!(" {top} ")));
    let s = t.wait("the family under its ancestors", |s| {
        let r = rows(s);
        me(&r)
            .is_some_and(|i| r.len() == i + 4 && r[i + 2..].iter().all(|l| l.contains("ebee-load")))
    });
    let r = rows(&s);
    let i = me(&r).unwrap();
    let depth = |l: &str| depth(&s, l);
    assert!(depth(r[i + 1]) > depth(r[i]), "{s}");
    assert!(
        depth(r[i + 2]) > depth(r[i + 1]) && depth(r[i + 2]) == depth(r[i + 3]),
        "{s}"
    );
    // A tee for the first burner, an elbow for the last, whatever the width of a level.
    let x = s.lines().find_map(|h| h.find("COMMAND")).unwrap();
    let glyph = |l: &str| {
        l.chars()
            .skip(x)
            .take_while(|c| " |`-.".contains(*c))
            .filter(|c| *c == '|' || *c == '`')
            .last()
    };
    assert!(
        glyph(r[i + 2]) == Some('|') && glyph(r[i + 3]) == Some('`'),
        "{s}"
    );
    assert!(r[i + 1].contains("sh -c"), "{s}");
    // Pause, read the members' %CPU, fold the inner shell and compare.
    t.keys(&["Space"]);
    let s = t.wait("paused", |s| s.contains("[paused]"));
    let pct = |l: &str| -> f64 { l[3..].split_whitespace().nth(2).unwrap().parse().unwrap() };
    let r = rows(&s);
    let sum: f64 = r[i + 1..].iter().map(|l| pct(l)).sum();
    t.keys(&["Home"]);
    for _ in 0..=i {
        t.keys(&["Down"]);
    }
    t.keys(&["Left"]);
    let s = t.wait("the folded shell", |s| s.contains("[+2]"));
    let r = rows(&s);
    assert_eq!(r.len(), i + 2, "{s}");
    let folded = pct(r[i + 1]);
    // Each row is rounded to 0.1.
    assert!(
        (folded - sum).abs() <= 0.15,
        "folded {folded} vs rows {sum}:\n{s}"
    );
    assert!(sum > 20.0, "the burners burn: {s}");
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
}

/// How deep a tree row is drawn (ASCII): the branch glyphs and blanks that start its COMMAND
/// cell (0 for a root). `screen` gives the column's place.
fn depth(screen: &str, l: &str) -> usize {
    let x = screen
        .lines()
        .find_map(|h| h.find("COMMAND"))
        .expect("the table's header");
    l.chars()
        .skip(x)
        .take_while(|c| " |`-.".contains(*c))
        .count()
}

/// The row a tree row hangs under: the nearest one above it drawn less deep.
fn parent_row<'a>(screen: &str, r: &[&'a str], i: usize) -> Option<&'a str> {
    let d = depth(screen, r[i]);
    r[..i].iter().rev().find(|l| depth(screen, l) < d).copied()
}

/// A process whose parent exits is shown under its new parent (init or a subreaper, as
/// /proc/PID/stat says) once the kernel has reparented it.
#[test]
fn the_tree_follows_a_reparented_process() {
    if !privileged("the_tree_follows_a_reparented_process") {
        return;
    }
    use std::os::unix::process::CommandExt as _;
    let t = Tmux::start("reparent", 160, 40, "-d 0.05 --ascii");
    t.started("the table", |s| s.contains("PID"));
    t.keys(&["t"]);
    t.keys(&["/"]);
    t.type_text("--seconds 37");
    t.keys(&["Enter"]);
    let b = bin("ebee-load");
    // The shell starts the burner in the background and ends 3 s later.
    let mut sh = ebee_tests::spawn_guarded(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{} burn --duty 0.2 --seconds 37 & echo $! ; sleep 3",
                b.display()
            ))
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .stdin(std::process::Stdio::null()),
    )
    .unwrap();
    let shpid = sh.pid();
    let mut out = String::new();
    {
        use std::io::BufRead as _;
        let mut r = std::io::BufReader::new(sh.0.stdout.take().unwrap());
        r.read_line(&mut out).unwrap();
    }
    let burner: u32 = out.trim().parse().unwrap();
    struct Kill(u32);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SAFETY: kill has no memory preconditions; the pid is the burner we started.
            unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
        }
    }
    let _k = Kill(burner);
    let under = |s: &str, parent: u32| {
        let r = rows(s);
        r.iter()
            .position(|l| l.contains(&format!(" {burner} ")))
            .and_then(|i| parent_row(s, &r, i))
            .is_some_and(|p| p.contains(&format!(" {parent} ")))
    };
    t.wait("the burner under its shell", |s| under(s, shpid));
    drop(sh);
    // The kernel's new parent for it.
    let t0 = Instant::now();
    let ppid = loop {
        let stat = std::fs::read_to_string(format!("/proc/{burner}/stat")).unwrap();
        let p: u32 = stat
            .rsplit(") ")
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        if p != shpid {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never reparented");
        std::thread::sleep(Duration::from_millis(50));
    };
    t.wait(&format!("the burner under {ppid}"), |s| under(s, ppid));
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
}

/// The x range of the header title `title` on the process table's header line of `screen`, and
/// that line's number.
fn header_at(screen: &str, title: &str) -> Option<(usize, usize)> {
    let (y, line) = screen
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("    PID") || l.contains("    TID"))?;
    let at = line.find(title)?;
    Some((line[..at].chars().count(), y))
}

/// The text of `screen`'s line `y` from column `x`, `w` characters.
fn cell(screen: &str, y: usize, x: usize, w: usize) -> String {
    let line = screen.lines().nth(y).unwrap_or("");
    line.chars()
        .skip(x)
        .take(w)
        .collect::<String>()
        .trim()
        .to_string()
}

/// F2 shows NI (read from /proc: a real process at nice 7 shows 7), sorts by RES and sets the
/// interval to 100 ms; the file is saved 0600, and a restart with the same settings directory
/// has all three, with `-d` still winning over the file.
#[test]
fn settings_chosen_in_f2_survive_a_restart() {
    if !privileged("settings_chosen_in_f2_survive_a_restart") {
        return;
    }
    let cfg = tempfile::tempdir().unwrap();
    let burner = load(&["burn", "--duty", "0.5"]);
    // SAFETY: setpriority has no memory preconditions; the pid is our child's.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, burner.pid(), 7) };
    assert_eq!(r, 0);
    let pid = burner.pid().to_string();
    let args = "--ascii --color never";
    let t = Tmux::start_with_config("f2", 120, 40, args, Some(cfg.path()));
    t.started("the table with the burner", |s| {
        s.contains("PID") && s.contains(&format!(" {pid} "))
    });
    t.keys(&["F2"]);
    t.wait("the setup screen", |s| {
        s.contains("setup (F2)") && s.contains("[ ] NI")
    });
    // NI is the first column not shown, after the twelve of the automatic layout.
    for _ in 0..12 {
        t.keys(&["Down"]);
    }
    t.keys(&["Space"]);
    t.wait("NI shown", |s| s.contains("[x] NI"));
    // The cursor stays on NI (now the twelfth line); the sort is eight lines further down
    // (the thirteenth shown column, then the six not shown).
    for _ in 0..8 {
        t.keys(&["Down"]);
    }
    t.keys(&["Right"]);
    t.wait("the default sort MEM", |s| s.contains("< MEM >"));
    t.keys(&["Down", "Right"]);
    t.wait("the interval 100 ms", |s| s.contains("< 100.0ms >"));
    t.keys(&["Escape"]);
    let ni_of_burner = |s: &str| {
        let (x, _) = header_at(s, " NI")?;
        let y = s.lines().position(|l| {
            l.get(3..)
                .is_some_and(|r| r.split_whitespace().next() == Some(pid.as_str()))
        })?;
        Some(cell(s, y, x, 3))
    };
    t.wait("the burner's NI from /proc", |s| {
        !s.contains("setup (F2)") && ni_of_burner(s).as_deref() == Some("7")
    });
    let file = cfg.path().join("ebee-top").join("config.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("\"ni\"") && text.contains("sort = \"mem\""),
        "{text}"
    );
    assert!(
        text.contains("interval = 0.1") && text.contains("version = 1"),
        "{text}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
    drop(t);

    // A restart: the columns, the sort and the interval are the file's.
    let t = Tmux::start_with_config("f2-again", 120, 40, args, Some(cfg.path()));
    let s = t.started("the table with NI after the restart", |s| {
        header_at(s, " NI").is_some() && s.contains("interval 100ms")
    });
    assert!(s.contains("RES*"), "{s}");
    t.wait("the burner's NI", |s| {
        ni_of_burner(s).as_deref() == Some("7")
    });
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
    drop(t);

    // A flag wins over the file.
    let t = Tmux::start_with_config(
        "f2-flag",
        120,
        40,
        &format!("{args} -d 0.2"),
        Some(cfg.path()),
    );
    let s = t.started("the table with -d", |s| {
        header_at(s, " NI").is_some() && s.contains("interval 200ms")
    });
    assert!(s.contains("RES*"), "{s}");
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
    // Quitting saved nothing new: only F2 writes the file.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
}

/// A config that is not TOML: the screen starts with the defaults, one warning line on stderr
/// naming the file and the line (and on the status line), and F2 does not write over it.
#[test]
fn a_broken_config_starts_with_the_defaults_and_one_warning() {
    if !privileged("a_broken_config_starts_with_the_defaults_and_one_warning") {
        return;
    }
    let cfg = tempfile::tempdir().unwrap();
    let dir = cfg.path().join("ebee-top");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.toml");
    let broken = "columns = [\"pid\", \"ni\"]\ninterval = [\n";
    std::fs::write(&file, broken).unwrap();
    let err = cfg.path().join("stderr");
    let t = Tmux::start_with_config(
        "broken",
        140,
        30,
        &format!("--ascii 2>{}", err.display()),
        Some(cfg.path()),
    );
    let s = t.started("the table and the warning", |s| {
        s.contains("PID") && s.contains("broken, line 2")
    });
    // The defaults: the automatic columns, not the file's.
    assert!(
        s.contains("USER") && s.contains("BURST") && header_at(&s, " NI").is_none(),
        "{s}"
    );
    t.keys(&["F2"]);
    t.wait("the setup screen says it will not save", |s| {
        s.contains("setup (F2)") && s.contains("not saved")
    });
    t.keys(&["Space"]);
    t.wait("PID hidden, and not saved", |s| s.contains("[ ] PID"));
    t.keys(&["Escape"]);
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), broken);
    let e = std::fs::read_to_string(&err).unwrap();
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 1, "{e}");
    assert!(
        lines[0].contains("warning")
            && lines[0].contains(&file.display().to_string())
            && lines[0].contains("line 2"),
        "{e}"
    );
}

/// SGR mouse sequences sent to the pane: a click selects the row under it, a click on `RES`
/// sorts by it, one on `USER` says it cannot, the wheel moves the selection; mouse capture is
/// on while the screen runs and off after, and `--no-mouse` leaves it off.
#[test]
fn a_click_selects_a_row_and_a_click_on_a_header_sorts() {
    if !privileged("a_click_selects_a_row_and_a_click_on_a_header_sorts") {
        return;
    }
    let _burner = load(&["burn", "--duty", "0.3"]);
    let t = Tmux::start("mouse", 120, 40, "--ascii --color never");
    t.started("a table of a few rows", |s| rows(s).len() >= 6);
    assert_eq!(t.format("#{mouse_any_flag}"), "1");
    // Paused, so the ranking holds still under the pointer.
    t.keys(&["Space"]);
    let s = t.wait("paused", |s| s.contains("[paused]"));
    let (_, head_y) = header_at(&s, "PID").unwrap();
    let y = head_y + 4;
    let pid_on = |s: &str, y: usize| {
        s.lines()
            .nth(y)
            .and_then(|l| l.get(3..))
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("")
            .to_string()
    };
    let pid = pid_on(&s, y);
    assert!(pid.parse::<u32>().is_ok(), "{s}");
    t.click(30, y);
    t.wait("the clicked row selected", |s| {
        s.lines().nth(y).is_some_and(|l| l.starts_with('>')) && pid_on(s, y) == pid
    });
    // The wheel: one row down.
    t.mouse(65, 30, y);
    t.wait("the selection one row down", |s| {
        s.lines().nth(y + 1).is_some_and(|l| l.starts_with('>'))
    });
    let (x, _) = header_at(&s, "RES").unwrap();
    t.click(x + 1, head_y);
    t.wait("sorted by RES", |s| {
        s.contains("sorted by RES (click)") && s.contains("RES*")
    });
    let (x, _) = header_at(&s, "USER").unwrap();
    t.click(x, head_y);
    t.wait("USER cannot sort", |s| s.contains("cannot sort by USER"));
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
    assert_eq!(t.format("#{mouse_any_flag}"), "0", "mouse capture left on");
    drop(t);

    let t = Tmux::start("no-mouse", 100, 30, "--ascii --no-mouse");
    t.started("the screen", |s| s.contains("PID"));
    assert_eq!(t.format("#{mouse_any_flag}"), "0");
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
}

/// `-u nobody` shows only nobody's processes (a burner run as nobody, not root's beside it);
/// `u` then picks every user again and root's burner shows.
#[test]
fn a_user_filter_shows_only_that_users_processes() {
    if !privileged("a_user_filter_shows_only_that_users_processes") {
        return;
    }
    use std::os::unix::process::CommandExt as _;
    let theirs = ebee_tests::spawn_guarded(
        Command::new(bin("ebee-load"))
            .args(["burn", "--duty", "0.2", "--seconds", "60"])
            .uid(65534)
            .gid(65534)
            .stdin(std::process::Stdio::null()),
    )
    .unwrap();
    let ours = burner("0.2");
    let t = Tmux::start("user", 120, 30, "-d 0.05 -u nobody");
    let s = t.started("nobody's burner", |s| {
        rows(s)
            .iter()
            .any(|l| l.contains(&format!(" {} ", theirs.pid())))
    });
    let r = rows(&s);
    assert!(
        r.iter().all(|l| l.contains(" nobody ")),
        "only nobody's rows:\n{s}"
    );
    assert!(
        !r.iter().any(|l| l.contains(&format!(" {} ", ours.pid()))),
        "{s}"
    );
    t.keys(&["u"]);
    t.wait("the user picker", |s| s.contains("all users"));
    t.keys(&["Home"]);
    t.keys(&["Up", "Up"]);
    t.keys(&["Enter"]);
    t.wait("root's burner too", |s| {
        rows(s)
            .iter()
            .any(|l| l.contains(&format!(" {} ", ours.pid())))
    });
    t.keys(&["q"]);
    assert_eq!(t.ended().0, "0");
}
