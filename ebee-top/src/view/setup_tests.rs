//! The setup screen and chosen columns drawn into a TestBackend, and the mouse's hit-testing
//! checked against what was drawn.

use crossterm::event::{KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::Rect;
use ratatui::{Terminal, backend::TestBackend};

use super::tests::{MS, batch, buffer_text, proc};
use super::theme::Theme;
use crate::app::{App, Column, Msg, Overlay, Pointer, SortBy};
use crate::os::procstat::ProcStat;

fn draw(app: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| super::render(app, &Theme::default(), f))
        .unwrap();
    buffer_text(t.backend().buffer())
}

/// Three processes, busiest first: 4242 cruncher, 77 sshd, 9 kworker.
fn three() -> App {
    let mut a = super::tests::app();
    let procs = [
        proc(4242, "cruncher", "/usr/local/bin/cruncher --threads 1"),
        proc(77, "sshd", "sshd: alice [priv]"),
        proc(9, "kworker/0:1", ""),
    ];
    for seq in 1..=20 {
        a.update(Msg::Batch(Box::new(batch(
            seq,
            &[
                (4242, [9 * MS; 5]),
                (77, [3 * MS, 0, 0, 0, 0]),
                (9, [MS, 0, 0, 0, 0]),
            ],
            &procs,
        ))));
    }
    a
}

fn click(x: u16, y: u16) -> MouseEvent {
    MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column: x,
        row: y,
        modifiers: KeyModifiers::NONE,
    }
}

#[test]
fn the_setup_screen_lists_columns_settings_and_keys() {
    let mut a = three();
    a.settings_note =
        "changes apply at once and are saved to /root/.config/ebee-top/config.toml".into();
    a.overlay = Some(Overlay::Setup(12));
    let t = draw(&a, 100, 32);
    assert!(t.contains("[x] PID"), "{t}");
    assert!(t.contains(">[ ] NI"), "{t}");
    assert!(
        t.contains("< CPU >") && t.contains("< 50.0ms >") && t.contains("< off >"),
        "{t}"
    );
    assert!(t.contains("Shift-Up/Down move a column"), "{t}");
    insta::assert_snapshot!("setup_100x32", t);
    // 80x24 holds fewer lines than there are: the list scrolls to the cursor, the legend stays.
    a.overlay = Some(Overlay::Setup(22));
    let t = draw(&a, 80, 24);
    assert!(t.contains(">    tree") && t.contains("Esc/F2"), "{t}");
    insta::assert_snapshot!("setup_80x24", t);
}

#[test]
fn a_chosen_column_set_is_drawn_in_its_order() {
    let mut a = three();
    a.columns = Some(vec![
        Column::Pid,
        Column::Ppid,
        Column::Nice,
        Column::Pri,
        Column::State,
        Column::Threads,
        Column::Start,
        Column::Cpu,
        Column::Command,
    ]);
    let key = a.table_rows()[0].key;
    a.stats.insert(
        key,
        ProcStat {
            state: 'R',
            ppid: 1,
            priority: 25,
            nice: 5,
            threads: 3,
        },
    );
    // Booted 400 s before the first interval (wall clock 2025-12-01 12:00:00 UTC); 100 ticks
    // a second, so pid 4242 (started at tick 5242) started at 11:54:12.
    a.boot_clock = Some((1_764_590_000, 100));
    let t = draw(&a, 80, 24);
    let head = t.lines().find(|l| l.contains("PID")).unwrap();
    assert!(
        head.contains("    PID    PPID  NI PRI S  THR START  %CPU COMMAND"),
        "{t}"
    );
    let row = t.lines().find(|l| l.contains("4242")).unwrap();
    assert!(row.contains("   4242       1   5  25 R    3 11:54"), "{t}");
    // Unknown until read: `-`.
    let row = t.lines().find(|l| l.contains("sshd")).unwrap();
    assert!(row.contains("     77       -   -   - -    - 11:53"), "{t}");
    // No BURST, USER or RES when not chosen.
    assert!(!t.contains("BURST") && !head.contains("USER"), "{t}");
    insta::assert_snapshot!("chosen_columns_80x24", t);
}

#[test]
fn the_automatic_layout_is_todays_when_nothing_is_chosen() {
    let a = three();
    let t = draw(&a, 80, 24);
    let head = t.lines().find(|l| l.contains("PID")).unwrap();
    assert!(
        head.contains("    PID USER      %CPU WAIT%     TIME    RES BURST"),
        "{t}"
    );
    assert!(!head.contains("IO/s") && !head.contains("NET/s"), "{t}");
    // Chosen, IO, NET and CGROUP show also where the automatic layout leaves them out.
    let mut b = three();
    b.columns = Some(crate::app::settings::AUTO_COLUMNS.to_vec());
    let t = draw(&b, 100, 24);
    let head = t.lines().find(|l| l.contains("PID")).unwrap();
    assert!(head.contains("  IO/s  NET/s CGROUP"), "{t}");
}

#[test]
fn clicks_hit_what_is_drawn() {
    for cols in [
        None,
        Some(vec![
            Column::Start,
            Column::Pid,
            Column::Res,
            Column::Command,
        ]),
    ] {
        for (w, h) in [(80u16, 24u16), (160, 50), (130, 30)] {
            let mut a = three();
            a.columns = cols.clone();
            a.screen = (w, h);
            let t = draw(&a, w, h);
            let area = Rect::new(0, 0, w, h);
            let head_y = t.lines().position(|l| l.contains("    PID")).unwrap() as u16;
            let line: Vec<char> = t.lines().nth(head_y as usize).unwrap().chars().collect();
            // Every header is hit where it is drawn: the first letter of each title.
            for (title, col) in [
                ("PID", Column::Pid),
                ("RES", Column::Res),
                ("START", Column::Start),
                ("USER", Column::User),
                ("COMMAND", Column::Command),
            ] {
                let s: String = line.iter().collect();
                let Some(x) = s.find(title) else { continue };
                let x = s[..x].chars().count() as u16;
                assert_eq!(
                    super::pointer(&a, area, click(x, head_y)),
                    Some(Pointer::Header(Some(col))),
                    "{title} at {x} in {w}x{h}:\n{t}"
                );
            }
            // Rows: the first under the header is row 0, and so on.
            for i in 0..3u16 {
                let y = head_y + 1 + i;
                let drawn = t.lines().nth(y as usize).unwrap();
                let want = a.table_rows()[usize::from(i)].key.pid.to_string();
                assert!(drawn.contains(&want), "{drawn}");
                assert_eq!(
                    super::pointer(&a, area, click(5, y)),
                    Some(Pointer::Row(usize::from(i)))
                );
            }
            // Below the last row, or in the header of the screen: nothing.
            assert_eq!(super::pointer(&a, area, click(5, head_y + 4)), None);
            assert_eq!(super::pointer(&a, area, click(5, 0)), None);
        }
    }
}

#[test]
fn a_scrolled_table_maps_clicks_to_the_rows_shown() {
    let mut a = super::tests::app();
    let procs: Vec<_> = (1..=40).map(|p| proc(p, &format!("p{p}"), "")).collect();
    let rows: Vec<(u32, [u64; 5])> = (1..=40).map(|p| (p, [u64::from(p) * MS; 5])).collect();
    a.update(Msg::Batch(Box::new(batch(1, &rows, &procs))));
    a.screen = (80, 24);
    a.k = 40;
    let area = Rect::new(0, 0, 80, 24);
    a.selected = 30;
    let t = draw(&a, 80, 24);
    let head_y = t.lines().position(|l| l.contains("    PID")).unwrap();
    let first = t.lines().nth(head_y + 1).unwrap();
    let i = match super::pointer(&a, area, click(5, head_y as u16 + 1)) {
        Some(Pointer::Row(i)) => i,
        other => panic!("{other:?}"),
    };
    let pid = a.table_rows()[i].key.pid.to_string();
    assert!(
        first.split_whitespace().next() == Some(pid.as_str()),
        "{first} vs {pid}\n{t}"
    );
}

#[test]
fn a_header_click_sorts_or_says_why_not() {
    let mut a = three();
    a.update(Msg::Pointer(Pointer::Header(Some(Column::Wait))));
    assert_eq!(a.sort, SortBy::Wait);
    a.update(Msg::Pointer(Pointer::Header(Some(Column::Res))));
    // No memory data in these Batches: CPU, and the status line says so.
    assert_eq!(a.sort, SortBy::Cpu);
    assert!(a.status.as_deref().unwrap().contains("sorting by CPU"));
    a.update(Msg::Pointer(Pointer::Header(Some(Column::User))));
    assert!(a.status.as_deref().unwrap().contains("cannot sort by USER"));
    a.update(Msg::Pointer(Pointer::Row(2)));
    assert_eq!(a.selected, 2);
    a.update(Msg::Pointer(Pointer::Wheel(-1)));
    assert_eq!(a.selected, 1);
}
