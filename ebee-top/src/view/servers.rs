//! The SERVERS table: every process the kernel saw answering requests, with its requests per
//! second and latency percentiles over the last second, open connections, socket bytes and a
//! sparkline of its p99 (one column per interval, the tallest column the highest p99 shown).
//! Full size in the main area (`S`), or a few rows under the process table.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Row, Table, TableState},
};

use crate::app::App;
use crate::model::servers::{ServerSort, ServerView};
use crate::view::cpu_table::{rate, row_mark};
use crate::view::theme::{Theme, border_set, sparkline};

/// Rows of the pane under the process table (title and header included).
pub const PANE_HEIGHT: u16 = 6;

/// Latency in 7 characters: `85us`, `1.2ms`, `-`.
fn lat(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".into(), super::fmt_ns)
}

/// The p99 history as a sparkline `w` columns wide, newest on the right.
fn p99_line(s: &ServerView, w: usize, ascii: bool) -> String {
    let vals: Vec<u64> = s.p99_history.iter().map(|v| v.unwrap_or(0)).collect();
    let tail = &vals[vals.len().saturating_sub(w)..];
    let full = tail.iter().copied().max().unwrap_or(0).max(1);
    let mut line = sparkline(tail, full, ascii);
    let pad = w.saturating_sub(tail.len());
    line.insert_str(0, &" ".repeat(pad));
    line
}

/// Draw the table in `area`; `full` when it has the main area (with the selection).
pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect, full: bool) {
    let c = t.colors;
    let m = app.shown();
    let servers = app.server_rows();
    let sort = app.srv_sort;
    // Fixed columns: mark, flag, PID, REQ/s, p50, p99, p99.9, CONNS, RX/s, TX/s and spacing.
    let fixed = 1 + 2 + 7 + 8 + 7 + 7 + 7 + 6 + 6 + 6 + 10;
    // The p99 sparkline takes what the command leaves (16 columns for it in the full table,
    // half of the rest under the process table).
    let spare = usize::from(area.width).saturating_sub(fixed + 16);
    let spark_w = if full { spare } else { spare / 2 }.min(200);
    let rows: Vec<Row> = servers
        .iter()
        .map(|s| {
            let key = m.table.by_pid(s.pid).map(|e| e.key);
            let pinned = key.is_some_and(|k| m.table.is_pinned(&k));
            let (flag, style) = row_mark(t, pinned, s.exited);
            let mut cells = vec![
                Cell::from(flag),
                Cell::from(format!("{:>7}", s.pid)),
                Cell::from(format!("{:>8.1}", s.rps)),
                Cell::from(format!("{:>7}", lat(s.p50_ns))),
                Cell::from(format!("{:>7}", lat(s.p99_ns))),
                Cell::from(format!("{:>7}", lat(s.p999_ns))),
                Cell::from(format!(
                    "{:>6}",
                    s.conns.map_or_else(|| "-".into(), |n| n.to_string())
                )),
                Cell::from(format!("{:>6}", rate(s.rx_per_s))),
                Cell::from(format!("{:>6}", rate(s.tx_per_s))),
            ];
            if spark_w >= 8 {
                cells.push(Cell::from(Line::from(Span::styled(
                    p99_line(s, spark_w, t.ascii),
                    c.latency(),
                ))));
            }
            let name = if s.comm.is_empty() { "?" } else { &s.comm };
            cells.push(Cell::from(if s.exited {
                format!("(exited) {name}")
            } else {
                name.to_string()
            }));
            Row::new(cells).style(style)
        })
        .collect();
    let mark = |by: ServerSort, plain: &'static str, marked: &'static str| {
        Cell::from(if sort == by { marked } else { plain })
    };
    let mut head = vec![
        Cell::from("  "),
        Cell::from("    PID"),
        mark(ServerSort::Rps, "   REQ/s", "  REQ/s*"),
        Cell::from("    p50"),
        mark(ServerSort::P99, "    p99", "   p99*"),
        Cell::from("  p99.9"),
        Cell::from(" CONNS"),
        Cell::from("  RX/s"),
        Cell::from("  TX/s"),
    ];
    let mut widths = vec![
        Constraint::Length(2),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(6),
    ];
    if spark_w >= 8 {
        head.push(Cell::from(if spark_w >= 24 {
            format!("p99, last {spark_w} intervals")
        } else {
            "p99".to_string()
        }));
        widths.push(Constraint::Length(spark_w as u16));
    }
    head.push(Cell::from("COMMAND"));
    widths.push(Constraint::Min(8));
    let title = if !m.servers.available {
        " SERVERS: not measured (no socket tracepoints, or --no-servers) ".to_string()
    } else if servers.is_empty() {
        " SERVERS: none answered a request yet ".to_string()
    } else if full {
        format!(
            " SERVERS ({}; over the last second; R/L sort, S processes) ",
            servers.len()
        )
    } else {
        format!(" SERVERS ({}; S to enlarge) ", servers.len())
    };
    let block = Block::default()
        .borders(Borders::TOP)
        .border_set(border_set(t.ascii))
        .border_style(c.border())
        .title(Line::styled(title, c.title()));
    let mut table = Table::new(rows, widths)
        .header(Row::new(head).style(c.header_row()))
        .column_spacing(1)
        .block(block);
    let mut state = TableState::default();
    if full {
        table = table
            .highlight_symbol(">")
            .row_highlight_style(c.selected());
        state = state.with_selected(Some(app.srv_selected.min(servers.len().saturating_sub(1))));
    }
    f.render_stateful_widget(table, area, &mut state);
}
