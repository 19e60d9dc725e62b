//! App state and `update`: every input, batch and signal arrives as a `Msg`; the UI loop owns
//! the one `App` and draws it when `update` says something changed.

use std::time::Duration;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::batch::Batch;
use crate::model::Model;

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
    Replay(Box<crate::replay::ReplayUpdate>),
    /// From the recorder thread: where the recording stands.
    Recording(crate::record::RecStatus),
}

/// What the UI loop must do after an update.
#[derive(Debug, PartialEq, Eq)]
pub enum Effect {
    None,
    Redraw,
    SetInterval(Duration),
    /// Pass a command to the replay thread.
    Replay(crate::replay::ReplayCmd),
    Quit,
}

pub struct App {
    pub model: Model,
    pub k: usize,
    pub selected: usize,
    pub paused: bool,
    pub interval: Duration,
    /// Rows shown while paused (collection goes on underneath).
    pub frozen: Option<Vec<crate::model::CpuEntry>>,
    pub error: Option<String>,
    /// Set when replaying a recording (replay.rs).
    pub replay: Option<crate::replay::ReplayControl>,
    /// Set when recording (record/recorder.rs).
    pub recording: Option<crate::record::RecStatus>,
}

const MIN_INTERVAL: Duration = Duration::from_millis(10);
const MAX_INTERVAL: Duration = Duration::from_secs(10);

impl App {
    pub fn new(k: usize, interval: Duration) -> Self {
        Self {
            model: Model::new(),
            k,
            selected: 0,
            paused: false,
            interval,
            frozen: None,
            error: None,
            replay: None,
            recording: None,
        }
    }

    /// The rows to draw: live, or the snapshot taken when the screen was paused.
    pub fn rows(&self) -> Vec<crate::model::CpuEntry> {
        match &self.frozen {
            Some(r) => r.clone(),
            None => self.model.top_cpu(self.k),
        }
    }

    pub fn update(&mut self, msg: Msg) -> Effect {
        match msg {
            Msg::Batch(b) => {
                self.model.ingest(&b);
                if self.paused {
                    Effect::None
                } else {
                    Effect::Redraw
                }
            }
            Msg::Signal(_) => Effect::Quit,
            Msg::SourceError(e) => {
                self.error = Some(e);
                Effect::Quit
            }
            Msg::Replay(u) => self.on_replay(*u),
            Msg::Recording(s) => {
                self.recording = Some(s);
                Effect::None
            }
            Msg::Input(Event::Resize(..)) => Effect::Redraw,
            Msg::Input(Event::Key(k)) if k.kind != KeyEventKind::Release => self.key(k),
            Msg::Input(_) => Effect::None,
        }
    }

    fn key(&mut self, k: KeyEvent) -> Effect {
        if let Some(e) = self.replay.as_mut().and_then(|r| r.key(&k)) {
            return e;
        }
        let n = self.rows().len();
        match k.code {
            KeyCode::Char('q') => Effect::Quit,
            KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Effect::Quit,
            KeyCode::Down | KeyCode::Char('j') => {
                if self.selected + 1 < n {
                    self.selected += 1;
                }
                Effect::Redraw
            }
            KeyCode::Up | KeyCode::Char('k') => {
                self.selected = self.selected.saturating_sub(1);
                Effect::Redraw
            }
            KeyCode::Char(' ') => {
                self.paused = !self.paused;
                self.frozen = self.paused.then(|| self.model.top_cpu(self.k));
                Effect::Redraw
            }
            KeyCode::Char('+') => self.change_interval(true),
            KeyCode::Char('-') => self.change_interval(false),
            _ => Effect::None,
        }
    }

    fn change_interval(&mut self, longer: bool) -> Effect {
        let ms = self.interval.as_millis() as u64;
        // 10, 20, 50, 100, 200, 500 ms, 1, 2, 5, 10 s.
        let steps = [10u64, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];
        let next = if longer {
            steps.iter().copied().find(|s| *s > ms)
        } else {
            steps.iter().rev().copied().find(|s| *s < ms)
        };
        match next {
            Some(ms) => {
                self.interval = Duration::from_millis(ms).clamp(MIN_INTERVAL, MAX_INTERVAL);
                Effect::SetInterval(self.interval)
            }
            None => Effect::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{CpuRow, ProcInfo};

    fn key(c: KeyCode) -> Msg {
        Msg::Input(Event::Key(KeyEvent::new(c, KeyModifiers::NONE)))
    }

    fn batch(n: u32) -> Box<Batch> {
        Box::new(Batch {
            seq: 1,
            end_ns: 50_000_000,
            cpu: (1..=n)
                .map(|p| CpuRow {
                    pid: p,
                    ns: 1000 * u64::from(n - p + 1),
                    bins: vec![],
                })
                .collect(),
            procs: (1..=n)
                .map(|p| ProcInfo {
                    pid: p,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }

    #[test]
    fn quit_keys_and_signals() {
        let mut a = App::new(20, Duration::from_millis(50));
        assert_eq!(a.update(key(KeyCode::Char('q'))), Effect::Quit);
        assert_eq!(a.update(Msg::Signal(1)), Effect::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(a.update(Msg::Input(Event::Key(ctrl_c))), Effect::Quit);
    }

    #[test]
    fn selection_stays_in_range() {
        let mut a = App::new(20, Duration::from_millis(50));
        a.update(Msg::Batch(batch(3)));
        for _ in 0..5 {
            a.update(key(KeyCode::Down));
        }
        assert_eq!(a.selected, 2);
        for _ in 0..5 {
            a.update(key(KeyCode::Char('k')));
        }
        assert_eq!(a.selected, 0);
    }

    #[test]
    fn pause_freezes_rows_but_keeps_ingesting() {
        let mut a = App::new(20, Duration::from_millis(50));
        a.update(Msg::Batch(batch(2)));
        a.update(key(KeyCode::Char(' ')));
        assert_eq!(a.update(Msg::Batch(batch(5))), Effect::None);
        assert_eq!(a.rows().len(), 2);
        assert_eq!(a.model.top_cpu(20).len(), 5);
        a.update(key(KeyCode::Char(' ')));
        assert_eq!(a.rows().len(), 5);
    }

    #[test]
    fn interval_steps() {
        let mut a = App::new(20, Duration::from_millis(50));
        assert_eq!(
            a.update(key(KeyCode::Char('+'))),
            Effect::SetInterval(Duration::from_millis(100))
        );
        a.update(key(KeyCode::Char('-')));
        a.update(key(KeyCode::Char('-')));
        a.update(key(KeyCode::Char('-')));
        assert_eq!(a.interval, Duration::from_millis(10));
        assert_eq!(a.update(key(KeyCode::Char('-'))), Effect::None);
    }
}
