//! `update`: how each message and key changes the App, and what the loop must do after it.

use std::time::Duration;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::{
    App, Effect, Focus, MAX_INTERVAL, MAX_PINS, MIN_INTERVAL, MainView, Msg, NO_ACT, NO_CGROUPS,
    NO_HOLD, NO_IO, NO_IOW, NO_MEMORY, NO_NET, NO_SERVERS, NO_THREADS, NO_WAIT, Overlay,
    SORTED_CPU, SORTED_HOLD, SORTED_IO, SORTED_IOW, SORTED_MEM, SORTED_NET, SORTED_P99, SORTED_RPS,
    SORTED_WAIT, SignalMenu, SortBy, THREADS_OFF, THREADS_ON, TREE_OFF, TREE_ON,
};
use crate::model::procs::ProcKey;
use crate::model::servers::ServerSort;
use crate::os::act::SIGNALS;

impl App {
    /// Keep the selection on the same process after the rows changed.
    pub(super) fn follow_selection(&mut self) {
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
                let end_ns = b.end_ns;
                self.model.ingest_owned(*b);
                self.check_default_sort();
                if self.paused {
                    Effect::None
                } else {
                    self.follow_selection();
                    self.stats_due(end_ns)
                        .map_or(Effect::Redraw, Effect::ReadStats)
                }
            }
            Msg::Stats(s) => {
                self.stats = s.into_iter().collect();
                Effect::Redraw
            }
            Msg::Pointer(p) => self.pointer(p),
            Msg::Signal(_) => Effect::Quit,
            Msg::SourceError(e) => {
                self.error = Some(e);
                Effect::Quit
            }
            Msg::Replay(u) => {
                let e = self.on_replay(*u);
                self.check_default_sort();
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
        if matches!(self.overlay, Some(Overlay::Signal(_))) {
            return self.signal_key(k);
        }
        if let Some(Overlay::Users(cursor)) = self.overlay {
            return self.users_key(cursor, k);
        }
        if let Some(Overlay::Setup(cursor)) = self.overlay {
            return self.setup_key(cursor, k);
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
            KeyCode::Char('q') | KeyCode::F(10) => Effect::Quit,
            KeyCode::F(1) => {
                self.overlay = Some(Overlay::Help);
                Effect::Redraw
            }
            KeyCode::F(3) | KeyCode::F(4) => {
                self.filter_editing = true;
                Effect::Redraw
            }
            KeyCode::Char('t') | KeyCode::F(5) => {
                self.tree = !self.tree;
                self.status = Some(if self.tree { TREE_ON } else { TREE_OFF }.into());
                self.follow_selection();
                Effect::Redraw
            }
            KeyCode::Left if self.tree && self.main == MainView::Processes => self.tree_left(),
            KeyCode::Right if self.tree && self.main == MainView::Processes => self.tree_right(),
            KeyCode::Char('T') => self.toggle_tag(),
            KeyCode::Char('u') => {
                let at = self
                    .user_choices()
                    .iter()
                    .position(|c| c.0 == self.user)
                    .unwrap_or(0);
                self.overlay = Some(Overlay::Users(at));
                Effect::Redraw
            }
            KeyCode::Char('U') => {
                let n = self.tagged.len();
                self.tagged.clear();
                self.status = Some(format!("{n} untagged"));
                Effect::Redraw
            }
            KeyCode::F(9) | KeyCode::Char('K') => self.open_signal_menu(),
            KeyCode::F(7) => self.renice(-1),
            KeyCode::F(8) => self.renice(1),
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
                let ok = self.shown().mem.available;
                self.sort_or_cpu(ok, SortBy::Mem, SORTED_MEM, NO_MEMORY)
            }
            KeyCode::Char('W') => {
                let ok = self.shown().wait.available;
                self.sort_or_cpu(ok, SortBy::Wait, SORTED_WAIT, NO_WAIT)
            }
            KeyCode::Char('I') => {
                let ok = self.shown().wait.io_available;
                self.sort_or_cpu(ok, SortBy::Io, SORTED_IO, NO_IO)
            }
            KeyCode::Char('D') => {
                let ok = self.shown().wait.offcpu_available;
                self.sort_or_cpu(ok, SortBy::Iow, SORTED_IOW, NO_IOW)
            }
            KeyCode::Char('B') => {
                let ok = self.shown().wait.offcpu_available;
                self.sort_or_cpu(ok, SortBy::Hold, SORTED_HOLD, NO_HOLD)
            }
            KeyCode::Char('N') => {
                let ok = self.shown().servers.available;
                self.sort_or_cpu(ok, SortBy::Net, SORTED_NET, NO_NET)
            }
            KeyCode::Char('S') => {
                self.main = match self.main {
                    MainView::Processes if self.shown().servers.available => MainView::Servers,
                    MainView::Processes => {
                        self.status = Some(NO_SERVERS.into());
                        MainView::Processes
                    }
                    MainView::Servers | MainView::Cgroups => MainView::Processes,
                };
                self.focus = Focus::Table;
                Effect::Redraw
            }
            KeyCode::Char('C') => {
                self.main = match self.main {
                    MainView::Cgroups => MainView::Processes,
                    _ if self.shown().cgroups.available => MainView::Cgroups,
                    other => {
                        self.status = Some(NO_CGROUPS.into());
                        other
                    }
                };
                self.focus = Focus::Table;
                Effect::Redraw
            }
            KeyCode::Char('H') => {
                if self.replay.is_some() && !self.threads && !self.shown().threads_on {
                    self.status = Some(NO_THREADS.into());
                    return Effect::Redraw;
                }
                self.threads = !self.threads;
                self.status = Some(
                    if self.threads {
                        THREADS_ON
                    } else {
                        THREADS_OFF
                    }
                    .into(),
                );
                self.selected_key = None;
                self.follow_selection();
                if self.replay.is_some() {
                    Effect::Redraw
                } else {
                    Effect::SetThreads(self.threads)
                }
            }
            KeyCode::Enter if self.main == MainView::Cgroups => {
                let rows = self.cgroup_rows();
                let Some(g) = rows.get(self.cg_selected.min(rows.len().saturating_sub(1))) else {
                    return Effect::None;
                };
                if g.path.is_empty() {
                    return Effect::None;
                }
                self.filter = format!("{}{}", crate::model::procs::CGROUP_FILTER, g.path);
                self.main = MainView::Processes;
                self.selected_key = None;
                self.follow_selection();
                Effect::Redraw
            }
            KeyCode::Char('R') if self.main == MainView::Servers => {
                self.srv_sort = ServerSort::Rps;
                self.status = Some(SORTED_RPS.into());
                Effect::Redraw
            }
            KeyCode::Char('L') if self.main == MainView::Servers => {
                self.srv_sort = ServerSort::P99;
                self.status = Some(SORTED_P99.into());
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
            KeyCode::Enter => match self.selected_process().map(|e| e.key) {
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
            KeyCode::F(2) => self.open_setup(),
            _ => Effect::None,
        }
    }

    /// Left in the tree: fold the selected row's subtree, or go to its parent.
    fn tree_left(&mut self) -> Effect {
        let rows = self.tree_rows();
        let Some(i) = self
            .selected_key
            .and_then(|k| rows.iter().position(|r| r.entry.key == k))
        else {
            return Effect::None;
        };
        let r = &rows[i];
        if r.parent && !r.collapsed {
            let key = r.entry.key;
            self.collapsed.insert(key);
        } else if r.depth > 0
            && let Some(p) = rows[..i].iter().rposition(|p| p.depth + 1 == r.depth)
        {
            let key = rows[p].entry.key;
            self.selected_key = Some(key);
        } else {
            return Effect::None;
        }
        self.follow_selection();
        Effect::Redraw
    }

    /// Right in the tree: unfold the selected row's subtree.
    fn tree_right(&mut self) -> Effect {
        match self.selected_key {
            Some(k) if self.collapsed.remove(&k) => {
                self.follow_selection();
                Effect::Redraw
            }
            _ => Effect::None,
        }
    }

    /// A key in the user picker: move, pick (Enter), or close (Esc: every user).
    fn users_key(&mut self, cursor: usize, k: KeyEvent) -> Effect {
        let choices = self.user_choices();
        let last = choices.len().saturating_sub(1);
        match k.code {
            KeyCode::Up | KeyCode::Char('k') => {
                self.overlay = Some(Overlay::Users(cursor.saturating_sub(1)))
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.overlay = Some(Overlay::Users((cursor + 1).min(last)))
            }
            KeyCode::Enter => {
                self.overlay = None;
                let (uid, name) = choices.get(cursor.min(last)).cloned().unwrap_or_default();
                self.user = uid;
                self.status = Some(match uid {
                    Some(_) => format!("only {name}'s processes (u: another user)"),
                    None => "every user's processes".into(),
                });
                self.selected_key = None;
                self.follow_selection();
            }
            KeyCode::Esc => {
                self.overlay = None;
                if self.user.take().is_some() {
                    self.status = Some("every user's processes".into());
                    self.follow_selection();
                }
            }
            KeyCode::Char('q') => return Effect::Quit,
            _ => return Effect::None,
        }
        Effect::Redraw
    }

    /// `T`: tag or untag the selected process, and move down (as htop's space does).
    fn toggle_tag(&mut self) -> Effect {
        let Some(key) = self.selected_process().map(|e| e.key) else {
            return Effect::None;
        };
        if !self.tagged.remove(&key) {
            self.tagged.insert(key);
        }
        self.status = Some(format!(
            "{} tagged (F9 signal, F7/F8 nice act on them; U untags all)",
            self.tagged.len()
        ));
        self.move_by(1)
    }

    /// F9: the signal menu for the tagged processes, else the selected one.
    fn open_signal_menu(&mut self) -> Effect {
        if self.replay.is_some() {
            self.status = Some(NO_ACT.into());
            return Effect::Redraw;
        }
        let targets: Vec<(ProcKey, String)> = self
            .targets()
            .into_iter()
            .filter(|e| !e.exited())
            .map(|e| (e.key, e.command()))
            .collect();
        if targets.is_empty() {
            self.status = Some("no live process selected".into());
            return Effect::Redraw;
        }
        let keys = targets.iter().map(|t| t.0).collect();
        self.overlay = Some(Overlay::Signal(SignalMenu {
            targets,
            cursor: 0,
            confirm: false,
            typed: String::new(),
        }));
        Effect::Hold(keys)
    }

    /// A key in the signal menu: move, pick by number, confirm, send or cancel.
    fn signal_key(&mut self, k: KeyEvent) -> Effect {
        let Some(Overlay::Signal(menu)) = &mut self.overlay else {
            return Effect::None;
        };
        let last = SIGNALS.len() - 1;
        if menu.confirm {
            return match k.code {
                KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Enter => {
                    let sig = SIGNALS[menu.cursor.min(last)].0;
                    self.overlay = None;
                    Effect::Signal(sig)
                }
                KeyCode::Char('q') => {
                    self.overlay = None;
                    Effect::Release
                }
                _ => {
                    menu.confirm = false;
                    Effect::Redraw
                }
            };
        }
        match k.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::F(9) | KeyCode::F(10) => {
                self.overlay = None;
                self.status = Some("no signal sent".into());
                return Effect::Release;
            }
            KeyCode::Up | KeyCode::Char('k') => menu.cursor = menu.cursor.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => menu.cursor = (menu.cursor + 1).min(last),
            KeyCode::Home => menu.cursor = 0,
            KeyCode::End => menu.cursor = last,
            KeyCode::Char(d) if d.is_ascii_digit() && menu.typed.len() < 2 => {
                menu.typed.push(d);
                if let Ok(n) = menu.typed.parse::<i32>()
                    && let Some(i) = SIGNALS.iter().position(|s| s.0 == n)
                {
                    menu.cursor = i;
                }
            }
            KeyCode::Backspace => {
                menu.typed.pop();
            }
            KeyCode::Enter => {
                menu.typed.clear();
                menu.confirm = true;
            }
            _ => {
                // Another digit starts a new number.
                menu.typed.clear();
                return Effect::None;
            }
        }
        Effect::Redraw
    }

    /// F7/F8: a nicer (lower) or less nice value by one, for every thread of the targets.
    fn renice(&mut self, delta: i32) -> Effect {
        if self.replay.is_some() {
            self.status = Some(NO_ACT.into());
            return Effect::Redraw;
        }
        let keys: Vec<ProcKey> = self
            .targets()
            .into_iter()
            .filter(|e| !e.exited())
            .map(|e| e.key)
            .collect();
        if keys.is_empty() {
            self.status = Some("no live process selected".into());
            return Effect::Redraw;
        }
        Effect::Renice(keys, delta)
    }

    /// The rows in view whose /proc/PID/stat columns are shown, when a second has passed since
    /// they were last asked for (by the Batches' clock: live only, a replay has no /proc).
    fn stats_due(&mut self, now_ns: u64) -> Option<Vec<ProcKey>> {
        if self.main != MainView::Processes
            || now_ns.saturating_sub(self.stats_asked_ns) < 1_000_000_000
            || !self.shown_columns().iter().any(|c| c.from_stat())
        {
            return None;
        }
        self.stats_asked_ns = now_ns;
        Some(self.table_rows().iter().map(|e| e.key).collect())
    }

    /// A click or the wheel on the process table.
    fn pointer(&mut self, p: super::Pointer) -> Effect {
        use super::Pointer;
        if self.overlay.is_some() || self.filter_editing {
            return Effect::None;
        }
        self.status = None;
        match p {
            Pointer::Wheel(d) => self.move_by(d),
            Pointer::Row(i) => {
                self.focus = Focus::Table;
                self.select(i);
                Effect::Redraw
            }
            Pointer::Header(col) => match col.and_then(|c| Some((c, c.sort()?))) {
                Some((c, by)) => {
                    let ok = self.sort_available(by);
                    let done = format!("sorted by {} (click)", c.describe().0);
                    let missing = format!(
                        "no {} data from this kernel or recording: sorting by CPU",
                        c.describe().0
                    );
                    self.sort_or_cpu(ok, by, &done, &missing)
                }
                None => {
                    let name = col.map_or("that column", |c| c.describe().0);
                    self.status = Some(format!(
                        "cannot sort by {name}: click %CPU, WAIT%, RES, IO or NET"
                    ));
                    Effect::Redraw
                }
            },
        }
    }

    /// Sort by `by` when the data is there, else say so (`missing`) and sort by CPU: nothing
    /// made up.
    fn sort_or_cpu(&mut self, ok: bool, by: SortBy, done: &str, missing: &str) -> Effect {
        (self.sort, self.status) = if ok {
            (by, Some(done.into()))
        } else {
            (SortBy::Cpu, Some(missing.into()))
        };
        self.follow_selection();
        Effect::Redraw
    }

    fn move_by(&mut self, d: i64) -> Effect {
        match self.focus {
            Focus::Table if self.main == MainView::Servers => {
                let n = self.server_rows().len();
                let i = (self.srv_selected as i64).saturating_add(d).max(0) as usize;
                self.srv_selected = i.min(n.saturating_sub(1));
            }
            Focus::Table if self.main == MainView::Cgroups => {
                let n = self.cgroup_rows().len();
                let i = (self.cg_selected as i64).saturating_add(d).max(0) as usize;
                self.cg_selected = i.min(n.saturating_sub(1));
            }
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
        let Some(e) = self.selected_process() else {
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
