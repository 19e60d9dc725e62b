//! The cgroups view (`C`): every cgroup the kernel charged lately, by CPU% over the last
//! second, with WAIT% and the memory the cgroup reports; a removed cgroup keeps its row,
//! marked, for a few seconds. Enter filters the process table to the selected cgroup.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    text::Line,
    widgets::{Block, Borders, Cell, Row, Table, TableState},
};

use crate::app::App;
use crate::view::cpu_table::{bytes, pct5, row_mark};
use crate::view::theme::{Theme, border_set};

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    let c = t.colors;
    let m = app.shown();
    let rows_v = app.cgroup_rows();
    let waits = m.cgroups.waits;
    let rows: Vec<Row> = rows_v
        .iter()
        .map(|g| {
            let (flag, style) = row_mark(t, false, g.removed);
            let path = if g.path.is_empty() {
                format!("(id {})", g.id)
            } else {
                g.path.clone()
            };
            Row::new(vec![
                Cell::from(flag),
                Cell::from(format!("{:>6.1}", g.cpu_pct)),
                Cell::from(if !waits {
                    format!("{:>5}", "n/a")
                } else {
                    pct5(g.wait_pct)
                }),
                Cell::from(format!(
                    "{:>6}",
                    g.rss_bytes.map_or_else(|| "-".into(), bytes)
                )),
                Cell::from(if g.removed {
                    format!("(removed) {path}")
                } else {
                    path
                }),
            ])
            .style(style)
        })
        .collect();
    let head = Row::new(vec![
        Cell::from("  "),
        Cell::from("  %CPU"),
        Cell::from("WAIT%"),
        Cell::from("   MEM"),
        Cell::from("CGROUP"),
    ])
    .style(c.header_row());
    let widths = [
        Constraint::Length(2),
        Constraint::Length(6),
        Constraint::Length(5),
        Constraint::Length(6),
        Constraint::Min(10),
    ];
    let title = if !m.cgroups.available {
        " CGROUPS: not followed (no cgroup filesystem, --cgroups off, or a recording without them) "
            .to_string()
    } else {
        format!(
            " CGROUPS ({}, {}; over the last second; Enter shows its processes, C processes) ",
            rows_v.len(),
            m.cgroups.hierarchy
        )
    };
    let block = Block::default()
        .borders(Borders::TOP)
        .border_set(border_set(t.ascii))
        .border_style(c.border())
        .title(Line::styled(title, c.title()));
    let table = Table::new(rows, widths)
        .header(head)
        .column_spacing(1)
        .block(block)
        .highlight_symbol(">")
        .row_highlight_style(c.selected());
    let mut state = TableState::default()
        .with_selected(Some(app.cg_selected.min(rows_v.len().saturating_sub(1))));
    f.render_stateful_widget(table, area, &mut state);
}
