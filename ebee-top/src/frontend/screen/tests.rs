//! Whole key flows through the screen loop, on a `TestBackend` and fakes: no root, no
//! terminal. Each test feeds the loop what the threads would (intervals, keys, replay updates),
//! checks what reached the caller as effects and what the fakes were asked, and compares whole
//! frames with snapshots (`cargo insta review` after an intended change).

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::{Inputs, Screen};
use crate::app::{App, Effect, Msg, ReplayControl};
use crate::batch::build::plausible;
use crate::batch::qos::QosBatch;
use crate::batch::{Batch, MemRow};
use crate::model::procs::ProcKey;
use crate::os::details::Details;
use crate::source::replay::{Replay, ReplayUpdate};
use crate::view::tests::{MS, app, batch, buffer_text, proc, qos_sample};
use crate::view::theme::Theme;

/// A fake clock (1 ms per reading) and a fake /proc that records which processes it was asked
/// about.
fn fakes(asked: Rc<RefCell<Vec<ProcKey>>>) -> Inputs {
    let mut now = 0u64;
    Inputs {
        clock: Box::new(move || {
            now += MS;
            now
        }),
        details: Box::new(move |k| {
            asked.borrow_mut().push(k);
            Details {
                pid: k.pid,
                comm: "cruncher".into(),
                cmdline: "/usr/local/bin/cruncher --threads 1".into(),
                user: "root".into(),
                threads: Some(1),
                start_s: Some(12.5),
                cgroup: "/system.slice/cruncher.service".into(),
                state: "R".into(),
                note: None,
            }
        }),
        save: Box::new(|_| Ok(())),
    }
}

struct Harness {
    screen: Screen<TestBackend>,
    effects: Vec<Effect>,
    asked: Rc<RefCell<Vec<ProcKey>>>,
}

impl Harness {
    fn new(app: App, w: u16, h: u16) -> Self {
        let asked = Rc::new(RefCell::new(Vec::new()));
        let term = Terminal::new(TestBackend::new(w, h)).unwrap();
        let mut screen = Screen::new(term, app, Theme::default(), fakes(asked.clone()));
        screen.draw().unwrap();
        Self {
            screen,
            effects: Vec::new(),
            asked,
        }
    }

    /// Send one message; false when the screen closed.
    fn send(&mut self, m: Msg) -> bool {
        let effects = &mut self.effects;
        self.screen.step(m, &mut |e| effects.push(e)).unwrap()
    }

    fn key(&mut self, c: KeyCode) -> bool {
        self.send(Msg::Input(Event::Key(KeyEvent::new(c, KeyModifiers::NONE))))
    }

    fn keys(&mut self, s: &str) {
        for c in s.chars() {
            self.key(KeyCode::Char(c));
        }
    }

    fn frame(&self) -> String {
        buffer_text(self.screen.backend().buffer())
    }
}

/// Three processes, each with its own share of a CPU, for `n` intervals.
fn three(h: &mut Harness, from: u64, n: u64) {
    let procs = [
        proc(4242, "cruncher", "/usr/local/bin/cruncher --threads 1"),
        proc(812, "redis-server", "/usr/bin/redis-server 127.0.0.1:6379"),
        proc(77, "sshd", "sshd: root@pts/0"),
    ];
    for seq in from..from + n {
        let rows = [
            (4242, [10 * MS; 5]),
            (812, [2 * MS, 2 * MS, 0, 2 * MS, 0]),
            (77, [0, 0, MS, 0, 0]),
        ];
        let mut b = batch(seq, &rows, &procs);
        for (pid, mib) in [(4242u32, 20u64), (812, 900), (77, 6)] {
            b.mem.push(MemRow {
                pid,
                rss_bytes: mib << 20,
                rss_delta_bytes: 0,
            });
        }
        b.mem_stats.available = true;
        assert!(h.send(Msg::Batch(Box::new(b))));
    }
}

fn rows(h: &Harness) -> Vec<u32> {
    h.screen
        .app()
        .table_rows()
        .iter()
        .map(|e| e.key.pid)
        .collect()
}

#[test]
fn iterations_close_the_screen_after_that_many_intervals() {
    let mut h = Harness::new(app(), 100, 30);
    h.screen.stop_after(Some(3));
    three(&mut h, 1, 2);
    // Keys and other news are not intervals.
    assert!(h.key(KeyCode::Down));
    let b = batch(
        3,
        &[(4242, [10 * MS; 5])],
        &[proc(4242, "cruncher", "cruncher")],
    );
    assert!(
        !h.send(Msg::Batch(Box::new(b))),
        "the third interval closes it"
    );
}

#[test]
fn filter_narrows_the_table_and_esc_clears_it() {
    let mut h = Harness::new(app(), 100, 30);
    three(&mut h, 1, 20);
    assert_eq!(rows(&h), vec![4242, 812, 77]);
    h.key(KeyCode::Char('/'));
    h.keys("redis");
    assert!(h.frame().contains("filter (name, cgroup or pid): redis_"));
    h.key(KeyCode::Enter);
    assert_eq!(rows(&h), vec![812]);
    insta::assert_snapshot!("filter_redis_100x30", h.frame());
    // A new interval keeps the filter.
    three(&mut h, 21, 1);
    assert_eq!(rows(&h), vec![812]);
    h.key(KeyCode::Esc);
    assert_eq!(rows(&h), vec![4242, 812, 77]);
    assert!(h.effects.is_empty(), "filtering asks nothing of the source");
}

#[test]
fn pin_reaches_the_source_and_the_qos_pane_follows() {
    let mut h = Harness::new(app(), 160, 40);
    three(&mut h, 1, 20);
    h.key(KeyCode::Down);
    h.key(KeyCode::Char('p'));
    assert_eq!(h.effects, vec![Effect::SetPins(vec![812])]);
    assert_eq!(rows(&h)[0], 812, "the pinned row comes first");
    // The kernel follows it from the next interval: its QoS shows in the pane.
    for seq in 21..=40 {
        let procs = [proc(
            812,
            "redis-server",
            "/usr/bin/redis-server 127.0.0.1:6379",
        )];
        let mut b = batch(seq, &[(812, [MS; 5])], &procs);
        b.pinned = vec![812];
        b.qos = QosBatch {
            procs: vec![qos_sample(812, false)],
            request_model: true,
            ..Default::default()
        };
        h.send(Msg::Batch(Box::new(b)));
    }
    let f = h.frame();
    assert!(f.contains("QoS 812 redis-server"), "{f}");
    insta::assert_snapshot!("pinned_qos_160x40", f);
    // Unpinning tells the source to follow nothing.
    h.key(KeyCode::Home);
    h.key(KeyCode::Char('p'));
    assert_eq!(h.effects.last(), Some(&Effect::SetPins(vec![])));
}

#[test]
fn sort_by_memory_and_back() {
    let mut h = Harness::new(app(), 100, 30);
    three(&mut h, 1, 20);
    h.key(KeyCode::Char('M'));
    assert_eq!(rows(&h), vec![812, 4242, 77]);
    insta::assert_snapshot!("sorted_by_res_100x30", h.frame());
    h.key(KeyCode::Char('P'));
    assert_eq!(rows(&h), vec![4242, 812, 77]);
}

#[test]
fn details_are_read_once_when_the_popup_opens() {
    let mut h = Harness::new(app(), 80, 24);
    three(&mut h, 1, 20);
    h.key(KeyCode::Enter);
    let k = h.screen.app().table_rows()[0].key;
    assert_eq!(*h.asked.borrow(), vec![k]);
    let f = h.frame();
    assert!(f.contains("/system.slice/cruncher.service"), "{f}");
    // More intervals redraw the popup without reading again.
    three(&mut h, 21, 5);
    assert_eq!(h.asked.borrow().len(), 1);
    assert!(h.key(KeyCode::Esc));
    assert!(!h.key(KeyCode::Char('q')), "q closes the screen");
}

#[test]
fn the_loop_draws_until_quit_and_times_each_frame() {
    let (tx, rx) = std::sync::mpsc::channel();
    for seq in 1..=5 {
        tx.send(Msg::Batch(Box::new(plausible(seq, 3)))).unwrap();
    }
    tx.send(Msg::Input(Event::Key(KeyEvent::new(
        KeyCode::Char('q'),
        KeyModifiers::NONE,
    ))))
    .unwrap();
    // Never read: the loop stops at `q`, not at the end of the channel.
    tx.send(Msg::Batch(Box::new(plausible(6, 3)))).unwrap();
    let mut h = Harness::new(app(), 80, 24);
    h.screen.run(&rx, |_| {}).unwrap();
    assert_eq!(h.screen.app().model.latest().map(|b| b.seq), Some(5));
    assert_eq!(h.screen.latency.report()["shown"]["count"], 5);
    assert!(rx.try_recv().is_ok(), "the interval after q is left unread");
}

/// A replay over a real recording file, the replay "thread" run in step: each replay command
/// the screen emits is applied to the source and its answer fed back, as the thread would.
struct ReplayHarness {
    h: Harness,
    replay: Replay,
    _dir: tempfile::TempDir,
}

impl ReplayHarness {
    fn new(n: u64) -> Self {
        let batches: Vec<Batch> = (1..=n).map(|s| plausible(s, 4)).collect();
        let (dir, path, _) = crate::record::tests::record(&batches);
        let replay = Replay::new(
            crate::record::Timeline::open(&path).unwrap(),
            Path::new("rec.ebr"),
            1.0,
            false,
        );
        let mut app = app();
        app.replay = Some(ReplayControl::new(replay.status()));
        Self {
            h: Harness::new(app, 100, 30),
            replay,
            _dir: dir,
        }
    }

    fn key(&mut self, code: KeyCode, mods: KeyModifiers) {
        let before = self.h.effects.len();
        self.h
            .send(Msg::Input(Event::Key(KeyEvent::new(code, mods))));
        let cmds: Vec<Effect> = self.h.effects.drain(before..).collect();
        for e in cmds {
            let Effect::Replay(c) = e else {
                panic!("a replay key asked for {e:?}");
            };
            let apply = self.replay.command(c);
            let u = ReplayUpdate {
                status: self.replay.status(),
                apply,
            };
            self.h.send(Msg::Replay(Box::new(u)));
        }
    }

    fn shown(&self) -> Option<usize> {
        self.h
            .screen
            .app()
            .replay
            .as_ref()
            .and_then(|r| r.status.shown)
    }
}

#[test]
fn replay_steps_seeks_and_pauses() {
    let mut r = ReplayHarness::new(600);
    let none = KeyModifiers::NONE;
    r.key(KeyCode::Char('.'), none);
    assert_eq!(r.shown(), Some(0));
    assert!(r.h.screen.app().replay.as_ref().unwrap().status.paused);
    r.key(KeyCode::Char('.'), none);
    assert_eq!(r.shown(), Some(1));
    // 50 ms intervals: +10 s is 200 intervals on, and the Model is rebuilt as it was live.
    r.key(KeyCode::Right, none);
    assert_eq!(r.shown(), Some(201));
    assert_eq!(
        r.h.screen.app().model.latest().map(|b| b.seq),
        Some(202),
        "the interval on screen is the one seeked to"
    );
    r.key(KeyCode::Right, KeyModifiers::SHIFT);
    assert_eq!(
        r.shown(),
        Some(599),
        "a minute on is past the end: the last"
    );
    r.key(KeyCode::Home, none);
    assert_eq!(r.shown(), Some(0));
    r.key(KeyCode::Char('g'), none);
    for c in "+5s".chars() {
        r.key(KeyCode::Char(c), none);
    }
    assert!(
        r.h.frame().contains("+5s"),
        "the prompt shows what is typed"
    );
    r.key(KeyCode::Enter, none);
    assert_eq!(r.shown(), Some(100));
    insta::assert_snapshot!("replay_paused_at_5s_100x30", r.h.frame());
    r.key(KeyCode::Char(' '), none);
    assert!(!r.h.screen.app().replay.as_ref().unwrap().status.paused);
    r.key(KeyCode::End, none);
    assert!(r.h.screen.app().replay.as_ref().unwrap().status.at_end);
}

/// F2 changes go through the loop: each one saved, the interval forwarded to the source, and a
/// failed save said on the status line; mouse events are placed by the drawn layout.
#[test]
fn setup_changes_are_saved_and_the_mouse_is_placed_by_the_layout() {
    use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
    use std::time::Duration;
    let mut h = Harness::new(app(), 100, 30);
    three(&mut h, 1, 20);
    let saved = Rc::new(RefCell::new(Vec::new()));
    let s2 = saved.clone();
    h.screen.inputs.save = Box::new(move |s| {
        s2.borrow_mut().push(s.clone());
        if s.tree == Some(true) {
            Err("settings not saved: disk full".into())
        } else {
            Ok(())
        }
    });
    h.key(KeyCode::F(2));
    assert!(h.frame().contains("setup (F2)"));
    // To the interval line: 12 shown columns, 7 others, the sort; then one step longer.
    for _ in 0..20 {
        h.key(KeyCode::Down);
    }
    h.key(KeyCode::Right);
    assert_eq!(
        h.effects,
        vec![Effect::SetInterval(Duration::from_millis(100))]
    );
    assert_eq!(saved.borrow().len(), 1);
    assert_eq!(saved.borrow()[0].interval, Some(Duration::from_millis(100)));
    assert!(h.frame().contains("< 100.0ms >"));
    // The tree line: the save fails, and the status line says so.
    h.key(KeyCode::Down);
    h.key(KeyCode::Down);
    h.key(KeyCode::Enter);
    assert_eq!(saved.borrow().len(), 2);
    assert!(
        h.frame().contains("settings not saved: disk full"),
        "{}",
        h.frame()
    );
    h.key(KeyCode::Esc);
    // A click on the third row of the table selects it.
    let f = h.frame();
    let y = f.lines().position(|l| l.contains("    PID")).unwrap() as u16 + 3;
    h.send(Msg::Input(Event::Mouse(MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column: 10,
        row: y,
        modifiers: KeyModifiers::NONE,
    })));
    assert_eq!(h.screen.app().selected, 2);
    assert!(
        h.frame()
            .lines()
            .nth(usize::from(y))
            .unwrap()
            .starts_with('>')
    );
}

/// `changed_cells` picks exactly the cells ratatui's own `Buffer::diff` does, wide characters,
/// skipped cells and control characters included.
#[test]
fn changed_cells_are_ratatuis_diff() {
    use ratatui::buffer::Buffer;
    use ratatui::layout::Rect;
    use ratatui::style::{Color, Style};
    let area = Rect::new(0, 0, 12, 4);
    let lines: [&[&str]; 4] = [
        &["cruncher 12%", "cruncher 13%", "日本語 wide", "a日b"],
        &["日本 語", "日 本語", "plain", "é accent"],
        &["\u{7}bell", "😀 smile", "tab\tx", "──│▇⣿"],
        &["", "x", "日", "end of it all"],
    ];
    let mut frames = Vec::new();
    for v in 0..4 {
        let mut b = Buffer::empty(area);
        for (y, row) in lines.iter().enumerate() {
            let style = Style::default().fg(if v == 2 { Color::Red } else { Color::Reset });
            b.set_string(0, y as u16, row[(v + y) % row.len()], style);
        }
        if v == 3 {
            b[(5, 1)].skip = true;
        }
        frames.push(b);
    }
    frames.push(Buffer::empty(area));
    let mut out = Vec::new();
    for prev in &frames {
        for next in &frames {
            super::changed_cells(prev, next, &mut out);
            let want: Vec<usize> = prev
                .diff(next)
                .iter()
                .map(|&(x, y, _)| next.index_of(x, y))
                .collect();
            assert_eq!(out, want);
        }
    }
}

/// `same_cell` is `==` for cells that differ in each field alone, and in none.
#[test]
fn same_cell_is_cell_equality() {
    use ratatui::buffer::Cell;
    use ratatui::style::{Color, Modifier};
    let mut cells = Vec::new();
    for symbol in [" ", "a", "b", "ab", "日", "▇", "", "a\u{301}"] {
        let mut c = Cell::new(" ");
        c.set_symbol(symbol);
        cells.push(c.clone());
        for color in [Color::Red, Color::Indexed(1), Color::Rgb(1, 2, 3)] {
            cells.push(c.clone().set_fg(color).clone());
            cells.push(c.clone().set_bg(color).clone());
            let mut u = c.clone();
            u.underline_color = color;
            cells.push(u);
        }
        let mut m = c.clone();
        m.modifier = Modifier::BOLD;
        cells.push(m);
        cells.push(c.clone().set_skip(true).clone());
    }
    for a in &cells {
        for b in &cells {
            assert_eq!(super::same_cell(a, b), a == b, "{a:?} {b:?}");
        }
    }
}

#[test]
fn characters_taken_as_narrow_are_no_wider_than_one_column() {
    let ranges = [0..0x1100u32, 0x2500..0x25a0, 0x2800..0x2900];
    for c in ranges.into_iter().flatten().filter_map(char::from_u32) {
        assert!(super::narrow(c));
        let w = ratatui::text::Span::raw(c.to_string()).width();
        assert!(w <= 1, "{c:?} is {w} wide");
    }
    assert!(!super::narrow('日'));
    assert!(!super::narrow('😀'));
}
