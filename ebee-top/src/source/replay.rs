//! A recording as a [`Source`], with seeking: `ebee-top replay FILE` plays it through the same
//! Model, App and views as live, paced by the recorded timestamps. Needs no privileges: nothing
//! is loaded. It runs on a thread of its own ([`spawn`]), which owns the file and rebuilds the
//! Model after a seek, so the UI never waits on it: the UI sends a [`ReplayCmd`], the thread
//! answers with a [`ReplayUpdate`] (the App's side is `app::ReplayControl`).

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::Source;
use crate::batch::Batch;
use crate::model::{HISTORY_WARMUP_MS, Model, WARMUP_INTERVALS};
use crate::record::Timeline;
use crate::time::TimeSpec;

/// Playback speeds, slowest first.
pub const SPEEDS: [f64; 7] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0];
/// Longest pause between two intervals at 1x (a gap in the recording is not waited out).
const MAX_GAP: Duration = Duration::from_secs(5);

/// What the UI asks the replay to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayCmd {
    TogglePause,
    /// Pause and move this many intervals (negative: back).
    Step(i64),
    /// Move by this many ms of recorded time (negative: back).
    Seek(i64),
    GoTo(TimeSpec),
    Faster,
    Slower,
}

/// Where the playback stands, as the timeline shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayStatus {
    pub file: String,
    pub host: String,
    /// Index of the interval on screen (None before the first).
    pub shown: Option<usize>,
    /// Good intervals in the file.
    pub len: usize,
    /// Recorded time of the interval on screen, and of the first and last.
    pub t_ms: u64,
    pub first_ms: u64,
    pub last_ms: u64,
    pub speed: f64,
    pub paused: bool,
    /// The last interval is on screen.
    pub at_end: bool,
    /// What was found wrong in the file, one line (empty when nothing).
    pub damage: String,
    /// Intervals that could not be decoded while playing.
    pub skipped: u64,
    /// Nothing was recorded for this long before the interval on screen, ms (0: no gap).
    pub gap_ms: u64,
    /// Stretches with nothing recorded in the whole timeline, and their total length, ms.
    pub gaps: usize,
    pub gaps_ms: u64,
    /// Recording files played as one timeline (more than 1 for a flight recorder's folder).
    pub files: usize,
}

/// How the App's Model changes with an update.
pub enum Apply {
    /// Nothing: only the status changed.
    None,
    /// Fold in the next interval, as live.
    Batch(Box<Batch>),
    /// Replace the Model (after a seek or a step back), rebuilt on the source thread.
    Reset(Box<Model>),
}

/// From the source thread to the App.
pub struct ReplayUpdate {
    pub status: ReplayStatus,
    pub apply: Apply,
}

impl std::fmt::Debug for ReplayUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.apply {
            Apply::None => "none",
            Apply::Batch(_) => "batch",
            Apply::Reset(_) => "reset",
        };
        f.debug_struct("ReplayUpdate")
            .field("status", &self.status)
            .field("apply", &what)
            .finish()
    }
}

/// A recording as a Source.
pub struct Replay {
    tl: Timeline,
    path: PathBuf,
    /// Gaps in the timeline: (count, total ms).
    gaps: (usize, u64),
    /// Index of the next interval to show.
    next: usize,
    shown: Option<usize>,
    speed: usize,
    paused: bool,
    /// When the next interval is due (paced playback).
    due: Instant,
    paced: bool,
    damage: String,
    skipped: u64,
}

/// One line summing up what `damage` lists.
fn damage_line(d: &[String]) -> String {
    match d {
        [] => String::new(),
        [one] => one.to_string(),
        [.., last] => format!("{} problems in the file; last: {last}", d.len()),
    }
}

impl Replay {
    /// Play `tl` (opened from `path`, holding at least one interval). `paced`: wait
    /// between intervals as recorded (divided by the speed); otherwise deliver at once.
    pub fn new(tl: Timeline, path: &Path, speed: f64, paced: bool) -> Self {
        let speed = SPEEDS
            .iter()
            .position(|s| *s >= speed)
            .unwrap_or(SPEEDS.len() - 1);
        Self {
            damage: damage_line(tl.notes()),
            gaps: {
                let g = tl.gaps();
                (g.len(), g.iter().map(|(_, ms)| ms).sum())
            },
            tl,
            path: path.into(),
            next: 0,
            shown: None,
            speed,
            paused: false,
            due: Instant::now(),
            paced,
            skipped: 0,
        }
    }

    pub fn timeline(&self) -> &Timeline {
        &self.tl
    }

    pub fn status(&self) -> ReplayStatus {
        let len = self.tl.len();
        let t = |i: usize| self.tl.t_ms(i);
        ReplayStatus {
            file: self.path.display().to_string(),
            host: self.tl.meta().host.clone(),
            shown: self.shown,
            len,
            t_ms: self.shown.map_or(t(0), t),
            first_ms: t(0),
            last_ms: t(len.saturating_sub(1)),
            speed: SPEEDS[self.speed],
            paused: self.paused,
            at_end: self.next >= len,
            damage: self.damage.clone(),
            skipped: self.skipped,
            gap_ms: self.shown.map_or(0, |i| self.tl.gap_before(i)),
            gaps: self.gaps.0,
            gaps_ms: self.gaps.1,
            files: self.tl.files(),
        }
    }

    /// Recorded time between intervals `a` and `b`, at the current speed.
    fn gap(&self, a: usize, b: usize) -> Duration {
        if a >= self.tl.len() || b >= self.tl.len() {
            return Duration::ZERO;
        }
        let ms = self.tl.t_ms(b).saturating_sub(self.tl.t_ms(a));
        Duration::from_millis(ms)
            .min(MAX_GAP)
            .div_f64(SPEEDS[self.speed])
    }

    fn decode(&mut self, i: usize) -> Option<Batch> {
        match self.tl.read(i) {
            Ok(b) => Some(b),
            Err(_) => {
                self.skipped += 1;
                None
            }
        }
    }

    /// The Model as it was live after interval `target`: rebuilt from enough intervals before
    /// it to cover what the Model remembers (the ranking's last intervals, and the screen's
    /// minute of burst history: `HISTORY_WARMUP_MS` of recorded time).
    fn model_at(&mut self, target: usize) -> Model {
        let mut m = Model::new();
        let t = self.tl.t_ms(target);
        let by_time = self.tl.index_at_ms(t.saturating_sub(HISTORY_WARMUP_MS));
        let first = target.saturating_sub(WARMUP_INTERVALS).min(by_time);
        for i in first..=target {
            if let Some(b) = self.decode(i) {
                m.ingest(&b);
            }
        }
        m
    }

    /// Show interval `target` (clamped); the Model is rebuilt for it.
    fn jump(&mut self, target: usize) -> Apply {
        let Some(last) = self.tl.len().checked_sub(1) else {
            return Apply::None;
        };
        let target = target.min(last);
        let m = self.model_at(target);
        self.shown = Some(target);
        self.next = target + 1;
        self.due = Instant::now() + self.gap(target, target + 1);
        Apply::Reset(Box::new(m))
    }

    fn index_at(&self, t_ms: u64) -> usize {
        self.tl
            .index_at_ms(t_ms)
            .min(self.tl.len().saturating_sub(1))
    }

    /// Apply one command from the UI.
    pub fn command(&mut self, c: ReplayCmd) -> Apply {
        match c {
            ReplayCmd::TogglePause => {
                self.paused = !self.paused;
                if !self.paused {
                    let from = self.shown.unwrap_or(0);
                    self.due = Instant::now() + self.gap(from, self.next);
                }
                Apply::None
            }
            ReplayCmd::Faster | ReplayCmd::Slower => {
                self.speed = if c == ReplayCmd::Faster {
                    (self.speed + 1).min(SPEEDS.len() - 1)
                } else {
                    self.speed.saturating_sub(1)
                };
                let from = self.shown.unwrap_or(0);
                self.due = Instant::now() + self.gap(from, self.next);
                Apply::None
            }
            ReplayCmd::Step(n) => {
                self.paused = true;
                match self.shown {
                    // One forward from where we are: fold it in, as live.
                    Some(s) if n == 1 && s + 1 < self.tl.len() => self.advance(),
                    None if n > 0 => self.advance(),
                    Some(s) => {
                        let t = (s as i64).saturating_add(n).max(0) as usize;
                        if t == s { Apply::None } else { self.jump(t) }
                    }
                    None => Apply::None,
                }
            }
            ReplayCmd::Seek(ms) => {
                let now = self.status().t_ms;
                let t = if ms >= 0 {
                    now.saturating_add(ms as u64)
                } else {
                    now.saturating_sub(ms.unsigned_abs())
                };
                let i = self.index_at(t);
                self.jump(i)
            }
            ReplayCmd::GoTo(spec) => {
                let s = self.status();
                let i = self.index_at(spec.resolve(s.first_ms, s.last_ms));
                self.jump(i)
            }
        }
    }

    /// Show the next decodable interval, folded into the Model as live.
    fn advance(&mut self) -> Apply {
        while self.next < self.tl.len() {
            let i = self.next;
            self.next += 1;
            if let Some(b) = self.decode(i) {
                self.shown = Some(i);
                // `due` is always when `next` is due.
                self.due += self.gap(i, i + 1);
                return Apply::Batch(Box::new(b));
            }
        }
        Apply::None
    }

    /// How long until the next interval is due; None when paused or at the end.
    fn wait(&self) -> Option<Duration> {
        if self.paused || self.next >= self.tl.len() {
            return None;
        }
        Some(self.due.saturating_duration_since(Instant::now()))
    }
}

impl Source for Replay {
    /// The next interval, when it is due at the current speed (at once when not paced).
    fn next_batch(&mut self) -> anyhow::Result<Option<Batch>> {
        loop {
            if self.next >= self.tl.len() {
                return Ok(None);
            }
            if self.paced {
                let first = self.shown.is_none();
                if first {
                    self.due = Instant::now();
                }
                std::thread::sleep(self.due.saturating_duration_since(Instant::now()));
            }
            if let Apply::Batch(b) = self.advance() {
                return Ok(Some(*b));
            }
        }
    }

    fn set_interval(&mut self, _: Duration) -> anyhow::Result<()> {
        Ok(())
    }

    fn set_pins(&mut self, _: &[u32]) -> anyhow::Result<()> {
        Ok(())
    }

    fn set_threads(&mut self, _: bool) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Run the replay on its own thread: deliver intervals when due, obey commands, and stop when
/// `send` returns false (the App went away) or the command channel closes.
pub fn spawn(
    mut r: Replay,
    mut send: impl FnMut(ReplayUpdate) -> bool + Send + 'static,
    ctl: Receiver<ReplayCmd>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("replay".into())
        .spawn(move || {
            r.due = Instant::now();
            loop {
                let cmd = match r.wait() {
                    Some(d) => match ctl.recv_timeout(d) {
                        Ok(c) => Some(c),
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => return,
                    },
                    None => match ctl.recv() {
                        Ok(c) => Some(c),
                        Err(_) => return,
                    },
                };
                let apply = match cmd {
                    Some(c) => r.command(c),
                    None => {
                        // Fell far behind (a stalled terminal): do not race to catch up.
                        if r.due + Duration::from_secs(1) < Instant::now() {
                            r.due = Instant::now();
                        }
                        r.advance()
                    }
                };
                let u = ReplayUpdate {
                    status: r.status(),
                    apply,
                };
                if !send(u) {
                    return;
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::build::plausible;

    /// A recording of `n` plausible intervals, 50 ms apart, as the recording keeps them
    /// (per-process times to the µs).
    fn recording(n: u64) -> (tempfile::TempDir, PathBuf, Vec<Batch>) {
        let batches: Vec<Batch> = (1..=n)
            .map(|s| crate::record::codec::rounded(&plausible(s, 5)))
            .collect();
        let (dir, path, _) = crate::record::tests::record(&batches);
        (dir, path, batches)
    }

    fn open(path: &Path) -> Replay {
        Replay::new(Timeline::open(path).unwrap(), path, 1.0, false)
    }

    fn batch_of(a: Apply) -> Batch {
        match a {
            Apply::Batch(b) => *b,
            _ => panic!("not a batch"),
        }
    }

    fn model_of(a: Apply) -> Model {
        match a {
            Apply::Reset(m) => *m,
            _ => panic!("not a reset"),
        }
    }

    #[test]
    fn source_delivers_every_interval_in_order() {
        let (_d, path, batches) = recording(30);
        let mut r = open(&path);
        let mut got = Vec::new();
        while let Some(b) = r.next_batch().unwrap() {
            got.push(b);
        }
        assert_eq!(got, batches);
    }

    #[test]
    fn steps_and_seeks_rebuild_the_live_model() {
        let (_d, path, batches) = recording(300);
        let mut r = open(&path);
        // Live: a Model that saw every interval.
        let live_at = |i: usize| {
            let mut m = Model::new();
            for b in &batches[..=i] {
                m.ingest(b);
            }
            m
        };
        let same = |a: &Model, b: &Model| {
            assert_eq!(a.latest(), b.latest());
            assert_eq!(a.top_cpu(50), b.top_cpu(50));
            // The screen's table, burst history included.
            let rows = |m: &Model| -> Vec<crate::model::procs::ProcEntry> {
                m.table.ranked(50, "").into_iter().cloned().collect()
            };
            let ra = rows(a);
            let rb = rows(b);
            assert_eq!(ra.len(), rb.len());
            for (x, y) in ra.iter().zip(&rb) {
                assert_eq!(x.key, y.key);
                assert_eq!(x.burst, y.burst);
                assert!((x.cpu_pct - y.cpu_pct).abs() < 1e-9);
            }
        };
        assert_eq!(batch_of(r.command(ReplayCmd::Step(1))), batches[0]);
        assert!(r.status().paused);
        assert_eq!(batch_of(r.command(ReplayCmd::Step(1))), batches[1]);
        same(&model_of(r.command(ReplayCmd::Step(-1))), &live_at(0));
        assert!(matches!(r.command(ReplayCmd::Step(-1)), Apply::None));
        // Intervals are 50 ms apart: +10 s is 200 intervals on.
        same(&model_of(r.command(ReplayCmd::Seek(10_000))), &live_at(200));
        assert_eq!(r.status().shown, Some(200));
        same(&model_of(r.command(ReplayCmd::Seek(-60_000))), &live_at(0));
        same(
            &model_of(r.command(ReplayCmd::GoTo(TimeSpec::FromEnd(0)))),
            &live_at(299),
        );
        assert!(r.status().at_end);
        same(
            &model_of(r.command(ReplayCmd::GoTo(TimeSpec::FromStart(5_000)))),
            &live_at(100),
        );
        r.command(ReplayCmd::TogglePause);
        assert!(!r.status().paused);
        assert_eq!(batch_of(r.advance()), batches[101]);
    }

    #[test]
    fn speed_is_bounded() {
        let (_d, path, _) = recording(3);
        let mut r = open(&path);
        for _ in 0..10 {
            r.command(ReplayCmd::Faster);
        }
        assert_eq!(r.status().speed, 16.0);
        for _ in 0..10 {
            r.command(ReplayCmd::Slower);
        }
        assert_eq!(r.status().speed, 0.25);
        assert_eq!(r.gap(0, 1), Duration::from_millis(200));
    }
}
