//! The process table: pins first, then the heaviest by CPU% over the last second; each row
//! with its on-CPU time since ebee-top saw it and a burst sparkline whose every column is one
//! 10 ms cell of the kernel's burst bins (a full column is one core busy for the whole cell),
//! newest on the right.

use ratatui::{
    Frame,
    layout::{Constraint, Flex, Layout, Rect},
    style::Style,
};

use crate::app::{App, Column, SortBy};
use crate::model::procs::{CELL_NS, ProcEntry};
use crate::model::tree::TreeRow;
use crate::view::plain_table::{PlainTable, TableCell};
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

/// The automatic layout shows IOW% from this table width on (or when sorted by it), when the
/// off-CPU split is measured.
const IOW_FROM: u16 = 130;

/// The CGROUP column is shown from this table width on when cgroups are followed.
const CGROUP_FROM: u16 = 100;

/// Columns of the burst sparkline for a table `width` wide whose other fixed columns take
/// `fixed` (with their spacing and the highlight mark).
fn burst_cols(width: u16, fixed: u16) -> usize {
    // Half of what the fixed columns leave goes to the command, up to 2 s of cells.
    (width.saturating_sub(fixed) as usize / 2).clamp(8, 200)
}

/// A percentage in 5 characters: `12.3`, or whole from 1000 on (many threads at once).
pub(super) fn pct5(v: f64) -> String {
    if v >= 999.95 {
        format!("{v:>5.0}")
    } else {
        format!("{v:>5.1}")
    }
}

/// A percentage cell of a measure that may not apply: `-` in the thread view (it is measured per
/// process), `n/a` when this kernel cannot measure it, else [`pct5`].
pub(super) fn pct5_if(threads: bool, measured: bool, v: f64) -> String {
    if threads {
        format!("{:>5}", "-")
    } else if measured {
        pct5(v)
    } else {
        format!("{:>5}", "n/a")
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

/// One column as drawn (IO and NET may be drawn as two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drawn {
    Flag,
    Pid,
    User,
    Cpu,
    Wait,
    Iow,
    Hold,
    Time,
    Res,
    IoSum,
    Read,
    Write,
    NetSum,
    Rx,
    Tx,
    Cgroup,
    Burst,
    Command,
    Nice,
    Pri,
    State,
    Threads,
    Ppid,
    Start,
}

impl Drawn {
    /// The chosen column it draws (None for the flag column).
    fn column(self) -> Option<Column> {
        Some(match self {
            Drawn::Flag => return None,
            Drawn::Pid => Column::Pid,
            Drawn::User => Column::User,
            Drawn::Cpu => Column::Cpu,
            Drawn::Wait => Column::Wait,
            Drawn::Iow => Column::Iow,
            Drawn::Hold => Column::Hold,
            Drawn::Time => Column::Time,
            Drawn::Res => Column::Res,
            Drawn::IoSum | Drawn::Read | Drawn::Write => Column::Io,
            Drawn::NetSum | Drawn::Rx | Drawn::Tx => Column::Net,
            Drawn::Cgroup => Column::Cgroup,
            Drawn::Burst => Column::Burst,
            Drawn::Command => Column::Command,
            Drawn::Nice => Column::Nice,
            Drawn::Pri => Column::Pri,
            Drawn::State => Column::State,
            Drawn::Threads => Column::Threads,
            Drawn::Ppid => Column::Ppid,
            Drawn::Start => Column::Start,
        })
    }

    /// Its fixed width (the sparkline's and the command's are computed).
    fn width(self) -> u16 {
        match self {
            Drawn::Flag => 2,
            Drawn::Pid | Drawn::Ppid => 7,
            Drawn::User | Drawn::Time => 8,
            Drawn::Cpu | Drawn::Wait | Drawn::Iow | Drawn::Hold | Drawn::Start => 5,
            Drawn::Res
            | Drawn::IoSum
            | Drawn::Read
            | Drawn::Write
            | Drawn::NetSum
            | Drawn::Rx
            | Drawn::Tx => 6,
            Drawn::Cgroup => 18,
            Drawn::Nice | Drawn::Pri => 3,
            Drawn::State => 1,
            Drawn::Threads => 4,
            Drawn::Burst | Drawn::Command => 0,
        }
    }
}

/// The process table's columns for a table `width` wide, with the sparkline's width and what
/// is left for COMMAND: the one layout that drawing and the mouse's hit-testing share.
struct Columns {
    drawn: Vec<Drawn>,
    burst: usize,
    cmd_width: usize,
}

fn columns(app: &App, width: u16) -> Columns {
    let m = app.shown();
    let sort = app.sort;
    let mut drawn = vec![Drawn::Flag];
    let io_shape = |min: IoCols, shape: IoCols, d: &mut Vec<Drawn>, sum, a, b| match shape {
        IoCols::None if min == IoCols::None => {}
        IoCols::None | IoCols::Sum => d.push(sum),
        IoCols::Both => d.extend([a, b]),
    };
    // With no columns chosen, the automatic layout: IO, NET and CGROUP where the width allows.
    let (chosen, min) = match &app.columns {
        Some(c) => (c.clone(), IoCols::Sum),
        None => (app.shown_columns(), IoCols::None),
    };
    for c in chosen {
        match c {
            Column::Pid => drawn.push(Drawn::Pid),
            Column::User => drawn.push(Drawn::User),
            Column::Cpu => drawn.push(Drawn::Cpu),
            Column::Wait => {
                drawn.push(Drawn::Wait);
                // HOLD% is no automatic column, but the automatic layout shows what it sorts by.
                if app.columns.is_none() && sort == SortBy::Hold {
                    drawn.push(Drawn::Hold);
                }
            }
            Column::Iow => {
                let room = width >= IOW_FROM || sort == SortBy::Iow;
                if min == IoCols::Sum || (m.wait.offcpu_available && room) {
                    drawn.push(Drawn::Iow)
                }
            }
            // Not in the automatic layout: chosen in F2, or shown while sorted by it.
            Column::Hold => drawn.push(Drawn::Hold),
            Column::Time => drawn.push(Drawn::Time),
            Column::Res => drawn.push(Drawn::Res),
            Column::Io => io_shape(
                min,
                io_cols(width, sort == SortBy::Io),
                &mut drawn,
                Drawn::IoSum,
                Drawn::Read,
                Drawn::Write,
            ),
            Column::Net => {
                let avail = m.servers.available || min == IoCols::Sum;
                io_shape(
                    min,
                    net_cols(width, sort == SortBy::Net, avail),
                    &mut drawn,
                    Drawn::NetSum,
                    Drawn::Rx,
                    Drawn::Tx,
                )
            }
            Column::Cgroup => {
                if min == IoCols::Sum || (m.cgroups.available && width >= CGROUP_FROM) {
                    drawn.push(Drawn::Cgroup)
                }
            }
            Column::Burst => drawn.push(Drawn::Burst),
            Column::Command => drawn.push(Drawn::Command),
            Column::Nice => drawn.push(Drawn::Nice),
            Column::Pri => drawn.push(Drawn::Pri),
            Column::State => drawn.push(Drawn::State),
            Column::Threads => drawn.push(Drawn::Threads),
            Column::Ppid => drawn.push(Drawn::Ppid),
            Column::Start => drawn.push(Drawn::Start),
        }
    }
    // The highlight mark, then each fixed column and the space after it.
    let fixed: u16 = 1 + drawn
        .iter()
        .filter(|d| !matches!(d, Drawn::Burst | Drawn::Command))
        .map(|d| d.width() + 1)
        .sum::<u16>();
    let burst = burst_cols(width, fixed);
    let spark = if drawn.contains(&Drawn::Burst) {
        burst + 1
    } else {
        0
    };
    let cmd_width = (width as usize).saturating_sub(usize::from(fixed) + spark);
    Columns {
        drawn,
        burst,
        cmd_width,
    }
}

fn constraints(cols: &Columns) -> Vec<Constraint> {
    cols.drawn
        .iter()
        .map(|d| match d {
            Drawn::Burst => Constraint::Length(cols.burst as u16),
            Drawn::Command => Constraint::Min(10),
            d => Constraint::Length(d.width()),
        })
        .collect()
}

/// Where each column of the process table drawn in `area` is: its chosen column (None for the
/// flag column) and its x range, as ratatui's table lays them out.
pub fn column_spans(app: &App, area: Rect) -> Vec<(Option<Column>, std::ops::Range<u16>)> {
    let cols = columns(app, area.width);
    // The table keeps the highlight mark's width first, then its columns one space apart.
    let [_, rest] = Layout::horizontal([Constraint::Length(1), Constraint::Fill(0)])
        .areas(Rect::new(area.x, area.y, area.width, 1));
    let rects = Layout::horizontal(constraints(&cols))
        .flex(Flex::Start)
        .spacing(1)
        .split(rest);
    cols.drawn
        .iter()
        .zip(rects.iter())
        .map(|(d, r)| (d.column(), r.x..r.x + r.width))
        .collect()
}

/// The index into `App::table_rows` of the table row drawn at screen line `y` in `area`
/// (the table scrolls so the selection stays in view).
pub fn row_at(app: &App, area: Rect, y: u16) -> Option<usize> {
    let n = app.table_rows().len();
    let visible = usize::from(area.height.saturating_sub(1));
    if y <= area.y || y >= area.y + area.height || n == 0 || visible == 0 {
        return None;
    }
    let selected = app.selected.min(n - 1);
    let first = (selected + 1).saturating_sub(visible);
    let i = first + usize::from(y - area.y - 1);
    (i < n).then_some(i)
}

/// The COMMAND cell's text: "(exited) " first, so a narrow column still shows it; in the thread
/// table the thread's name then its process; argv\[0\]'s directory dropped when it does not fit.
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

/// The COMMAND cell: in the tree, after the row's branches (and, folded, the count of rows
/// folded into it).
fn command_cell(
    e: &ProcEntry,
    tr: Option<(&TreeRow, usize)>,
    threads: bool,
    cmd_width: usize,
    ascii: bool,
) -> String {
    let cmd = command_text(e, threads, cmd_width);
    let Some((r, level_w)) = tr else {
        return cmd;
    };
    let pre = tree_prefix(&r.prefix_at(level_w, ascii), cmd_width, ascii);
    match &r.sums {
        Some(s) if r.collapsed => format!("{pre}[+{}] {cmd}", s.members.saturating_sub(1)),
        _ => format!("{pre}{cmd}"),
    }
}

/// `text` cut after its (`width` + 2)-th printable ASCII character, for a cell at most `width`
/// columns wide: ratatui measures a cell's whole text on every frame, and a long command line
/// (thousands of characters) cost more than the rest of its row. The cell looks the same: a
/// printable ASCII character is in a grapheme of its own with no other (at least a column wide),
/// and the cut can change only the last grapheme, so the graphemes before it are the whole
/// text's and already overflow the cell, where drawing stops. Left whole when a control
/// character comes first (a line break splits a cell's text into lines).
fn cut_to_width(mut text: String, width: usize) -> String {
    let mut printable = 0;
    for (i, b) in text.bytes().enumerate() {
        match b {
            b' '..=b'~' => {
                printable += 1;
                if printable > width + 1 {
                    text.truncate(i + 1);
                    break;
                }
            }
            0..=0x1f | 0x7f => break,
            _ => {}
        }
    }
    text
}

fn command_text(e: &ProcEntry, threads: bool, cmd_width: usize) -> String {
    let mark = if e.exited() { "(exited) " } else { "" };
    let (pre, post) = if threads {
        (format!("{} ({}: ", e.comm, e.tgid), ")")
    } else {
        (String::new(), "")
    };
    let mut cmd = e.command();
    if mark.len() + pre.chars().count() + cmd.chars().count() + post.len() > cmd_width {
        // The program's name and its arguments say more than the start of a long directory
        // path.
        cmd = short_command(&cmd);
    }
    format!("{mark}{pre}{cmd}{post}")
}

/// START: the time of day (UTC) a process started when within the last day, else its date.
fn start_text(app: &App, start_ticks: u64) -> String {
    let (Some((btime, tck)), true) = (app.boot_clock, start_ticks != 0) else {
        return "-".into();
    };
    let at = btime + start_ticks / tck.max(1);
    let now = app.shown().latest().map_or(at, |b| b.t_ms / 1000).max(at);
    if now - at < 86_400 {
        format!("{:02}:{:02}", (at / 3600) % 24, (at / 60) % 60)
    } else {
        let (_, mon, day) = crate::time::civil_date(at / 86_400);
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        format!("{}{day:02}", MONTHS[(mon as usize - 1) % 12])
    }
}

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    let c = t.colors;
    let m = app.shown();
    let now = m.table.now_cell();
    let sort = app.sort;
    let cols = columns(app, area.width);
    let bw = cols.burst;
    let waits = m.wait.available;
    let threads = app.showing_threads();
    // In the tree, each row with its branch glyphs and, folded, its subtree's sums.
    let tree = app.tree.then(|| app.tree_rows());
    // A deep tree in a narrow column draws its levels narrower (3, 2 or 1 characters), so
    // that rows at different depths still look it; past that the deepest rows are cut.
    let deepest = tree
        .as_ref()
        .and_then(|rows| rows.iter().map(|r| r.depth).max())
        .unwrap_or(0);
    let level_w = (1..=3)
        .rev()
        .find(|w| deepest * w < tree_room(cols.cmd_width))
        .unwrap_or(1);
    let listed: Vec<(&ProcEntry, Option<&TreeRow>)> = match &tree {
        Some(rows) => rows.iter().map(|r| (r.entry, Some(r))).collect(),
        None => app.table_rows().into_iter().map(|e| (e, None)).collect(),
    };
    let texts: Vec<(Vec<String>, Style)> = listed
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
            if tr.is_some_and(|r| r.context) && !pinned && !e.exited() {
                style = style.patch(c.context());
            }
            // A folded row shows its whole subtree.
            let sums = tr.and_then(|r| r.sums.as_ref());
            let (cpu_pct, wait_pct, total_ns) = match sums {
                Some(s) => (s.cpu_pct, s.wait_pct, s.total_ns),
                None => (e.cpu_pct, e.wait_pct, e.total_ns),
            };
            let iow_pct = sums.map_or(e.iow_pct, |s| s.iow_pct);
            let caused_pct = sums.map_or(e.caused_pct, |s| s.caused_pct);
            let (read_per_s, write_per_s) = match sums {
                Some(s) => (s.read_per_s, s.write_per_s),
                None => (e.read_per_s, e.write_per_s),
            };
            let (rx, tx) = match sums {
                Some(s) => s.net.unwrap_or_default(),
                None => m.servers.net_rate(e.key.pid).unwrap_or_default(),
            };
            let io_cell = |v: f64| {
                if threads {
                    format!("{:>6}", "-")
                } else if m.wait.io_available {
                    format!("{:>6}", rate(v))
                } else {
                    format!("{:>6}", "n/a")
                }
            };
            // Socket bytes are per process too.
            let net_cell = |v: f64| {
                if threads {
                    format!("{:>6}", "-")
                } else if m.servers.available {
                    format!("{:>6}", rate(v))
                } else {
                    format!("{:>6}", "n/a")
                }
            };
            let st = app.stats.get(&e.key);
            let stat =
                |w: usize, v: Option<String>| format!("{:>w$}", v.unwrap_or_else(|| "-".into()));
            let cells: Vec<String> = cols
                .drawn
                .iter()
                .map(|d| match d {
                    Drawn::Flag => flag.clone(),
                    Drawn::Pid => format!("{:>7}", e.key.pid),
                    Drawn::User => match e.uid {
                        Some(u) => app.users.get(&u).cloned().unwrap_or_else(|| u.to_string()),
                        None => "?".into(),
                    },
                    Drawn::Cpu => format!("{cpu_pct:>5.1}"),
                    // Waits, I/O waits and the waits caused are measured per process.
                    Drawn::Wait => pct5_if(threads, waits, wait_pct),
                    Drawn::Iow => pct5_if(threads, m.wait.offcpu_available, iow_pct),
                    Drawn::Hold => pct5_if(threads, m.wait.offcpu_available, caused_pct),
                    Drawn::Time => format!("{:>8}", super::fmt_ns(total_ns)),
                    Drawn::Res => match (sums, m.mem.sketch.rss_of(e.tgid)) {
                        (Some(s), _) => match s.rss {
                            Some(b) => format!("{:>6}", bytes(b)),
                            None => format!("{:>6}", "-"),
                        },
                        (None, Some(b)) if !e.exited() => format!("{:>6}", bytes(b)),
                        _ => format!("{:>6}", "-"),
                    },
                    Drawn::IoSum => io_cell(read_per_s + write_per_s),
                    Drawn::Read => io_cell(read_per_s),
                    Drawn::Write => io_cell(write_per_s),
                    Drawn::NetSum => net_cell(rx + tx),
                    Drawn::Rx => net_cell(rx),
                    Drawn::Tx => net_cell(tx),
                    Drawn::Cgroup => {
                        let name = crate::model::cgroups::short_name(&e.cgroup);
                        let name = if name.is_empty() { "-" } else { &name };
                        format!("{name:<18.18}")
                    }
                    Drawn::Burst => e
                        .burst
                        .with_dense(now, bw, |d| sparkline(d, CELL_NS, t.ascii)),
                    Drawn::Command => cut_to_width(
                        command_cell(
                            e,
                            tr.map(|r| (r, level_w)),
                            threads,
                            cols.cmd_width,
                            t.ascii,
                        ),
                        usize::from(area.width),
                    ),
                    Drawn::Nice => stat(3, st.map(|s| s.nice.to_string())),
                    Drawn::Pri => stat(
                        3,
                        st.map(|s| {
                            // Real-time tasks: the kernel's -2..-100 reads better as RT.
                            if s.priority <= -100 {
                                "RT".into()
                            } else {
                                s.priority.to_string()
                            }
                        }),
                    ),
                    Drawn::State => stat(1, st.map(|s| s.state.to_string())),
                    Drawn::Threads => stat(4, st.map(|s| s.threads.to_string())),
                    // /proc's when read, else the parent the Batches carry (a replay too).
                    Drawn::Ppid => stat(
                        7,
                        st.map(|s| s.ppid.to_string())
                            .or_else(|| m.lineage.ppid(e.tgid).map(|p| p.to_string())),
                    ),
                    Drawn::Start => {
                        format!("{:>5}", start_text(app, e.key.start_ticks))
                    }
                })
                .collect();
            (cells, style)
        })
        .collect();
    let rows: Vec<(Vec<TableCell>, Style)> = texts
        .iter()
        .map(|(cells, style)| {
            let cells = cols
                .drawn
                .iter()
                .zip(cells)
                .map(|(d, s)| TableCell {
                    text: s.as_str(),
                    style: match d {
                        Drawn::Burst => c.burst(),
                        _ => Style::default(),
                    },
                })
                .collect();
            (cells, *style)
        })
        .collect();
    let burst_title = if bw >= 24 {
        format!("BURST {:.2}s, 10ms/col", bw as f64 / 100.0)
    } else {
        format!("BURST {:.2}s", bw as f64 / 100.0)
    };
    // The column the table is ranked by carries a `*`.
    let mark = |by: SortBy, plain: &'static str, marked: &'static str| {
        TableCell::from(if sort == by { marked } else { plain })
    };
    let head: Vec<TableCell> = cols
        .drawn
        .iter()
        .map(|d| match d {
            Drawn::Flag => TableCell::from("  "),
            Drawn::Pid => TableCell::from(if threads { "    TID" } else { "    PID" }),
            Drawn::User => TableCell::from("USER"),
            Drawn::Cpu => TableCell::from(" %CPU"),
            Drawn::Wait => mark(SortBy::Wait, "WAIT%", "WAIT*"),
            Drawn::Iow => mark(SortBy::Iow, " IOW%", " IOW*"),
            Drawn::Hold => mark(SortBy::Hold, "HOLD%", "HOLD*"),
            Drawn::Time => TableCell::from("    TIME"),
            Drawn::Res => mark(SortBy::Mem, "   RES", "  RES*"),
            Drawn::IoSum => mark(SortBy::Io, "  IO/s", " IO/s*"),
            Drawn::Read => mark(SortBy::Io, "READ/s", "READ*"),
            Drawn::Write => mark(SortBy::Io, "WRIT/s", "WRIT*"),
            Drawn::NetSum => mark(SortBy::Net, " NET/s", "NET/s*"),
            Drawn::Rx => mark(SortBy::Net, "  RX/s", " RX/s*"),
            Drawn::Tx => mark(SortBy::Net, "  TX/s", " TX/s*"),
            Drawn::Cgroup => TableCell::from("CGROUP"),
            Drawn::Burst => TableCell::from(burst_title.as_str()),
            Drawn::Command => TableCell::from(if threads {
                "THREAD (PID: COMMAND)"
            } else {
                "COMMAND"
            }),
            Drawn::Nice => TableCell::from(" NI"),
            Drawn::Pri => TableCell::from("PRI"),
            Drawn::State => TableCell::from("S"),
            Drawn::Threads => TableCell::from(" THR"),
            Drawn::Ppid => TableCell::from("   PPID"),
            Drawn::Start => TableCell::from("START"),
        })
        .collect();
    let widths = constraints(&cols);
    PlainTable {
        widths: &widths,
        header: &head,
        header_style: c.header_row(),
        rows: &rows,
        selected: Some(app.selected),
        highlight: c.selected(),
    }
    .render(area, f.buffer_mut());
}

#[cfg(test)]
mod tests {
    use ratatui::{buffer::Buffer, layout::Rect, widgets::Widget};

    use super::cut_to_width;

    /// A cell drawn from the cut text is the cell drawn from the whole text, at every width,
    /// with wide, combining, zero-width, emoji, flag and control characters around the cut.
    #[test]
    fn a_cut_command_draws_the_same_cell() {
        let texts = [
            "/usr/bin/python3 -m http.server 8000 --bind 127.0.0.1",
            "e\u{301}e\u{301}abcdefghe\u{301}\u{302}\u{303}xyz e\u{301}",
            "\u{2502} \u{251c}\u{2500}(exited) rustc --crate-name x --edition=2021 src/lib.rs",
            "\u{6f22}\u{5b57}a\u{6f22}b\u{5b57}cd\u{6f22}efg\u{5b57}hij\u{6f22}klmnop",
            "ab#\u{fe0f}\u{20e3}cd1\u{fe0f}\u{20e3}ef\u{1f600}gh\u{1f44d}\u{1f3fd}ijklmnop",
            "a\u{1f1eb}\u{1f1f7}b\u{1f1e9}\u{1f1ea}cdefghijklmnopqrstuvwxyz",
            "abc\u{200b}def\u{200d}ghi\u{600}jkl\u{feff}mno\u{85}pqrstuvwxyz",
            "abcdefgh\nijklmnopqrstuvwxyz",
            "abcdefghijklm\r\nnopqrstuvwxyz",
            "abc\tdefghijklmnopqrstuvwxyz",
            "abcdefghijklmnopqrstuvwxyz\u{301}\u{301}\u{301}",
            "\u{301}abcdefghijklmnopqrstuvwxyz",
            "",
            "short",
        ];
        for text in texts {
            for width in 1..=30u16 {
                let draw = |s: String| {
                    let area = Rect::new(0, 0, width, 1);
                    let mut buf = Buffer::empty(area);
                    ratatui::text::Text::from(s).render(area, &mut buf);
                    buf
                };
                let cut = cut_to_width(text.to_owned(), usize::from(width));
                assert!(cut.len() <= text.len());
                assert_eq!(
                    draw(cut.clone()),
                    draw(text.to_owned()),
                    "{text:?} at {width}: cut to {cut:?}"
                );
            }
        }
        // Only the unseen tail goes.
        let long = "x".repeat(5000);
        assert_eq!(cut_to_width(long, 200).len(), 202);
    }
}
