//! What reaches the App ([`Msg`]) and what it asks of the loop that runs it ([`Effect`]).

use std::time::Duration;

use crossterm::event::Event;

use super::Column;
use crate::batch::Batch;
use crate::model::procs::ProcKey;
use crate::os::details::Details;
use crate::os::host::HostInfo;
use crate::os::procstat::ProcStat;
use crate::record::RecStatus;
use crate::source::replay::{ReplayCmd, ReplayUpdate};

/// Everything that can happen to the App.
#[derive(Debug)]
pub enum Msg {
    Batch(Box<Batch>),
    Input(Event),
    /// SIGINT, SIGTERM or SIGHUP.
    Signal(i32),
    /// The source failed; the message is shown and the app quits.
    SourceError(String),
    /// From the replay thread: the next interval, a rebuilt Model, or a new status.
    Replay(Box<ReplayUpdate>),
    /// From the recorder thread: where the recording stands.
    Recording(RecStatus),
    /// The machine's totals (live only, once a second).
    Host(Box<HostInfo>),
    /// A process's details, read from /proc when the popup opened.
    Details(Box<Details>),
    /// Something to tell the user in the status line (a pin the kernel refused...).
    Notice(String),
    /// /proc/PID/stat of the rows that were on screen (asked for by `Effect::ReadStats`).
    Stats(Box<Vec<(ProcKey, ProcStat)>>),
    /// The mouse, as the screen's layout places it (the front-end hit-tests the event).
    Pointer(Pointer),
}

/// What a mouse event hit in the process table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pointer {
    /// A click on this row (an index into `App::table_rows`).
    Row(usize),
    /// A click on a column's header; None for the flag column.
    Header(Option<Column>),
    /// The wheel: rows to move the selection by.
    Wheel(i64),
}

/// What the UI loop must do after an update.
#[derive(Debug, PartialEq, Eq)]
pub enum Effect {
    None,
    Redraw,
    SetInterval(Duration),
    /// Make the source follow exactly these processes (QoS hooks attach on the first).
    SetPins(Vec<u32>),
    /// Turn the source's per-thread mode on or off (`H`).
    SetThreads(bool),
    /// Read this process's details from /proc and send them back as `Msg::Details`.
    Details(ProcKey),
    /// Pass a command to the replay thread.
    Replay(ReplayCmd),
    /// Take a handle (a pidfd, checked by start time) on each of these processes, for a signal
    /// to come; the handles taken before are dropped.
    Hold(Vec<ProcKey>),
    /// Send this signal to the processes held, then drop them.
    Signal(i32),
    /// Drop the held processes (the signal menu was closed).
    Release,
    /// Change the nice value of every thread of these processes by this step.
    Renice(Vec<ProcKey>, i32),
    /// Read /proc/PID/stat of these processes off the UI thread and send `Msg::Stats`.
    ReadStats(Vec<ProcKey>),
    /// The settings changed (F2): save `App::settings`, rebuild the theme from `App::color`,
    /// and apply `App::interval`.
    SaveSettings,
    Quit,
}
