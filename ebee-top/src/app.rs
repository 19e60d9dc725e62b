//! App state and `update`: every input, batch and signal arrives as a `Msg`; the UI loop owns
//! the one `App` and draws it when `update` says something changed.

use std::time::Duration;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::batch::Batch;
use crate::host::{Details, HostInfo};
use crate::model::Model;
use crate::model::procs::{ProcEntry, ProcKey};

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
    /// The machine's totals (live only, once a second).
    Host(Box<HostInfo>),
    /// A process's details, read from /proc when the popup opened.
    Details(Box<Details>),
    /// Something to tell the user in the status line (a pin the kernel refused...).
    Notice(String),
}

/// What the UI loop must do after an update.
#[derive(Debug, PartialEq, Eq)]
pub enum Effect {
    None,
    Redraw,
    SetInterval(Duration),
    /// Make the source follow exactly these processes (QoS hooks attach on the first).
    SetPins(Vec<u32>),
    /// Read this process's details from /proc and send them back as `Msg::Details`.
    Details(ProcKey),
    /// Pass a command to the replay thread.
    Replay(crate::replay::ReplayCmd),
    Quit,
}

/// How the process table is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    Cpu,
    Mem,
}

/// The pane that takes Up/Down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Focus {
    Table,
    Qos,
}

/// What is drawn over the panes.
#[derive(Clone, Debug, PartialEq)]
pub enum Overlay {
    Help,
    /// The details popup; None while /proc is being read.
    Details(ProcKey, Option<Box<Details>>),
}

/// How the screen is drawn (from --color, NO_COLOR and --ascii).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ViewOpts {
    pub colors: crate::view::theme::Colors,
    /// Only ASCII: sparklines, borders and marks.
    pub ascii: bool,
}

/// The most processes the kernel follows for QoS.
pub const MAX_PINS: usize = 8;

pub struct App {
    pub model: Model,
    pub k: usize,
    /// Row of the selection in the table as drawn, and the process on it (the selection
    /// follows the process when the ranking changes).
    pub selected: usize,
    pub selected_key: Option<ProcKey>,
    pub paused: bool,
    pub interval: Duration,
    /// The Model as it was when the screen was paused (collection goes on underneath).
    pub frozen: Option<Box<Model>>,
    pub sort: SortBy,
    pub filter: String,
    /// The filter line is being typed.
    pub filter_editing: bool,
    pub focus: Focus,
    /// Index among the QoS processes, when the QoS pane has the focus.
    pub qos_selected: usize,
    pub overlay: Option<Overlay>,
    /// One line for the user (cleared by the next key).
    pub status: Option<String>,
    pub host: Option<HostInfo>,
    /// User names by uid (read once at start, so drawing never reads /etc/passwd).
    pub users: std::collections::HashMap<u32, String>,
    pub opts: ViewOpts,
    /// Terminal size (columns, rows), from resize events.
    pub screen: (u16, u16),
    pub error: Option<String>,
    /// Set when replaying a recording (replay.rs).
    pub replay: Option<crate::replay::ReplayControl>,
    /// Set when recording (record/recorder.rs).
    pub recording: Option<crate::record::RecStatus>,
}

const MIN_INTERVAL: Duration = Duration::from_millis(10);
const MAX_INTERVAL: Duration = Duration::from_secs(10);

/// What `M` says when the Batches carry no memory data (a kernel without rss_stat, an old
/// recording).
pub const NO_MEMORY: &str = "memory pipeline not loaded: sorting by CPU";
pub const SORTED_MEM: &str = "sorted by resident memory (RES)";
pub const SORTED_CPU: &str = "sorted by CPU";

impl App {
    pub fn new(k: usize, interval: Duration) -> Self {
        Self {
            model: Model::new(),
            k,
            selected: 0,
            selected_key: None,
            paused: false,
            interval,
            frozen: None,
            sort: SortBy::Cpu,
            filter: String::new(),
            filter_editing: false,
            focus: Focus::Table,
            qos_selected: 0,
            overlay: None,
            status: None,
            host: None,
            users: Default::default(),
            opts: ViewOpts::default(),
            screen: (0, 0),
            error: None,
            replay: None,
            recording: None,
        }
    }

    /// The Model the screen shows: live, or as it was when paused.
    pub fn shown(&self) -> &Model {
        self.frozen.as_deref().unwrap_or(&self.model)
    }

    /// The table rows to draw, in order: at least `k`, more when the screen has room.
    pub fn table_rows(&self) -> Vec<&ProcEntry> {
        let fit = usize::from(self.screen.1).saturating_sub(6);
        let m = self.shown();
        let rss = (self.sort == SortBy::Mem).then_some(|pid| m.mem.sketch.rss_of(pid));
        m.table.ranked_by(self.k.max(fit), &self.filter, rss)
    }

    /// The rows of the plain CPU ranking (batch output's view), for compatibility.
    pub fn rows(&self) -> Vec<crate::model::CpuEntry> {
        self.shown().top_cpu(self.k)
    }

    /// The process under the selection.
    pub fn selected_entry(&self) -> Option<&ProcEntry> {
        self.table_rows().get(self.selected).copied()
    }

    /// The process the QoS pane shows: with the focus on it, the one chosen there; else the
    /// selected process if it has QoS data, else the first pinned one.
    pub fn qos_pid(&self) -> Option<u32> {
        let procs = self.shown().qos.procs();
        if procs.is_empty() {
            return None;
        }
        if self.focus == Focus::Qos {
            return procs.get(self.qos_selected.min(procs.len() - 1)).copied();
        }
        match self.selected_entry() {
            Some(e) if procs.contains(&e.key.pid) => Some(e.key.pid),
            _ => procs.first().copied(),
        }
    }

    /// Keep the selection on the same process after the rows changed.
    fn follow_selection(&mut self) {
        let rows: Vec<ProcKey> = self.table_rows().iter().map(|e| e.key).collect();
        if let Some(i) = self
            .selected_key
            .and_then(|k| rows.iter().position(|r| *r == k))
        {
            self.selected = i;
        } else {
            self.selected = self.selected.min(rows.len().saturating_sub(1));
            self.selected_key = rows.get(self.selected).copied();
        }
    }

    fn select(&mut self, i: usize) {
        let rows: Vec<ProcKey> = self.table_rows().iter().map(|e| e.key).collect();
        self.selected = i.min(rows.len().saturating_sub(1));
        self.selected_key = rows.get(self.selected).copied();
    }

    pub fn update(&mut self, msg: Msg) -> Effect {
        match msg {
            Msg::Batch(b) => {
                self.model.ingest(&b);
                if self.paused {
                    Effect::None
                } else {
                    self.follow_selection();
                    Effect::Redraw
                }
            }
            Msg::Signal(_) => Effect::Quit,
            Msg::SourceError(e) => {
                self.error = Some(e);
                Effect::Quit
            }
            Msg::Replay(u) => {
                let e = self.on_replay(*u);
                self.follow_selection();
                e
            }
            Msg::Recording(s) => {
                let changed = self.recording.as_ref() != Some(&s);
                self.recording = Some(s);
                if changed {
                    Effect::Redraw
                } else {
                    Effect::None
                }
            }
            Msg::Host(h) => {
                if self.host.as_ref() == Some(&*h) || self.paused {
                    self.host = Some(*h);
                    return Effect::None;
                }
                self.host = Some(*h);
                Effect::Redraw
            }
            Msg::Details(d) => match &mut self.overlay {
                Some(Overlay::Details(k, slot)) if k.pid == d.pid => {
                    *slot = Some(d);
                    Effect::Redraw
                }
                _ => Effect::None,
            },
            Msg::Notice(n) => {
                self.status = Some(n);
                Effect::Redraw
            }
            Msg::Input(Event::Resize(w, h)) => {
                self.screen = (w, h);
                self.follow_selection();
                Effect::Redraw
            }
            Msg::Input(Event::Key(k)) if k.kind != KeyEventKind::Release => self.key(k),
            Msg::Input(_) => Effect::None,
        }
    }

    fn key(&mut self, k: KeyEvent) -> Effect {
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && k.code == KeyCode::Char('c') {
            return Effect::Quit;
        }
        if self.filter_editing {
            match k.code {
                KeyCode::Esc => {
                    self.filter.clear();
                    self.filter_editing = false;
                }
                KeyCode::Enter => self.filter_editing = false,
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if !ctrl && self.filter.chars().count() < 64 => {
                    self.filter.push(c)
                }
                _ => return Effect::None,
            }
            self.follow_selection();
            return Effect::Redraw;
        }
        if let Some(o) = &self.overlay {
            let help = matches!(o, Overlay::Help);
            match k.code {
                KeyCode::Char('q') => return Effect::Quit,
                KeyCode::Char('h') | KeyCode::Char('?') if !help => {
                    self.overlay = Some(Overlay::Help)
                }
                _ => self.overlay = None,
            }
            return Effect::Redraw;
        }
        if let Some(e) = self.replay.as_mut().and_then(|r| r.key(&k)) {
            return e;
        }
        self.status = None;
        match k.code {
            KeyCode::Char('q') => Effect::Quit,
            KeyCode::Down | KeyCode::Char('j') => self.move_by(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_by(-1),
            KeyCode::PageDown => self.move_by(10),
            KeyCode::PageUp => self.move_by(-10),
            KeyCode::Home => self.move_by(i64::MIN / 2),
            KeyCode::End => self.move_by(i64::MAX / 2),
            KeyCode::Char(' ') => {
                self.paused = !self.paused;
                self.frozen = self.paused.then(|| Box::new(self.model.clone()));
                self.follow_selection();
                Effect::Redraw
            }
            KeyCode::Char('+') => self.change_interval(true),
            KeyCode::Char('-') => self.change_interval(false),
            KeyCode::Char('P') => {
                self.sort = SortBy::Cpu;
                self.status = Some(SORTED_CPU.into());
                self.follow_selection();
                Effect::Redraw
            }
            KeyCode::Char('M') => {
                if self.shown().mem.available {
                    self.sort = SortBy::Mem;
                    self.status = Some(SORTED_MEM.into());
                } else {
                    // No memory data from this kernel (or recording): say so, show nothing
                    // made up.
                    self.sort = SortBy::Cpu;
                    self.status = Some(NO_MEMORY.into());
                }
                self.follow_selection();
                Effect::Redraw
            }
            KeyCode::Char('p') => self.toggle_pin(),
            KeyCode::Char('/') => {
                self.filter_editing = true;
                Effect::Redraw
            }
            KeyCode::Esc => {
                self.filter.clear();
                self.follow_selection();
                Effect::Redraw
            }
            KeyCode::Tab | KeyCode::BackTab => {
                self.focus = match self.focus {
                    Focus::Table if !self.shown().qos.procs().is_empty() => Focus::Qos,
                    _ => Focus::Table,
                };
                Effect::Redraw
            }
            KeyCode::Enter => match self.selected_entry().map(|e| e.key) {
                Some(key) => {
                    self.overlay = Some(Overlay::Details(key, None));
                    Effect::Details(key)
                }
                None => Effect::None,
            },
            KeyCode::Char('h') | KeyCode::Char('?') => {
                self.overlay = Some(Overlay::Help);
                Effect::Redraw
            }
            _ => Effect::None,
        }
    }

    fn move_by(&mut self, d: i64) -> Effect {
        match self.focus {
            Focus::Table => {
                let i = (self.selected as i64).saturating_add(d).max(0) as usize;
                self.select(i);
            }
            Focus::Qos => {
                let n = self.shown().qos.procs().len();
                let i = (self.qos_selected as i64).saturating_add(d).max(0) as usize;
                self.qos_selected = i.min(n.saturating_sub(1));
            }
        }
        Effect::Redraw
    }

    fn toggle_pin(&mut self) -> Effect {
        let Some(e) = self.selected_entry() else {
            return Effect::None;
        };
        let key = e.key;
        let exited = e.exited();
        let table = &self.model.table;
        if !table.pins().contains(&key) && !exited && table.live_pins().len() >= MAX_PINS {
            self.status = Some(format!("at most {MAX_PINS} processes can be pinned"));
            return Effect::Redraw;
        }
        self.model.table.toggle_pin(key);
        if let Some(f) = &mut self.frozen {
            f.table.toggle_pin(key);
        }
        self.follow_selection();
        if self.replay.is_some() {
            // A recording's QoS data is what it is: the pin only keeps the row in view.
            return Effect::Redraw;
        }
        Effect::SetPins(self.model.table.live_pins())
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

    fn ch(c: char) -> Msg {
        key(KeyCode::Char(c))
    }

    fn app_with(n: u32) -> App {
        let mut a = App::new(20, Duration::from_millis(50));
        a.update(Msg::Batch(batch(n)));
        a
    }

    #[test]
    fn pin_reaches_the_source_and_survives_reranking() {
        let mut a = app_with(3);
        a.update(key(KeyCode::Down));
        let pid = a.selected_entry().unwrap().key.pid;
        assert_eq!(a.update(ch('p')), Effect::SetPins(vec![pid]));
        assert_eq!(a.table_rows()[0].key.pid, pid, "pinned rows come first");
        // Unpin: the source is told to follow nothing.
        let i = a
            .table_rows()
            .iter()
            .position(|e| e.key.pid == pid)
            .unwrap();
        a.selected = i;
        assert_eq!(a.update(ch('p')), Effect::SetPins(vec![]));
    }

    #[test]
    fn no_more_than_eight_pins() {
        let mut a = app_with(10);
        for i in 0..8 {
            a.selected = 8; // always an unpinned row: pinned ones move to the top
            let _ = i;
            assert!(matches!(a.update(ch('p')), Effect::SetPins(_)));
        }
        a.selected = 9;
        assert_eq!(a.update(ch('p')), Effect::Redraw);
        assert!(a.status.as_deref().unwrap_or("").contains("at most 8"));
        assert_eq!(a.model.table.live_pins().len(), 8);
    }

    #[test]
    fn filter_typing_and_esc() {
        let mut a = app_with(12);
        a.update(ch('/'));
        assert!(a.filter_editing);
        a.update(ch('1'));
        a.update(ch('1'));
        assert_eq!(a.table_rows().len(), 1);
        assert_eq!(a.table_rows()[0].key.pid, 11);
        // q while typing is text, not quit.
        assert_eq!(a.update(ch('q')), Effect::Redraw);
        a.update(key(KeyCode::Backspace));
        a.update(key(KeyCode::Enter));
        assert!(!a.filter_editing);
        assert_eq!(a.filter, "11");
        a.update(key(KeyCode::Esc));
        assert!(a.filter.is_empty());
        assert_eq!(a.table_rows().len(), 12);
        a.update(ch('/'));
        a.update(ch('x'));
        a.update(key(KeyCode::Esc));
        assert!(a.filter.is_empty() && !a.filter_editing);
    }

    #[test]
    fn sort_keys_help_and_details() {
        let mut a = app_with(2);
        assert_eq!(a.update(ch('M')), Effect::Redraw);
        assert_eq!(a.status.as_deref(), Some(NO_MEMORY));
        assert_eq!(a.sort, SortBy::Cpu);
        a.update(ch('P'));
        assert_eq!(a.status.as_deref(), Some(SORTED_CPU));
        a.update(ch('?'));
        assert_eq!(a.overlay, Some(Overlay::Help));
        a.update(key(KeyCode::Esc));
        assert_eq!(a.overlay, None);
        a.update(ch('h'));
        assert_eq!(a.overlay, Some(Overlay::Help));
        a.update(ch('x'));
        let k = a.selected_entry().unwrap().key;
        assert_eq!(a.update(key(KeyCode::Enter)), Effect::Details(k));
        let d = crate::host::Details {
            pid: k.pid,
            cmdline: "x".into(),
            ..Default::default()
        };
        assert_eq!(a.update(Msg::Details(Box::new(d))), Effect::Redraw);
        assert!(matches!(&a.overlay, Some(Overlay::Details(_, Some(_)))));
        assert_eq!(a.update(ch('q')), Effect::Quit);
    }

    #[test]
    fn tab_moves_focus_only_when_there_is_a_qos_pane() {
        let mut a = app_with(2);
        a.update(key(KeyCode::Tab));
        assert_eq!(a.focus, Focus::Table);
        assert_eq!(a.qos_pid(), None);
    }

    #[test]
    fn the_selection_follows_its_process() {
        let mut a = app_with(3);
        a.update(key(KeyCode::Down));
        let k = a.selected_entry().unwrap().key;
        // The next interval reverses the ranking.
        let mut b = batch(3);
        b.seq = 2;
        b.start_ns = 50_000_000;
        b.end_ns = 100_000_000;
        b.cpu.reverse();
        for (i, r) in b.cpu.iter_mut().enumerate() {
            r.ns = 1_000_000 * (i as u64 + 1) * 10;
        }
        a.update(Msg::Batch(b));
        assert_eq!(a.selected_entry().unwrap().key, k);
    }

    #[test]
    fn host_news_redraws_only_when_it_changed() {
        let mut a = App::new(20, Duration::from_millis(50));
        let h = crate::host::HostInfo::default();
        assert_eq!(a.update(Msg::Host(Box::new(h.clone()))), Effect::Redraw);
        assert_eq!(a.update(Msg::Host(Box::new(h))), Effect::None);
        assert_eq!(a.update(Msg::Input(Event::FocusGained)), Effect::None);
    }

    #[test]
    fn m_sorts_by_resident_memory_when_the_batches_carry_it() {
        use crate::batch::{MemRow, MemStats};
        let mut b = batch(3);
        b.mem_stats = MemStats {
            available: true,
            ..Default::default()
        };
        // pid 1 uses the most CPU, pid 3 the most memory.
        b.mem = (1..=3)
            .map(|p| MemRow {
                pid: p,
                rss_bytes: u64::from(p) << 20,
                rss_delta_bytes: 0,
            })
            .collect();
        let mut a = App::new(20, Duration::from_millis(50));
        a.update(Msg::Batch(b));
        let order = |a: &App| -> Vec<u32> { a.table_rows().iter().map(|e| e.key.pid).collect() };
        assert_eq!(order(&a), vec![1, 2, 3]);
        a.update(ch('M'));
        assert_eq!(a.sort, SortBy::Mem);
        assert_eq!(a.status.as_deref(), Some(SORTED_MEM));
        assert_eq!(order(&a), vec![3, 2, 1]);
        a.update(ch('P'));
        assert_eq!(order(&a), vec![1, 2, 3]);
    }
}
