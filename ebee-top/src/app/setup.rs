//! The setup screen (F2): the process table's columns (shown ones first, in order, then the
//! others), the default sort, the interval, the colours and the tree default. Every change
//! applies at once and asks the front-end to save the settings.

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::settings::{ALL_COLUMNS, AUTO_COLUMNS, COLOR_MODES, SORTS};
use super::{App, Column, Effect, MAX_INTERVAL, MIN_INTERVAL, Overlay, SortBy};

/// One line of the setup screen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupRow {
    /// A column, and whether it is shown.
    Column(Column, bool),
    Sort,
    Interval,
    Color,
    Tree,
}

/// The intervals the setup screen steps through (as `+` and `-` do).
pub(super) const INTERVAL_STEPS: [u64; 10] = [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];

/// The key legend the setup screen shows.
pub const SETUP_KEYS: &str = "Up/Down move  Space/Enter show/hide or next value  \
                              [ ] or Shift-Up/Down move a column  Left/Right change a value  \
                              r automatic columns  Esc/F2 close";

impl App {
    /// The columns shown, in order (the automatic layout's list when none are chosen; which
    /// of IO, NET and CGROUP it draws then depends on the width).
    pub fn shown_columns(&self) -> Vec<Column> {
        self.columns
            .clone()
            .unwrap_or_else(|| AUTO_COLUMNS.to_vec())
    }

    /// The setup screen's lines: the shown columns in order, the others, then the settings.
    pub fn setup_rows(&self) -> Vec<SetupRow> {
        let shown = self.shown_columns();
        let mut rows: Vec<SetupRow> = shown.iter().map(|c| SetupRow::Column(*c, true)).collect();
        rows.extend(
            ALL_COLUMNS
                .iter()
                .filter(|c| !shown.contains(c))
                .map(|c| SetupRow::Column(*c, false)),
        );
        rows.extend([
            SetupRow::Sort,
            SetupRow::Interval,
            SetupRow::Color,
            SetupRow::Tree,
        ]);
        rows
    }

    pub(super) fn open_setup(&mut self) -> Effect {
        self.overlay = Some(Overlay::Setup(0));
        Effect::Redraw
    }

    pub(super) fn setup_key(&mut self, cursor: usize, k: KeyEvent) -> Effect {
        let rows = self.setup_rows();
        let last = rows.len().saturating_sub(1);
        let cursor = cursor.min(last);
        let shift = k.modifiers.contains(KeyModifiers::SHIFT);
        let row = rows[cursor];
        let changed = match k.code {
            KeyCode::Esc | KeyCode::F(2) => {
                self.overlay = None;
                return Effect::Redraw;
            }
            KeyCode::Char('q') => return Effect::Quit,
            KeyCode::Up if shift => self.move_column(row, -1),
            KeyCode::Down if shift => self.move_column(row, 1),
            KeyCode::Char('[') => self.move_column(row, -1),
            KeyCode::Char(']') => self.move_column(row, 1),
            KeyCode::Up | KeyCode::Char('k') => {
                self.overlay = Some(Overlay::Setup(cursor.saturating_sub(1)));
                return Effect::Redraw;
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.overlay = Some(Overlay::Setup((cursor + 1).min(last)));
                return Effect::Redraw;
            }
            KeyCode::Char(' ') | KeyCode::Enter => match row {
                SetupRow::Column(c, shown) => self.toggle_column(c, shown),
                other => self.step_setting(other, 1),
            },
            KeyCode::Right => self.step_setting(row, 1),
            KeyCode::Left => self.step_setting(row, -1),
            KeyCode::Char('r') => {
                self.columns = None;
                self.settings.columns = None;
                self.settings.unknown_columns.clear();
                self.status =
                    Some("columns: automatic (IO, NET, CGROUP where the width allows)".into());
                Some(row)
            }
            _ => return Effect::None,
        };
        let Some(follow) = changed else {
            return Effect::Redraw;
        };
        // The cursor stays on the line it was on (a column that moved or was toggled).
        let at = self
            .setup_rows()
            .iter()
            .position(|r| same_line(*r, follow))
            .unwrap_or(cursor);
        self.overlay = Some(Overlay::Setup(at));
        self.follow_selection();
        Effect::SaveSettings
    }

    fn set_columns(&mut self, cols: Vec<Column>) {
        self.columns = Some(cols.clone());
        self.settings.columns = Some(cols);
    }

    fn toggle_column(&mut self, c: Column, shown: bool) -> Option<SetupRow> {
        let mut cols = self.shown_columns();
        if shown {
            cols.retain(|x| *x != c);
        } else {
            // A new column goes before COMMAND when that ends the row, else last.
            let at = match cols.last() {
                Some(Column::Command) => cols.len() - 1,
                _ => cols.len(),
            };
            cols.insert(at, c);
        }
        self.set_columns(cols);
        Some(SetupRow::Column(c, !shown))
    }

    fn move_column(&mut self, row: SetupRow, by: i64) -> Option<SetupRow> {
        let SetupRow::Column(c, true) = row else {
            self.status = Some("only a shown column moves ([ and ])".into());
            return None;
        };
        let mut cols = self.shown_columns();
        let i = cols.iter().position(|x| *x == c)?;
        let j = (i as i64 + by).clamp(0, cols.len() as i64 - 1) as usize;
        if i == j {
            return None;
        }
        cols.swap(i, j);
        self.set_columns(cols);
        Some(row)
    }

    fn step_setting(&mut self, row: SetupRow, by: i64) -> Option<SetupRow> {
        fn step<T: Copy + PartialEq>(all: &[T], now: T, by: i64) -> T {
            let n = all.len() as i64;
            let i = all.iter().position(|x| *x == now).unwrap_or(0) as i64;
            all[(i + by).rem_euclid(n) as usize]
        }
        match row {
            SetupRow::Column(..) => return None,
            SetupRow::Sort => {
                let to = step(&SORTS, self.settings.sort.unwrap_or(self.sort), by);
                self.settings.sort = Some(to);
                let ok = self.sort_available(to);
                self.sort = if ok { to } else { SortBy::Cpu };
                if !ok {
                    self.status = Some(format!(
                        "default sort {} saved; this run has no such data: sorting by CPU",
                        super::settings::sort_key(to)
                    ));
                }
            }
            SetupRow::Interval => {
                let now = self.settings.interval.unwrap_or(self.interval).as_millis() as u64;
                let i = INTERVAL_STEPS
                    .iter()
                    .position(|s| *s >= now)
                    .unwrap_or(INTERVAL_STEPS.len() - 1) as i64;
                let i = (i + by).clamp(0, INTERVAL_STEPS.len() as i64 - 1) as usize;
                let d = Duration::from_millis(INTERVAL_STEPS[i]).clamp(MIN_INTERVAL, MAX_INTERVAL);
                self.settings.interval = Some(d);
                if self.replay.is_some() {
                    self.status =
                        Some("the interval is the recording's: saved for live runs".into());
                } else {
                    self.interval = d;
                }
            }
            SetupRow::Color => {
                let to = step(&COLOR_MODES, self.color, by);
                self.color = to;
                self.settings.color = Some(to);
            }
            SetupRow::Tree => {
                self.tree_default = !self.tree_default;
                self.settings.tree = Some(self.tree_default);
            }
        }
        Some(row)
    }

    /// At the first interval: a default sort from the settings that this run has no data for
    /// (no memory pipeline, an older recording) sorts by CPU, and the status line says so.
    pub(super) fn check_default_sort(&mut self) {
        let Some(by) = self.settings.sort.filter(|_| !self.sort_checked) else {
            return;
        };
        if self.model.latest().is_none() {
            return;
        }
        self.sort_checked = true;
        if self.sort == by && !self.sort_available(by) {
            self.sort = SortBy::Cpu;
            self.status = Some(format!(
                "default sort {}: no such data from this kernel or recording: sorting by CPU",
                super::settings::sort_key(by)
            ));
        }
    }

    /// Whether this run has the data to sort by `by`.
    pub(super) fn sort_available(&self, by: SortBy) -> bool {
        let m = self.shown();
        match by {
            SortBy::Cpu => true,
            SortBy::Mem => m.mem.available,
            SortBy::Wait => m.wait.available,
            SortBy::Io => m.wait.io_available,
            SortBy::Iow | SortBy::Hold => m.wait.offcpu_available,
            SortBy::Net => m.servers.available,
        }
    }
}

/// The same line of the setup screen, whether or not its column is now shown.
fn same_line(a: SetupRow, b: SetupRow) -> bool {
    match (a, b) {
        (SetupRow::Column(x, _), SetupRow::Column(y, _)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use crossterm::event::{Event, KeyEvent, KeyModifiers};

    use super::*;
    use crate::app::Msg;

    fn key(app: &mut App, code: KeyCode) -> Effect {
        app.update(Msg::Input(Event::Key(KeyEvent::new(
            code,
            KeyModifiers::NONE,
        ))))
    }

    fn cursor(app: &App) -> usize {
        match app.overlay {
            Some(Overlay::Setup(c)) => c,
            _ => panic!("setup closed"),
        }
    }

    #[test]
    fn f2_chooses_and_orders_columns() {
        let mut a = App::new(20, Duration::from_millis(50));
        assert_eq!(key(&mut a, KeyCode::F(2)), Effect::Redraw);
        let rows = a.setup_rows();
        // The automatic layout's columns first, shown; then the others.
        assert_eq!(rows[0], SetupRow::Column(Column::Pid, true));
        assert_eq!(rows[12], SetupRow::Column(Column::Nice, false));
        assert_eq!(rows.len(), 19 + 4);
        for _ in 0..12 {
            key(&mut a, KeyCode::Down);
        }
        assert_eq!(key(&mut a, KeyCode::Char(' ')), Effect::SaveSettings);
        let mut want = AUTO_COLUMNS.to_vec();
        want.insert(11, Column::Nice);
        assert_eq!(a.columns.as_ref(), Some(&want));
        assert_eq!(a.settings.columns.as_ref(), Some(&want));
        // The cursor stayed on NI, now the twelfth shown column.
        assert_eq!(cursor(&a), 11);
        // `]` moves it after COMMAND, `[` back; Shift-Up as `[`.
        key(&mut a, KeyCode::Char(']'));
        assert_eq!(a.columns.as_ref().unwrap().last(), Some(&Column::Nice));
        assert_eq!(cursor(&a), 12);
        a.update(Msg::Input(Event::Key(KeyEvent::new(
            KeyCode::Up,
            KeyModifiers::SHIFT,
        ))));
        assert_eq!(a.columns.as_ref().unwrap()[11], Column::Nice);
        // Hide PID.
        for _ in 0..11 {
            key(&mut a, KeyCode::Up);
        }
        assert_eq!(cursor(&a), 0);
        key(&mut a, KeyCode::Enter);
        assert!(!a.columns.as_ref().unwrap().contains(&Column::Pid));
        // `r`: back to the automatic layout.
        assert_eq!(key(&mut a, KeyCode::Char('r')), Effect::SaveSettings);
        assert_eq!(a.columns, None);
        assert_eq!(a.settings.columns, None);
        assert_eq!(key(&mut a, KeyCode::Esc), Effect::Redraw);
        assert!(a.overlay.is_none());
    }

    #[test]
    fn f2_sets_the_sort_interval_colours_and_tree() {
        let mut a = App::new(20, Duration::from_millis(50));
        key(&mut a, KeyCode::F(2));
        for _ in 0..19 {
            key(&mut a, KeyCode::Down);
        }
        assert_eq!(a.setup_rows()[cursor(&a)], SetupRow::Sort);
        assert_eq!(key(&mut a, KeyCode::Right), Effect::SaveSettings);
        // Saved as asked; this run has no memory data yet, so it sorts by CPU and says so.
        assert_eq!(a.settings.sort, Some(SortBy::Mem));
        assert_eq!(a.sort, SortBy::Cpu);
        assert!(a.status.as_deref().unwrap().contains("sorting by CPU"));
        key(&mut a, KeyCode::Down);
        key(&mut a, KeyCode::Right);
        assert_eq!(a.interval, Duration::from_millis(100));
        assert_eq!(a.settings.interval, Some(Duration::from_millis(100)));
        key(&mut a, KeyCode::Left);
        key(&mut a, KeyCode::Left);
        assert_eq!(a.interval, Duration::from_millis(20));
        key(&mut a, KeyCode::Down);
        key(&mut a, KeyCode::Left);
        assert_eq!(a.color, crate::app::ColorMode::Truecolor);
        assert_eq!(a.settings.color, Some(crate::app::ColorMode::Truecolor));
        key(&mut a, KeyCode::Down);
        key(&mut a, KeyCode::Enter);
        assert!(a.tree_default);
        assert_eq!(a.settings.tree, Some(true));
        // The last line stays the last.
        key(&mut a, KeyCode::Down);
        assert_eq!(a.setup_rows()[cursor(&a)], SetupRow::Tree);
        // F2 closes, as Esc does.
        key(&mut a, KeyCode::F(2));
        assert!(a.overlay.is_none());
    }

    #[test]
    fn a_default_sort_without_its_data_falls_back_to_cpu_at_the_first_interval() {
        use crate::batch::Batch;
        let mut a = App::new(20, Duration::from_millis(50));
        a.apply_settings(crate::app::Settings {
            sort: Some(SortBy::Mem),
            ..Default::default()
        });
        assert_eq!(a.sort, SortBy::Mem);
        let ms = 1_000_000;
        let b = Batch::build(1, 10_000 * ms, 50 * ms).done();
        a.update(Msg::Batch(Box::new(b)));
        assert_eq!(a.sort, SortBy::Cpu);
        assert!(a.status.as_deref().unwrap().contains("default sort mem"));
        // With the data there, the default holds.
        let mut a = App::new(20, Duration::from_millis(50));
        a.apply_settings(crate::app::Settings {
            sort: Some(SortBy::Wait),
            ..Default::default()
        });
        let mut b = Batch::build(1, 10_000 * ms, 50 * ms).done();
        b.wait_stats.available = true;
        a.update(Msg::Batch(Box::new(b)));
        assert_eq!(a.sort, SortBy::Wait);
    }

    #[test]
    fn proc_stat_columns_are_asked_for_once_a_second_and_only_when_shown() {
        use crate::batch::Batch;
        let mut a = App::new(20, Duration::from_millis(50));
        let b = |seq: u64| {
            let ms = 1_000_000;
            Box::new(
                Batch::build(seq, 10_000 * ms + seq * 50 * ms, 50 * ms)
                    .cpu(7, 5 * ms, &[5 * ms])
                    .done(),
            )
        };
        // The automatic layout reads nothing from /proc.
        assert_eq!(a.update(Msg::Batch(b(1))), Effect::Redraw);
        a.columns = Some(vec![Column::Pid, Column::Nice, Column::Command]);
        let asked: Vec<u64> = (2..=60)
            .filter(|s| matches!(a.update(Msg::Batch(b(*s))), Effect::ReadStats(_)))
            .collect();
        // 59 intervals of 50 ms: the first, then one a second.
        assert_eq!(asked, vec![2, 22, 42], "{asked:?}");
        let Effect::ReadStats(keys) = a.update(Msg::Batch(b(62))) else {
            panic!("no request after a second");
        };
        assert_eq!(keys.iter().map(|k| k.pid).collect::<Vec<_>>(), vec![7]);
    }
}
