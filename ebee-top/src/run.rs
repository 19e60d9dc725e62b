//! The two ways to run: batch (print every interval) and the interactive screen.

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context as _;

use crate::app::{App, Effect, Msg};
use crate::cli::{Cli, Command, Format};
use crate::model::Model;
use crate::output;
use crate::probes::ProbeConfig;
use crate::record::{RecordOptions, Recorder, Tee, Writer};
use crate::source::{Live, Source};

fn probe_config(cli: &Cli) -> ProbeConfig {
    ProbeConfig {
        shadow: cli.exact,
        trace: false,
        bpf_stats: !cli.no_bpf_stats,
    }
}

/// Entry point after parsing: returns the process exit code.
pub fn main(cli: Cli) -> anyhow::Result<()> {
    // Replay and export read a file: no privileges, nothing loaded.
    match &cli.command {
        Some(Command::Replay(a)) => return crate::replay::run(a),
        Some(Command::Export(a)) => return crate::export::run(a),
        None => {}
    }
    crate::preflight::check_live()?;
    if cli.print_maps {
        return print_maps(&cli);
    }
    if cli.batch {
        batch(&cli)
    } else {
        interactive(&cli)
    }
}

fn print_maps(cli: &Cli) -> anyhow::Result<()> {
    let live = Live::start(probe_config(cli), cli.delay)?;
    let maps = live.probes().map_report()?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<14} {:<20} {:>5} {:>7} {:>8} {:>10}",
        "MAP", "TYPE", "KEY", "VALUE", "ENTRIES", "BYTES"
    )?;
    let mut total = 0;
    for m in &maps {
        total += m.memlock;
        writeln!(
            out,
            "{:<14} {:<20} {:>5} {:>7} {:>8} {:>10}",
            m.name, m.kind, m.key_size, m.value_size, m.max_entries, m.memlock
        )?;
    }
    writeln!(out, "{:<14} {:>54}", "total", total)?;
    // The memory pipeline's own share (its maps are the ones named MEM_*).
    let mem: u64 = maps
        .iter()
        .filter(|m| m.name.starts_with("MEM_"))
        .map(|m| m.memlock)
        .sum();
    writeln!(out, "{:<14} {:>54}", "of it MEM_*", mem)?;
    writeln!(
        out,
        "({} possible CPUs; per-CPU maps are charged once per CPU)",
        live.probes().ncpus()
    )?;
    Ok(())
}

/// Pin the processes given with `-p` (a missing one ends the run with exit code 5).
fn pin(source: &mut Live, cli: &Cli) -> anyhow::Result<()> {
    if !cli.pids.is_empty() {
        source.set_pins(&cli.pids)?;
    }
    Ok(())
}

/// Start recording when --record was given; `notify` hears how it goes (from the recorder
/// thread). The file is created here, so its errors come before the terminal is touched.
fn start_recording(
    cli: &Cli,
    notify: crate::record::recorder::Notify,
) -> anyhow::Result<Option<Recorder>> {
    let Some(path) = &cli.record else {
        return Ok(None);
    };
    let opts = RecordOptions {
        path: path.clone(),
        force: cli.force,
        max_size: cli.record_max_size,
        rotate: cli.record_rotate,
    };
    let w = Writer::create(opts, crate::record::writer::local_meta(cli.delay))?;
    let r = Recorder::start(w, notify).context("starting the recorder thread")?;
    Ok(Some(r))
}

/// In batch mode, recording news that matters (stopped, rotated, intervals dropped) goes to
/// stderr, one line each.
fn stderr_notify() -> crate::record::recorder::Notify {
    let mut last = crate::record::RecStatus::default();
    Box::new(move |s| {
        if s.stopped.is_some() || s.rotations != last.rotations || s.dropped != last.dropped {
            eprintln!("ebee-top: {}", s.line());
        }
        last = s.clone();
    })
}

fn batch(cli: &Cli) -> anyhow::Result<()> {
    let mut live = Live::start(probe_config(cli), cli.delay)?;
    pin(&mut live, cli)?;
    let recorder = start_recording(cli, stderr_notify())?;
    let mut source: Box<dyn Source> = match &recorder {
        Some(r) => Box::new(Tee {
            inner: live,
            tap: r.tap(),
        }),
        None => Box::new(live),
    };
    let quit = signal_flag()?;
    let mut model = Model::new();
    let mut out = std::io::stdout().lock();
    let k = cli.top as usize;
    let mut n = 0u64;
    let mut latency = crate::latency::Latency::new();
    while !quit.load(std::sync::atomic::Ordering::Relaxed) {
        let Some(b) = source.next_batch()? else { break };
        latency.drained(b.end_ns, crate::latency::monotonic_ns());
        model.ingest(&b);
        let r = match cli.format {
            Format::Json => output::write_json(&mut out, &model, k),
            Format::Text => output::write_text(&mut out, &model, k),
        };
        match r.and_then(|()| out.flush()) {
            Ok(()) => latency.shown(b.end_ns, crate::latency::monotonic_ns()),
            // The reader went away (`| head`): that is a normal end.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e).context("writing output"),
        }
        n += 1;
        if cli.iterations.is_some_and(|max| n >= max) {
            break;
        }
    }
    if let Some(r) = recorder {
        r.finish();
    }
    if let Some(path) = &cli.latency_report {
        latency.write_report(path)?;
    }
    Ok(())
}

/// A flag set by SIGINT, SIGTERM or SIGHUP.
fn signal_flag() -> anyhow::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, flag.clone()).context("installing signal handlers")?;
    }
    Ok(flag)
}

fn interactive(cli: &Cli) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        anyhow::bail!("standard output is not a terminal; use --batch for scripts and pipes");
    }
    // Load before touching the terminal, so loader errors print as plain lines.
    let mut live = Live::start(probe_config(cli), cli.delay)?;
    pin(&mut live, cli)?;
    let (tx, rx) = mpsc::channel::<Msg>();
    let (ctl_tx, ctl_rx) = mpsc::channel::<Ctl>();

    let rec_tx = tx.clone();
    let recorder = start_recording(
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
    spawn_source(source, tx.clone(), ctl_rx)?;
    let host_tx = tx.clone();
    crate::host::spawn(move |h| host_tx.send(Msg::Host(Box::new(h))).is_ok())
        .context("starting the host thread")?;
    let mut app = App::new(cli.top as usize, cli.delay);
    app.opts = cli.screen.view_opts();
    app.users = crate::host::users();
    for pid in &cli.pids {
        app.model.table.pin_pid(*pid);
    }
    if let Some(path) = &cli.record {
        app.recording = Some(crate::record::RecStatus {
            path: path.display().to_string(),
            ..Default::default()
        });
    }
    let r = run_ui(app, tx, rx, cli.latency_report.as_deref(), |e| match e {
        Effect::SetInterval(d) => {
            let _ = ctl_tx.send(Ctl::Interval(d));
        }
        Effect::SetPins(p) => {
            let _ = ctl_tx.send(Ctl::Pins(p));
        }
        _ => {}
    });
    if let Some(rec) = recorder {
        let st = rec.finish();
        if let Some(why) = st.stopped {
            eprintln!("ebee-top: recording stopped: {why}");
        }
    }
    r
}

/// The interactive screen, whatever feeds it: signals and input become messages, `update`
/// decides, the screen is redrawn when something changed. Effects other than redraw and quit
/// go to `on_effect`. The terminal is restored before this returns. With `latency_report`
/// (live only: replayed intervals ended long ago), how late each interval's frame was is
/// written there on the way out.
pub(crate) fn run_ui(
    mut app: App,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
    latency_report: Option<&std::path::Path>,
    mut on_effect: impl FnMut(Effect),
) -> anyhow::Result<()> {
    let mut latency = crate::latency::Latency::new();
    spawn_signals(tx.clone())?;
    let mut tui = crate::tui::Tui::enter().context("setting up the terminal")?;
    spawn_input(tx.clone())?;
    if let Ok(size) = tui.terminal.size() {
        app.screen = (size.width, size.height);
    }

    tui.terminal
        .draw(|f| crate::view::render(&app, f))
        .context("drawing")?;
    while let Ok(msg) = rx.recv() {
        let interval_end = match &msg {
            Msg::Batch(b) => {
                latency.drained(b.end_ns, crate::latency::monotonic_ns());
                Some(b.end_ns)
            }
            _ => None,
        };
        match app.update(msg) {
            Effect::None => continue,
            Effect::Quit => break,
            Effect::Redraw => {}
            Effect::Details(k) => {
                // Read now, on opening: one small /proc read, never while drawing.
                let d = if app.replay.is_some() {
                    // This machine's /proc says nothing about a recorded process.
                    crate::host::Details {
                        pid: k.pid,
                        note: Some("from a recording: only what was recorded is known".into()),
                        ..Default::default()
                    }
                } else {
                    crate::host::details(k.pid, k.start_ticks)
                };
                app.update(Msg::Details(Box::new(d)));
            }
            other => on_effect(other),
        }
        tui.terminal
            .draw(|f| crate::view::render(&app, f))
            .context("drawing")?;
        if let Some(end) = interval_end {
            // `draw` has flushed the changed cells to the terminal.
            latency.shown(end, crate::latency::monotonic_ns());
        }
    }
    drop(tui);
    if let Some(path) = latency_report {
        latency.write_report(path)?;
    }
    match app.error {
        Some(e) => Err(anyhow::anyhow!(e)),
        None => Ok(()),
    }
}

/// What the UI asks of the drain thread.
#[derive(Debug)]
enum Ctl {
    Interval(Duration),
    Pins(Vec<u32>),
}

fn spawn_source(
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

fn spawn_input(tx: mpsc::Sender<Msg>) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("input".into())
        .spawn(move || {
            while let Ok(ev) = crossterm::event::read() {
                if tx.send(Msg::Input(ev)).is_err() {
                    return;
                }
            }
            // The terminal is gone (hang-up): leave like SIGHUP would.
            let _ = tx.send(Msg::Signal(signal_hook::consts::SIGHUP));
        })
        .context("starting the input thread")?;
    Ok(())
}

fn spawn_signals(tx: mpsc::Sender<Msg>) -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let _ = tx.send(Msg::Signal(sig));
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}
