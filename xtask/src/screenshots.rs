//! `cargo xtask screenshots`: PNGs of the main screens, taken from the real binary. Each screen
//! runs in a tmux session of its own (on a private tmux server) beside a small workload, is
//! captured with its colours (`tmux capture-pane -e`), turned into HTML by `aha`, and
//! photographed by headless Chromium into `screenshots/`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::util;

/// tmux on a server of our own.
fn tmux(args: &[&str]) -> Result<String> {
    let o = Command::new("tmux")
        .args(["-L", "ebee-top-screenshots"])
        .args(args)
        .output()
        .context("running tmux")?;
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `prog` with `args` in the background (in `dir`), its output discarded, killed when
/// dropped.
fn spawn_in(dir: &Path, prog: &str, args: &[&str]) -> Result<Kill> {
    let c = Command::new(prog)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {prog}"))?;
    Ok(Kill(c))
}

/// Real servers under their own benchmark clients on loopback, for the SERVERS screens:
/// redis-server under redis-benchmark, nginx under wrk (keep-alive).
fn servers(dir: &Path) -> Result<Vec<Kill>> {
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{ worker_connections 256; }}\n\
             http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d};\n\
             fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
             server {{ listen 127.0.0.1:18089; location / {{ return 200 \"ok\\n\"; }} }} }}\n",
            d = dir.display()
        ),
    )?;
    let d = dir.display().to_string();
    let mut v = vec![
        spawn_in(
            dir,
            "redis-server",
            &[
                "--port",
                "16390",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &d,
            ],
        )?,
        // Relative paths, so its command line on screen names no directory of this machine.
        spawn_in(dir, "nginx", &["-p", "./", "-c", "nginx.conf"])?,
    ];
    std::thread::sleep(Duration::from_millis(500));
    v.push(spawn_in(
        dir,
        "redis-benchmark",
        &[
            "-p",
            "16390",
            "-n",
            "100000000",
            "-c",
            "8",
            "-q",
            "-t",
            "get,set",
        ],
    )?);
    v.push(spawn_in(
        dir,
        "wrk",
        &["-t1", "-c16", "-d600s", "http://127.0.0.1:18089/"],
    )?);
    Ok(v)
}

/// Demo cgroups for the cgroups screen, in the hierarchy ebee-top follows by default (the v1
/// cpuacct one on a hybrid machine, else v2): the workload's processes are moved in, and the
/// directories are removed when dropped (after the processes, which are dropped first).
struct DemoCgroups(Vec<std::path::PathBuf>);

impl DemoCgroups {
    /// `(name, pids)`: a cgroup `/ebee-demo.slice/<name>` holding `pids`.
    fn make(groups: &[(&str, Vec<u32>)]) -> Result<Self> {
        let info = std::fs::read_to_string("/proc/self/mountinfo")?;
        let mount = |want: &dyn Fn(&str, &str) -> bool| {
            info.lines().find_map(|l| {
                let (pre, post) = l.split_once(" - ")?;
                let mp = pre.split(' ').nth(4)?;
                let mut f = post.split(' ');
                let (fs, opts) = (f.next()?, f.nth(1)?);
                want(fs, opts).then(|| std::path::PathBuf::from(mp))
            })
        };
        let root = mount(&|fs, o| fs == "cgroup" && o.split(',').any(|c| c == "cpuacct"))
            .or_else(|| mount(&|fs, _| fs == "cgroup2"))
            .context("no cgroup hierarchy mounted")?;
        let slice = root.join("ebee-demo.slice");
        let mut dirs = vec![slice.clone()];
        std::fs::create_dir_all(&slice)?;
        for (name, pids) in groups {
            let d = slice.join(name);
            std::fs::create_dir_all(&d)?;
            for pid in pids {
                std::fs::write(d.join("cgroup.procs"), pid.to_string())
                    .with_context(|| format!("moving {pid} to {}", d.display()))?;
            }
            dirs.insert(0, d);
        }
        Ok(Self(dirs))
    }
}

impl Drop for DemoCgroups {
    fn drop(&mut self) {
        for d in &self.0 {
            // What is left in them (a load's orphaned children) goes too.
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            for pid in procs
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        }
        for d in &self.0 {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// `pid` and its children (once it has started them).
fn with_children(pid: u32) -> Vec<u32> {
    std::thread::sleep(Duration::from_millis(300));
    let mut v = vec![pid];
    v.extend(
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|s| s.parse::<u32>().ok()),
    );
    v
}

fn load(args: &[&str]) -> Result<Kill> {
    let c = Command::new(util::root().join("target/release/ebee-load"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("starting ebee-load")?;
    Ok(Kill(c))
}

/// One screen: a name, the terminal size, ebee-top's arguments, and keys to send once it runs.
struct Shot<'a> {
    name: &'a str,
    w: u16,
    h: u16,
    args: String,
    keys: &'a [&'a str],
}

fn take(shot: &Shot, out: &Path) -> Result<()> {
    let session = format!("shot-{}", shot.name);
    let bin = util::root().join("target/release/ebee-top");
    let sudo = if util::is_root() { "" } else { "sudo " };
    let _ = tmux(&["kill-session", "-t", &session]);
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        &shot.w.to_string(),
        "-y",
        &shot.h.to_string(),
        &format!(
            // The screens as shipped: not as this machine's settings file would make them.
            "COLORTERM=truecolor {sudo}{} --no-config {}; sleep 600",
            bin.display(),
            shot.args
        ),
    ])?;
    // Let the burst history and the QoS window fill.
    std::thread::sleep(Duration::from_secs(4));
    for k in shot.keys {
        tmux(&["send-keys", "-t", &session, k])?;
        std::thread::sleep(Duration::from_millis(700));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let ansi = tmux(&["capture-pane", "-e", "-p", "-t", &session])?;
    let _ = tmux(&["send-keys", "-t", &session, "q"]);
    std::thread::sleep(Duration::from_millis(300));
    let _ = tmux(&["kill-session", "-t", &session]);

    let mut aha = Command::new("aha")
        .args(["--no-header", "--black"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running aha")?;
    {
        use std::io::Write as _;
        let mut i = aha.stdin.take().context("aha stdin")?;
        i.write_all(ansi.as_bytes())?;
    }
    let body = aha.wait_with_output().context("aha")?;
    let html = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>\
         body{{margin:0;background:#000;color:#ddd}}\
         pre{{margin:6px;font-family:'DejaVu Sans Mono','Liberation Mono',monospace;\
         font-size:14px;line-height:17px}}</style></head><body><pre>{}</pre></body></html>",
        String::from_utf8_lossy(&body.stdout)
    );
    let dir = tempfile_dir()?;
    let page = dir.join(format!("{}.html", shot.name));
    std::fs::write(&page, html)?;
    let png = out.join(format!("{}.png", shot.name));
    // 8.43 px per cell at 14 px DejaVu Sans Mono; 17 px per line.
    let w = (f64::from(shot.w) * 8.43) as u32 + 12;
    let h = u32::from(shot.h) * 17 + 12;
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| util::output(Command::new("which").arg(c)).is_some())
        .context("chromium is not installed (cargo xtask setup --screenshots)")?;
    util::status(
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                &format!("--screenshot={}", png.display()),
                &format!("--window-size={w},{h}"),
                &format!("file://{}", page.display()),
            ])
            // Headless Chromium logs D-Bus complaints by the dozen; the PNG is what matters.
            .stderr(Stdio::null()),
    )?;
    if !png.exists() {
        bail!("chromium wrote no {}", png.display());
    }
    eprintln!("xtask: wrote {}", png.display());
    Ok(())
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("ebee-shots-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

pub fn run() -> Result<()> {
    crate::setup::setup(crate::setup::Needs {
        screenshots: true,
        ..Default::default()
    })?;
    util::build_release()?;
    util::cargo(&[
        "build",
        "--release",
        "-p",
        "ebee-tests",
        "--bin",
        "ebee-load",
    ])?;
    let out = util::root().join("screenshots");
    std::fs::create_dir_all(&out)?;
    // A busy process, one with 20 ms bursts every 200 ms, and a sleeper making syscalls.
    let _busy = load(&["burn", "--duty", "0.6"])?;
    let _bursts = load(&["bursts", "--burst-ms", "20", "--idle-ms", "180"])?;
    let sleeper = load(&["sleeper", "--ms", "1"])?;
    let pin = format!("-p {}", sleeper.0.id());
    let dir = tempfile_dir()?;
    let _servers = servers(&dir)?;
    let threads = load(&[
        "threads",
        "--procs",
        "1",
        "--threads",
        "6",
        "--top-duty",
        "0.5",
        "--skew",
        "1",
        "--seconds",
        "600",
    ])?;
    // Dropped before the processes (declared after them): the directories go once they are
    // empty.
    let _cgroups = DemoCgroups::make(&[
        ("batch-job.service", vec![_busy.0.id()]),
        ("bursty.service", vec![_bursts.0.id()]),
        (
            "redis.service",
            _servers.first().map(|k| k.0.id()).into_iter().collect(),
        ),
        ("threads.service", with_children(threads.0.id())),
    ])?;
    let shots = [
        Shot {
            name: "main-80x24",
            w: 80,
            h: 24,
            args: String::new(),
            keys: &[],
        },
        Shot {
            name: "qos-200x60",
            w: 200,
            h: 60,
            args: pin.clone(),
            keys: &[],
        },
        Shot {
            name: "qos-80x24",
            w: 80,
            h: 24,
            args: pin,
            keys: &[],
        },
        Shot {
            name: "servers-120x30",
            w: 120,
            h: 30,
            args: String::new(),
            keys: &["S"],
        },
        Shot {
            name: "cgroups-120x30",
            w: 120,
            h: 30,
            args: String::new(),
            keys: &["C"],
        },
        Shot {
            name: "threads-120x30",
            w: 120,
            h: 30,
            args: "-H".into(),
            keys: &["/", "ebee-load", "Enter"],
        },
        Shot {
            name: "tree-80x24",
            w: 80,
            h: 24,
            args: String::new(),
            keys: &["t"],
        },
        Shot {
            name: "tree-160x40",
            w: 160,
            h: 40,
            args: String::new(),
            keys: &["t"],
        },
        Shot {
            name: "help-100x30",
            w: 100,
            h: 30,
            args: String::new(),
            keys: &["?"],
        },
        Shot {
            name: "details-100x30",
            w: 100,
            h: 30,
            args: String::new(),
            keys: &["Enter"],
        },
    ];
    for s in &shots {
        take(s, &out)?;
    }
    let _ = tmux(&["kill-server"]);
    Ok(())
}
