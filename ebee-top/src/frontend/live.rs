//! The interactive screen on the live kernel: the programs are loaded before the terminal is
//! touched (so loader errors print as plain lines), the drain runs on a thread of its own and
//! sends one Batch per tick, the host's totals come from another once a second, and the UI
//! asks the drain thread to change the interval or the pins.

use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context as _;

use super::config::Loaded;
use super::metrics::Endpoint;
use super::screen::{self, Inputs};
use crate::app::{App, Effect, Msg};
use crate::cli::Cli;
use crate::model::procs::ProcKey;
use crate::os::act::{self, Target};
use crate::record::RecStatus;
use crate::source::{Live, Source, Tee};

/// `ebee-top` without `-b` (with `--listen`, serving metrics meanwhile), with the settings
/// read from the file (`cli` already has the file's interval and colours where no flag gave
/// them).
pub fn run(cli: &Cli, endpoint: Option<Endpoint>, cfg: &Loaded) -> anyhow::Result<()> {
    // A user that does not exist is a usage error, said before anything is loaded.
    let users = crate::os::details::users();
    let user = match &cli.user {
        Some(u) => {
            Some(crate::os::details::uid_of(u, &users).ok_or_else(|| NoSuchUser(u.to_string()))?)
        }
        None => None,
    };
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        anyhow::bail!("standard output is not a terminal; use --batch for scripts and pipes");
    }
    let mut live = Live::start(super::probe_config(cli), cli.delay)?;
    let live_off = live.probes().pipelines_off().to_vec();
    super::pin(&mut live, cli)?;
    let (tx, rx) = mpsc::channel::<Msg>();
    let (ctl_tx, ctl_rx) = mpsc::channel::<Ctl>();

    let rec_tx = tx.clone();
    let recorder = super::recording::start(
        cli,
        Box::new(move |s| {
            let _ = rec_tx.send(Msg::Recording(s.clone()));
        }),
    )?;
    let source: Box<dyn Source + Send> = match &recorder {
        Some(r) => Box::new(Tee {
            inner: live,
            tap: r.tap(),
        }),
        None => Box::new(live),
    };
    let metrics = super::metrics::start(endpoint, cli.metrics_top)?;
    let source = super::metrics::wrap(source, metrics.as_ref());
    spawn_drain(source, tx.clone(), ctl_rx)?;
    let host_tx = tx.clone();
    crate::os::host::spawn(move |h| host_tx.send(Msg::Host(Box::new(h))).is_ok())
        .context("starting the host thread")?;
    let stats = spawn_stats(tx.clone())?;
    let mut app = App::new(cli.top as usize, cli.delay);
    super::apply_config(&mut app, cfg, &cli.screen);
    // What this kernel (or a flag) leaves off, said once on the status line (a settings
    // warning comes first, as it asks for action).
    if app.status.is_none() {
        app.status = super::pipelines_off_line(&live_off);
    }
    app.boot_clock = crate::os::procstat::boot_clock();
    app.users = users;
    app.user = user;
    app.threads = cli.threads;
    for pid in &cli.pids {
        app.model.table.pin_pid(*pid);
    }
    if let Some(path) = &cli.record {
        app.recording = Some(RecStatus {
            path: path.display().to_string(),
            ..Default::default()
        });
    }
    let act_tx = tx.clone();
    let mut held: Vec<Target> = Vec::new();
    let r = screen::run(
        app,
        super::theme(&cli.screen),
        Inputs::live().saving(cfg.saver()),
        (tx, rx),
        cli.latency_report.as_deref(),
        !cli.screen.no_mouse,
        cli.iterations,
        |e| match e {
            Effect::Hold(keys) => {
                let (ok, notes) = hold(keys);
                held = ok;
                if !notes.is_empty() {
                    let _ = act_tx.send(Msg::Notice(notes.join("; ")));
                }
            }
            Effect::Release => held.clear(),
            Effect::Signal(sig) => {
                let note = signal(std::mem::take(&mut held), sig);
                let _ = act_tx.send(Msg::Notice(note));
            }
            Effect::Renice(keys, delta) => {
                let _ = act_tx.send(Msg::Notice(renice(&keys, delta)));
            }
            Effect::ReadStats(keys) => {
                let _ = stats.send(keys);
            }
            Effect::SetInterval(d) => {
                let _ = ctl_tx.send(Ctl::Interval(d));
            }
            Effect::SetPins(p) => {
                let _ = ctl_tx.send(Ctl::Pins(p));
            }
            Effect::SetThreads(on) => {
                let _ = ctl_tx.send(Ctl::Threads(on));
            }
            _ => {}
        },
    );
    if let Some(rec) = recorder {
        let st = rec.finish();
        if let Some(why) = st.stopped {
            eprintln!("ebee-top: recording stopped: {why}");
        }
    }
    r
}

/// A `-u` argument that names no user (a usage error).
#[derive(Debug, thiserror::Error)]
#[error("-u: no user {0:?} (not a name in /etc/passwd, nor a uid)")]
pub struct NoSuchUser(pub String);

/// The screen's process key as `os::act` takes it.
fn act_proc(k: ProcKey) -> act::Proc {
    act::Proc {
        pid: k.pid,
        start_ticks: k.start_ticks,
    }
}

/// Take a pidfd on each process chosen for a signal; what could not be taken is said.
fn hold(keys: Vec<ProcKey>) -> (Vec<Target>, Vec<String>) {
    let mut ok = Vec::new();
    let mut notes = Vec::new();
    for k in keys {
        match Target::open(act_proc(k)) {
            Ok(t) => ok.push(t),
            Err(e) => notes.push(format!("{}: {e}", k.pid)),
        }
    }
    (ok, notes)
}

/// Send `sig` through the held pidfds: the status line says what happened to each.
fn signal(held: Vec<Target>, sig: i32) -> String {
    let name = act::signal_name(sig);
    if held.is_empty() {
        return format!("SIG{name} not sent: no process could be held");
    }
    let mut sent = Vec::new();
    let mut failed = Vec::new();
    for t in &held {
        match t.signal(sig) {
            Ok(()) => sent.push(t.key.pid.to_string()),
            Err(e) => failed.push(format!("{} {e}, not signalled", t.key.pid)),
        }
    }
    let mut out = String::new();
    if !sent.is_empty() {
        out = format!("SIG{name} sent to {}", sent.join(", "));
    }
    if !failed.is_empty() {
        if !out.is_empty() {
            out.push_str("; ");
        }
        out.push_str(&failed.join("; "));
    }
    out
}

/// Renice every thread of each process by `delta`; one status line.
fn renice(keys: &[ProcKey], delta: i32) -> String {
    let parts: Vec<String> = keys
        .iter()
        .map(|k| match act::renice(act_proc(*k), delta) {
            Ok(r) => format!(
                "{}: nice {} -> {} ({} thread{})",
                k.pid,
                r.from,
                r.to,
                r.threads,
                if r.threads == 1 { "" } else { "s" }
            ),
            Err(e) => format!("{}: renice failed: {e}", k.pid),
        })
        .collect();
    parts.join("; ")
}

/// What the UI asks of the drain thread.
#[derive(Debug)]
enum Ctl {
    Interval(Duration),
    Pins(Vec<u32>),
    Threads(bool),
}

/// The drain thread: one Batch per tick to the UI, and the UI's requests applied between
/// ticks.
fn spawn_drain(
    mut source: Box<dyn Source + Send>,
    tx: mpsc::Sender<Msg>,
    ctl: mpsc::Receiver<Ctl>,
) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("drain".into())
        .spawn(move || {
            loop {
                while let Ok(c) = ctl.try_recv() {
                    match c {
                        Ctl::Interval(d) => {
                            if let Err(e) = source.set_interval(d) {
                                let _ = tx.send(Msg::SourceError(format!("{e:#}")));
                                return;
                            }
                        }
                        // A refused pin (the process just ended, too many) is news, not an
                        // error: the screen goes on.
                        Ctl::Pins(p) => {
                            if let Err(e) = source.set_pins(&p) {
                                let _ = tx.send(Msg::Notice(format!("pin: {e:#}")));
                            }
                        }
                        Ctl::Threads(on) => {
                            if let Err(e) = source.set_threads(on) {
                                let _ = tx.send(Msg::Notice(format!("threads: {e:#}")));
                            }
                        }
                    }
                }
                let msg = match source.next_batch() {
                    Ok(Some(b)) => Msg::Batch(Box::new(b)),
                    Ok(None) => return,
                    Err(e) => Msg::SourceError(format!("{e:#}")),
                };
                let stop = matches!(msg, Msg::SourceError(_));
                if tx.send(msg).is_err() || stop {
                    return;
                }
            }
        })
        .context("starting the drain thread")?;
    Ok(())
}

/// The thread that reads /proc/PID/stat for the rows on screen (NI, PRI, STATE, THREADS,
/// PPID) when the UI asks, about once a second, and sends what it found: never the UI's work.
fn spawn_stats(tx: mpsc::Sender<Msg>) -> anyhow::Result<mpsc::Sender<Vec<ProcKey>>> {
    let (ask, asked) = mpsc::channel::<Vec<ProcKey>>();
    std::thread::Builder::new()
        .name("procstat".into())
        .spawn(move || {
            while let Ok(mut keys) = asked.recv() {
                // Only the newest request matters.
                while let Ok(k) = asked.try_recv() {
                    keys = k;
                }
                let found: Vec<(ProcKey, crate::os::procstat::ProcStat)> = keys
                    .into_iter()
                    .filter_map(|k| Some((k, crate::os::procstat::read(k.pid, k.start_ticks)?)))
                    .collect();
                if tx.send(Msg::Stats(Box::new(found))).is_err() {
                    return;
                }
            }
        })
        .context("starting the procstat thread")?;
    Ok(ask)
}
