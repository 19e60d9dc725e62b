//! `--record FILE` beside a live front-end: the file is created before the terminal is touched
//! (so its errors are plain lines), and the recorder thread says how it goes.

use anyhow::Context as _;

use crate::cli::Cli;
use crate::record::recorder::Notify;
use crate::record::writer::local_meta;
use crate::record::{RecStatus, RecordOptions, Recorder, Writer};

/// Start recording when --record was given; `notify` hears how it goes (from the recorder
/// thread).
pub fn start(cli: &Cli, notify: Notify) -> anyhow::Result<Option<Recorder>> {
    let Some(path) = &cli.record else {
        return Ok(None);
    };
    let opts = RecordOptions {
        path: path.clone(),
        force: cli.force,
        max_size: cli.record_max_size,
        rotate: cli.record_rotate,
    };
    let w = Writer::create(opts, local_meta(cli.delay))?;
    let r = Recorder::start(w, notify).context("starting the recorder thread")?;
    Ok(Some(r))
}

/// In batch mode, recording news that matters (stopped, rotated, intervals dropped) goes to
/// stderr, one line each.
pub fn stderr_notify() -> Notify {
    let mut last = RecStatus::default();
    Box::new(move |s| {
        if s.stopped.is_some() || s.rotations != last.rotations || s.dropped != last.dropped {
            eprintln!("ebee-top: {}", s.line());
        }
        last = s.clone();
    })
}
