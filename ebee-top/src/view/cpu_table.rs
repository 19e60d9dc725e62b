//! The process table: pins first, then the heaviest by CPU% over the last second; each row
//! with its on-CPU time since ebee-top saw it and a burst sparkline whose every column is one
//! 10 ms cell of the kernel's burst bins (a full column is one core busy for the whole cell),
//! newest on the right.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    style::Style,
    text::{Line, Span},
    widgets::{Cell, Row, Table, TableState},
};

use crate::app::{App, SortBy};
use crate::model::procs::{CELL_NS, ProcEntry};
use crate::model::tree::TreeRow;
use crate::view::theme::Theme;
use crate::view::theme::sparkline;

/// The disk I/O columns a table `width` wide shows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum IoCols {
    None,
    /// One column: read + written per second.
    Sum,
    /// READ/s and WRIT/s.
    Both,
}

fn io_cols(width: u16, sorted: bool) -> IoCols {
    match width {
        120.. => IoCols::Both,
        100.. => IoCols::Sum,
        _ if sorted => IoCols::Sum,
        _ => IoCols::None,
    }
}

impl IoCols {
    /// Characters they take, with their spacing.
    fn width(self) -> u16 {
        match self {
            IoCols::None => 0,
            IoCols::Sum => 7,
            IoCols::Both => 14,
        }
    }
}

/// The network columns a table `width` wide shows (the same shapes as disk I/O's), when the
/// kernel gives network bytes.
fn net_cols(width: u16, sorted: bool, available: bool) -> IoCols {
    match width {
        _ if !available => IoCols::None,
        140.. => IoCols::Both,
        110.. => IoCols::Sum,
        _ if sorted => IoCols::Sum,
        _ => IoCols::None,
    }
}

/// Width of the CGROUP column (with its spacing), shown from this table width on when cgroups
/// are followed.
const CGROUP_W: u16 = 19;
const CGROUP_FROM: u16 = 100;

/// Columns of the burst sparkline for a table `width` wide (`extra` of them go to disk I/O,
/// network bytes and the cgroup).
fn burst_cols(width: u16, extra: u16) -> usize {
    // Half of what the fixed columns leave goes to the command, up to 2 s of cells.
    (width.saturating_sub(49 + extra) as usize / 2).clamp(8, 200)
}

/// A percentage in 5 characters: `12.3`, or whole from 1000 on (many threads at once).
pub(super) fn pct5(v: f64) -> String {
    if v >= 999.95 {
        format!("{v:>5.0}")
    } else {
        format!("{v:>5.1}")
    }
}

/// Bytes per second in 6 characters: `980K`, `12.3M`; `0` when nothing moved.
pub(super) fn rate(bps: f64) -> String {
    if bps < 1.0 {
        "0".into()
    } else {
        bytes(bps as u64)
    }
}

/// Bytes in a 5-character unit form: `980K`, `12.3M`, `1.2G`.
pub(super) fn bytes(b: u64) -> String {
    let k = b as f64 / 1024.0;
    if k < 1000.0 {
        format!("{k:.0}K")
    } else if k < 10.0 * 1024.0 {
        format!("{:.1}M", k / 1024.0)
    } else if k < 1000.0 * 1024.0 {
        format!("{:.0}M", k / 1024.0)
    } else {
        format!("{:.1}G", k / (1024.0 * 1024.0))
    }
}

/// A row's flag column (`P` pinned, `X` exited) and its style, for every process table.
pub(super) fn row_mark(t: &Theme, pinned: bool, exited: bool) -> (&'static str, Style) {
    let flag = match (pinned, exited) {
        (true, true) => "PX",
        (true, false) => "P ",
        (false, true) => " X",
        _ => "  ",
    };
    let style = if exited {
        t.colors.exited()
    } else if pinned {
        t.colors.pinned()
    } else {
        Style::default()
    };
    (flag, style)
}

/// The command line with argv\[0\]'s directory dropped, for narrow screens.
fn short_command(cmd: &str) -> String {
    if cmd.starts_with('[') {
        // A kernel thread's name, not a path.
        return cmd.to_string();
    }
    let (first, rest) = cmd.split_once(' ').unwrap_or((cmd, ""));
    let base = match first.rsplit_once('/') {
        Some((_, b)) if !b.is_empty() => b,
        _ => first,
    };
    if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base} {rest}")
    }
}

/// The most of the command column a tree row's branches may take.
fn tree_room(cmd_width: usize) -> usize {
    (cmd_width * 3 / 5).max(4)
}

/// A tree row's branch glyphs in at most [`tree_room`]: a deep row keeps the branches nearest
/// to it after an ellipsis, so its command stays readable at 80 columns.
fn tree_prefix(prefix: &str, cmd_width: usize, ascii: bool) -> String {
    let room = tree_room(cmd_width);
    let n = prefix.chars().count();
    if n <= room {
        return prefix.to_string();
    }
    let keep: String = prefix.chars().skip(n - (room - 1)).collect();
    format!("{}{keep}", if ascii { "." } else { "…" })
}

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    let c = t.colors;
    let m = app.shown();
    let now = m.table.now_cell();
    let sort = app.sort;
    let io = io_cols(area.width, sort == SortBy::Io);
    let net = net_cols(area.width, sort == SortBy::Net, m.servers.available);
    let cg = m.cgroups.available && area.width >= CGROUP_FROM;
    let extra = io.width() + net.width() + if cg { CGROUP_W } else { 0 };
    let bw = burst_cols(area.width, extra);
    let waits = m.wait.available;
    let threads = app.showing_threads();
    // What is left for COMMAND: the highlight mark, the fixed columns, the sparkline and
    // one space between each of the nine columns.
    let cmd_width = (area.width as usize)
        .saturating_sub(1 + 2 + 7 + 8 + 5 + 5 + 8 + 6 + bw + 8 + usize::from(extra));
    // In the tree, each row with its branch glyphs and, folded, its subtree's sums.
    let tree = app.tree.then(|| app.tree_rows(t.ascii));
    // A deep tree in a narrow column draws its levels narrower (3, 2 or 1 characters), so
    // that rows at different depths still look it; past that the deepest rows are cut.
    let deepest = tree
        .as_ref()
        .and_then(|rows| rows.iter().map(|r| r.depth).max())
        .unwrap_or(0);
    let level_w = (1..=3)
        .rev()
        .find(|w| deepest * w < tree_room(cmd_width))
        .unwrap_or(1);
    let listed: Vec<(&ProcEntry, Option<&TreeRow>)> = match &tree {
        Some(rows) => rows.iter().map(|r| (r.entry, Some(r))).collect(),
        None => app.table_rows().into_iter().map(|e| (e, None)).collect(),
    };
    let rows: Vec<Row> = listed
        .into_iter()
        .map(|(e, tr)| {
            let pinned = m.table.is_pinned(&e.key) || e.kernel_pinned;
            let (flag, mut style) = row_mark(t, pinned, e.exited());
            let flag = if app.tagged.contains(&e.key) {
                style = style.patch(c.tagged());
                if flag.starts_with(' ') {
                    flag.replacen(' ', "*", 1)
                } else {
                    format!("*{}", &flag[1..])
                }
            } else {
                flag.to_string()
            };
            let sums = tr.and_then(|r| r.sums.as_ref());
            if tr.is_some_and(|r| r.context) && !pinned && !e.exited() {
                style = style.patch(c.context());
            }
            // A folded row shows its whole subtree.
            let (cpu_pct, wait_pct, total_ns) = match sums {
                Some(s) => (s.cpu_pct, s.wait_pct, s.total_ns),
                None => (e.cpu_pct, e.wait_pct, e.total_ns),
            };
            let (read_per_s, write_per_s) = match sums {
                Some(s) => (s.read_per_s, s.write_per_s),
                None => (e.read_per_s, e.write_per_s),
            };
            let user = match e.uid {
                Some(u) => app.users.get(&u).cloned().unwrap_or_else(|| u.to_string()),
                None => "?".into(),
            };
            let burst = sparkline(&e.burst.dense(now, bw), CELL_NS, t.ascii);
            // "(exited) " goes first, so a narrow column still shows it.
            let mark = if e.exited() { "(exited) " } else { "" };
            // In the thread table, the thread's own name, then its process.
            let (pre, post) = if threads {
                (format!("{} ({}: ", e.comm, e.tgid), ")")
            } else {
                (String::new(), "")
            };
            let mut cmd = e.command();
            if mark.len() + pre.chars().count() + cmd.chars().count() + post.len() > cmd_width {
                // The program's name and its arguments say more than the start of a long
                // directory path.
                cmd = short_command(&cmd);
            }
            let cmd = format!("{pre}{cmd}{post}");
            let cmd = match tr {
                Some(r) if r.collapsed => {
                    let n = sums.map_or(0, |s| s.members.saturating_sub(1));
                    let pre = tree_prefix(&r.prefix_at(level_w, t.ascii), cmd_width, t.ascii);
                    format!("{pre}[+{n}] {mark}{cmd}")
                }
                Some(r) => {
                    let pre = tree_prefix(&r.prefix_at(level_w, t.ascii), cmd_width, t.ascii);
                    format!("{pre}{mark}{cmd}")
                }
                None => format!("{mark}{cmd}"),
            };
            let mut cells = vec![
                Cell::from(flag),
                Cell::from(format!("{:>7}", e.key.pid)),
                Cell::from(user),
                Cell::from(format!("{cpu_pct:>5.1}")),
                Cell::from(if threads {
                    // Waits and disk bytes are measured per process, not per thread.
                    format!("{:>5}", "-")
                } else if waits {
                    pct5(wait_pct)
                } else {
                    format!("{:>5}", "n/a")
                }),
                Cell::from(format!("{:>8}", super::fmt_ns(total_ns))),
                Cell::from(match (sums, m.mem.sketch.rss_of(e.tgid)) {
                    (Some(s), _) => s
                        .rss
                        .map_or(format!("{:>6}", "-"), |b| format!("{:>6}", bytes(b))),
                    (None, Some(b)) if !e.exited() => format!("{:>6}", bytes(b)),
                    _ => format!("{:>6}", "-"),
                }),
            ];
            let io_cell = |v: f64| {
                Cell::from(if threads {
                    format!("{:>6}", "-")
                } else if m.wait.io_available {
                    format!("{:>6}", rate(v))
                } else {
                    format!("{:>6}", "n/a")
                })
            };
            match io {
                IoCols::None => {}
                IoCols::Sum => cells.push(io_cell(read_per_s + write_per_s)),
                IoCols::Both => {
                    cells.push(io_cell(read_per_s));
                    cells.push(io_cell(write_per_s));
                }
            }
            let (rx, tx) = match sums {
                Some(s) => s.net.unwrap_or_default(),
                None => m.servers.net_rate(e.key.pid).unwrap_or_default(),
            };
            // Socket bytes are per process too.
            let net_cell = |v: f64| {
                Cell::from(if threads {
                    format!("{:>6}", "-")
                } else {
                    format!("{:>6}", rate(v))
                })
            };
            match net {
                IoCols::None => {}
                IoCols::Sum => cells.push(net_cell(rx + tx)),
                IoCols::Both => {
                    cells.push(net_cell(rx));
                    cells.push(net_cell(tx));
                }
            }
            if cg {
                let name = crate::model::cgroups::short_name(&e.cgroup);
                let name = if name.is_empty() { "-" } else { &name };
                cells.push(Cell::from(format!("{name:<18.18}")));
            }
            cells.push(Cell::from(Line::from(Span::styled(burst, c.burst()))));
            cells.push(Cell::from(cmd));
            Row::new(cells).style(style)
        })
        .collect();
    let burst_title = if bw >= 24 {
        format!("BURST {:.2}s, 10ms/col", bw as f64 / 100.0)
    } else {
        format!("BURST {:.2}s", bw as f64 / 100.0)
    };
    // The column the table is ranked by carries a `*`.
    let mark = |by: SortBy, plain: &'static str, marked: &'static str| {
        Cell::from(if sort == by { marked } else { plain })
    };
    let mut head = vec![
        Cell::from("  "),
        Cell::from(if threads { "    TID" } else { "    PID" }),
        Cell::from("USER"),
        Cell::from(" %CPU"),
        mark(SortBy::Wait, "WAIT%", "WAIT*"),
        Cell::from("    TIME"),
        mark(SortBy::Mem, "   RES", "  RES*"),
    ];
    let mut widths = vec![
        Constraint::Length(2),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(8),
        Constraint::Length(6),
    ];
    match io {
        IoCols::None => {}
        IoCols::Sum => {
            head.push(mark(SortBy::Io, "  IO/s", " IO/s*"));
            widths.push(Constraint::Length(6));
        }
        IoCols::Both => {
            head.push(mark(SortBy::Io, "READ/s", "READ*"));
            head.push(mark(SortBy::Io, "WRIT/s", "WRIT*"));
            widths.extend([Constraint::Length(6), Constraint::Length(6)]);
        }
    }
    match net {
        IoCols::None => {}
        IoCols::Sum => {
            head.push(mark(SortBy::Net, " NET/s", "NET/s*"));
            widths.push(Constraint::Length(6));
        }
        IoCols::Both => {
            head.push(mark(SortBy::Net, "  RX/s", " RX/s*"));
            head.push(mark(SortBy::Net, "  TX/s", " TX/s*"));
            widths.extend([Constraint::Length(6), Constraint::Length(6)]);
        }
    }
    if cg {
        head.push(Cell::from("CGROUP"));
        widths.push(Constraint::Length(18));
    }
    head.extend([
        Cell::from(burst_title),
        Cell::from(if threads {
            "THREAD (PID: COMMAND)"
        } else {
            "COMMAND"
        }),
    ]);
    widths.extend([Constraint::Length(bw as u16), Constraint::Min(10)]);
    let header = Row::new(head).style(c.header_row());
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .highlight_symbol(">")
        .row_highlight_style(c.selected());
    let mut state = TableState::default().with_selected(Some(app.selected));

    f.render_stateful_widget(table, area, &mut state);
}
