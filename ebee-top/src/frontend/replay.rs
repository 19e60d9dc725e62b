//! `ebee-top replay FILE`: a recording on the same screen as live, paced by its timestamps,
//! steered by the replay keys. Needs no privileges and loads nothing into the kernel.

use std::sync::mpsc;
use std::time::Duration;

use super::screen::{self, Inputs};
use crate::app::{App, Effect, Msg, ReplayControl};
use crate::cli::ReplayArgs;
use crate::source::replay::{self as source, Replay, ReplayCmd, ReplayUpdate};

/// Replay `a.file` with the settings read from the file (the columns, the sort, the colours
/// where `--color` was not given: `a` has them merged in).
pub fn run(a: &ReplayArgs, cfg: &super::config::Loaded) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    let reader = super::open_recording(&a.file)?;
    let mut replay = Replay::new(reader, &a.file, a.speed, true);
    if !std::io::stdout().is_terminal() {
        anyhow::bail!(
            "standard output is not a terminal; use `ebee-top export {}` for scripts and pipes",
            a.file.display()
        );
    }
    let (tx, rx) = mpsc::channel::<Msg>();
    let (ctl_tx, ctl_rx) = mpsc::channel::<ReplayCmd>();
    let interval = Duration::from_nanos(replay.timeline().meta().interval_ns.max(1));
    let mut app = App::new(a.top as usize, interval);
    super::apply_config(&mut app, cfg, &a.screen);
    app.users = crate::os::details::users();
    let first = a.from.map(|t| replay.command(ReplayCmd::GoTo(t)));
    if a.paused {
        replay.command(ReplayCmd::TogglePause);
    }
    app.replay = Some(ReplayControl::new(replay.status()));
    if let Some(apply) = first {
        app.on_replay(ReplayUpdate {
            status: replay.status(),
            apply,
        });
    }
    let replay_tx = tx.clone();
    source::spawn(
        replay,
        move |u| replay_tx.send(Msg::Replay(Box::new(u))).is_ok(),
        ctl_rx,
    )?;
    screen::run(
        app,
        super::theme(&a.screen),
        Inputs::recording().saving(cfg.saver()),
        (tx, rx),
        None,
        !a.screen.no_mouse,
        None,
        |e| {
            if let Effect::Replay(c) = e {
                let _ = ctl_tx.send(c);
            }
        },
    )
}
