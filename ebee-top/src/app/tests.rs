//! Key flows and message handling of the App, without a terminal.

use std::time::Duration;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};

use super::*;
use crate::batch::{Batch, ProcInfo};

fn key(c: KeyCode) -> Msg {
    Msg::Input(Event::Key(KeyEvent::new(c, KeyModifiers::NONE)))
}

/// One 50 ms interval of `n` processes, pid 1 the heaviest.
fn batch(n: u32) -> Box<Batch> {
    let b = (1..=n).fold(Batch::build(1, 0, 50_000_000), |b, p| {
        b.cpu(p, 1000 * u64::from(n - p + 1), &[])
            .proc(ProcInfo::named(p, ""))
    });
    Box::new(b.done())
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
    let d = crate::os::details::Details {
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
    let h = crate::os::host::HostInfo::default();
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

/// A process with a parent, as the live source reports it.
fn child(pid: u32, ppid: u32, comm: &str) -> ProcInfo {
    ProcInfo {
        ppid: Some(ppid),
        start_ticks: u64::from(pid),
        ..ProcInfo::named(pid, comm)
    }
}

/// A 1 s interval: `make` (10) idle under `bash` (2, in `lineage` only), its two `cc`
/// children busy (11: 30%, 12: 50%), `cc1` (13) under 12 at 10%, and `sshd` (3) alone.
fn family() -> Box<Batch> {
    let mut b = Batch::build(1, 0, 1_000_000_000)
        .cpu(12, 500_000_000, &[])
        .cpu(11, 300_000_000, &[])
        .cpu(13, 100_000_000, &[])
        .cpu(3, 50_000_000, &[])
        .proc(child(12, 10, "cc"))
        .proc(child(11, 10, "cc"))
        .proc(child(13, 12, "cc1"))
        .proc(child(3, 1, "sshd"))
        .done();
    b.lineage = vec![child(10, 2, "make"), child(2, 1, "bash")];
    Box::new(b)
}

fn tree_text(a: &App) -> Vec<String> {
    a.tree_rows()
        .iter()
        .map(|r| format!("{}{}", r.prefix_at(3, true), r.entry.comm))
        .collect()
}

#[test]
fn the_tree_puts_children_under_parents_in_the_table_order_with_their_ancestors() {
    let mut a = App::new(20, Duration::from_millis(50));
    a.update(Msg::Batch(family()));
    a.update(key(KeyCode::Char('t')));
    assert!(a.tree);
    // bash and make are idle: shown only to lead to the compilers, after the busy roots.
    assert_eq!(
        tree_text(&a),
        [
            "sshd",
            "bash",
            "`- make",
            "   |- cc",
            "   |  `- cc1",
            "   `- cc"
        ]
    );
    let rows = a.tree_rows();
    assert!(rows[1].context && rows[2].context && !rows[3].context);
    assert_eq!(rows[3].entry.key.pid, 12, "the busier cc first");
    assert_eq!(rows[4].prefix_at(3, false), "   │  └─ ");
    // The filter keeps the matching rows and the ancestors that lead to them.
    a.filter = "cc1".into();
    assert_eq!(
        tree_text(&a),
        ["bash", "`- make", "   `- cc", "      `- cc1"]
    );
}

#[test]
fn a_folded_subtree_sums_its_members() {
    let mut a = App::new(20, Duration::from_millis(50));
    a.update(Msg::Batch(family()));
    a.update(key(KeyCode::F(5)));
    // Select make and fold it.
    let make = a.table_rows().iter().position(|e| e.key.pid == 10).unwrap();
    a.update(key(KeyCode::Home));
    for _ in 0..make {
        a.update(key(KeyCode::Down));
    }
    assert_eq!(a.selected_key.map(|k| k.pid), Some(10));
    a.update(key(KeyCode::Left));
    let rows = a.tree_rows();
    assert_eq!(rows.len(), 3, "sshd, bash, make folded");
    let r = &rows[2];
    assert!(r.collapsed);
    let s = r.sums.as_ref().unwrap();
    assert_eq!(s.members, 4);
    let members: f64 = [11, 12, 13]
        .iter()
        .map(|p| a.model.table.by_pid(*p).unwrap().cpu_pct)
        .sum();
    assert!((s.cpu_pct - members).abs() < 1e-9 && (s.cpu_pct - 90.0).abs() < 1e-6);
    // Left again goes to the parent; Right on make unfolds it.
    a.update(key(KeyCode::Left));
    assert_eq!(a.selected_key.map(|k| k.pid), Some(2));
    a.update(key(KeyCode::Down));
    a.update(key(KeyCode::Right));
    assert_eq!(a.tree_rows().len(), 6);
}

#[test]
fn a_parent_younger_than_its_child_is_a_reused_pid_not_the_parent() {
    let mut a = App::new(20, Duration::from_millis(50));
    let mut b = Batch::build(1, 0, 1_000_000_000)
        .cpu(50, 100_000_000, &[])
        .proc(child(50, 40, "orphan"))
        .done();
    // Pid 40 now names a process that started after 50.
    b.lineage = vec![ProcInfo {
        start_ticks: 99,
        ..child(40, 1, "newcomer")
    }];
    a.update(Msg::Batch(Box::new(b)));
    a.tree = true;
    let t = tree_text(&a);
    assert!(
        t.contains(&"orphan".to_string()),
        "a root of its own: {t:?}"
    );
}

#[test]
fn signals_and_nice_act_on_the_selection_or_the_tagged_and_never_in_a_replay() {
    let mut a = App::new(20, Duration::from_millis(50));
    a.update(Msg::Batch(batch(3)));
    // F9: the menu holds the selected process; Enter asks, y sends TERM (first).
    let top = a.selected_key.unwrap();
    assert_eq!(a.update(key(KeyCode::F(9))), Effect::Hold(vec![top]));
    assert_eq!(a.update(key(KeyCode::Enter)), Effect::Redraw);
    assert!(matches!(&a.overlay, Some(Overlay::Signal(m)) if m.confirm));
    assert_eq!(
        a.update(key(KeyCode::Char('y'))),
        Effect::Signal(libc::SIGTERM)
    );
    assert!(a.overlay.is_none());
    // By number: 9 is KILL; Esc closes and drops the handles.
    a.update(key(KeyCode::F(9)));
    a.update(key(KeyCode::Char('9')));
    a.update(key(KeyCode::Enter));
    assert_eq!(a.update(key(KeyCode::Enter)), Effect::Signal(libc::SIGKILL));
    a.update(key(KeyCode::F(9)));
    assert_eq!(a.update(key(KeyCode::Esc)), Effect::Release);
    // T tags and moves down; F8 then renices the tagged ones.
    a.update(key(KeyCode::Home));
    a.update(key(KeyCode::Char('T')));
    a.update(key(KeyCode::Char('T')));
    let tagged: Vec<ProcKey> = a.tagged.iter().copied().collect();
    assert_eq!(tagged.len(), 2);
    assert_eq!(a.update(key(KeyCode::F(8))), Effect::Renice(tagged, 1));
    a.update(key(KeyCode::Char('U')));
    assert_eq!(
        a.update(key(KeyCode::F(7))),
        Effect::Renice(vec![a.selected_key.unwrap()], -1)
    );
}

#[test]
fn a_recording_cannot_be_acted_on() {
    let mut a = App::new(20, Duration::from_millis(50));
    a.replay = Some(ReplayControl::default());
    a.update(Msg::Batch(batch(3)));
    for k in [KeyCode::F(9), KeyCode::F(7), KeyCode::F(8)] {
        assert_eq!(a.update(key(k)), Effect::Redraw);
        assert_eq!(a.status.as_deref(), Some(NO_ACT));
        assert!(a.overlay.is_none());
    }
}

#[test]
fn a_user_filter_keeps_one_users_processes_and_u_picks_another() {
    let mut a = App::new(20, Duration::from_millis(50));
    a.users.insert(0, "root".into());
    a.users.insert(1000, "alice".into());
    let owned = |pid, uid| ProcInfo {
        uid: Some(uid),
        ..ProcInfo::named(pid, "p")
    };
    let b = Batch::build(1, 0, 50_000_000)
        .cpu(1, 3000, &[])
        .cpu(2, 2000, &[])
        .cpu(3, 1000, &[])
        .proc(owned(1, 0))
        .proc(owned(2, 1000))
        .proc(owned(3, 1000))
        .done();
    a.update(Msg::Batch(Box::new(b)));
    assert_eq!(crate::os::details::uid_of("alice", &a.users), Some(1000));
    assert_eq!(crate::os::details::uid_of("42", &a.users), Some(42));
    assert_eq!(crate::os::details::uid_of("nobody-here", &a.users), None);
    a.user = Some(1000);
    let pids: Vec<u32> = a.table_rows().iter().map(|e| e.key.pid).collect();
    assert_eq!(pids, [2, 3]);
    // The picker: every user, then the owners by name; Enter on root.
    a.update(key(KeyCode::Char('u')));
    assert_eq!(a.overlay, Some(Overlay::Users(1)), "alice, the one shown");
    let names: Vec<String> = a.user_choices().into_iter().map(|c| c.1).collect();
    assert_eq!(names, ["all users", "alice", "root"]);
    a.update(key(KeyCode::Down));
    a.update(key(KeyCode::Enter));
    assert_eq!(a.user, Some(0));
    let pids: Vec<u32> = a.table_rows().iter().map(|e| e.key.pid).collect();
    assert_eq!(pids, [1]);
    a.update(key(KeyCode::Char('u')));
    a.update(key(KeyCode::Esc));
    assert_eq!(a.user, None);
    assert_eq!(a.table_rows().len(), 3);
}
