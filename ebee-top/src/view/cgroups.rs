//! The cgroups view (`C`): every cgroup the kernel charged lately, by CPU% over the last
//! second, with WAIT% and the memory the cgroup reports; a removed cgroup keeps its row,
//! marked, for a few seconds. With the culprits of waits, which cgroup delays which: HOLD%
//! (other cgroups' wait while this one ran) and, where the pane is wide enough, the cgroups
//! its processes waited behind. Enter filters the process table to the selected cgroup.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    text::Line,
    widgets::{Block, Borders, Cell, Row, Table, TableState},
};

use crate::app::App;
use crate::model::cgroups::short_name;
use crate::view::cpu_table::{bytes, pct5_if, row_mark};
use crate::view::theme::{Theme, border_set};

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    let c = t.colors;
    let m = app.shown();
    let rows_v = app.cgroup_rows();
    let waits = m.cgroups.waits;
    let culprits = m.cgroups.culprits;
    // Room for the cgroups it waited behind (two of them, short names) beside the path.
    let behind_w: u16 = if culprits && area.width >= 100 { 34 } else { 0 };
    let rows: Vec<Row> = rows_v
        .iter()
        .map(|g| {
            let (flag, style) = row_mark(t, false, g.removed);
            let path = if g.path.is_empty() {
                format!("(id {})", g.id)
            } else {
                g.path.clone()
            };
            let mut cells = vec![
                Cell::from(flag),
                Cell::from(format!("{:>6.1}", g.cpu_pct)),
                Cell::from(pct5_if(false, waits, g.wait_pct)),
                Cell::from(pct5_if(false, culprits, g.hold_pct)),
                Cell::from(format!(
                    "{:>6}",
                    g.rss_bytes.map_or_else(|| "-".into(), bytes)
                )),
            ];
            if behind_w > 0 {
                cells.push(Cell::from(behind_text(g)));
            }
            cells.push(Cell::from(if g.removed {
                format!("(removed) {path}")
            } else {
                path
            }));
            Row::new(cells).style(style)
        })
        .collect();
    let mut head = vec![
        Cell::from("  "),
        Cell::from("  %CPU"),
        Cell::from("WAIT%"),
        Cell::from("HOLD%"),
        Cell::from("   MEM"),
    ];
    let mut widths = vec![
        Constraint::Length(2),
        Constraint::Length(6),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(6),
    ];
    if behind_w > 0 {
        head.push(Cell::from("WAITS BEHIND"));
        widths.push(Constraint::Length(behind_w));
    }
    head.push(Cell::from("CGROUP"));
    widths.push(Constraint::Min(10));
    let head = Row::new(head).style(c.header_row());
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

/// The cgroups a cgroup's processes waited behind over the last second, the two heaviest by
/// their share of that wait ("batch.slice 84%, itself 12%"); empty when it waited behind none.
fn behind_text(g: &crate::model::cgroups::CgroupView) -> String {
    let total: u64 = g.behind.iter().map(|b| b.1).sum();
    if total == 0 {
        return String::new();
    }
    g.behind
        .iter()
        .take(2)
        .map(|(path, ns)| {
            let name = if *path == g.path {
                "itself".to_owned()
            } else {
                short_name(path)
            };
            format!("{name} {:.0}%", *ns as f64 * 100.0 / total as f64)
        })
        .collect::<Vec<_>>()
        .join(", ")
}
