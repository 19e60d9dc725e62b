//! The top-k CPU table.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    style::{Modifier, Style},
    widgets::{Row, Table, TableState},
};

use crate::app::App;

pub fn render(app: &App, f: &mut Frame, area: Rect) {
    let rows: Vec<Row> = app
        .rows()
        .into_iter()
        .map(|r| {
            let name = if r.cmdline.is_empty() {
                if r.kthread {
                    format!("[{}]", r.comm)
                } else {
                    r.comm.clone()
                }
            } else {
                r.cmdline.clone()
            };
            Row::new(vec![
                format!("{}", r.pid),
                format!("{:.1}", r.cpu_pct),
                format!("{:.2}", r.cpu_ns as f64 / 1e6),
                if r.exited {
                    format!("{name} (exited)")
                } else {
                    name
                },
            ])
        })
        .collect();
    let header = Row::new(vec!["PID", "%CPU", "TIME(ms)", "COMMAND"])
        .style(Style::default().add_modifier(Modifier::REVERSED));
    let table = Table::new(
        rows,
        [
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(9),
            Constraint::Min(10),
        ],
    )
    .header(header)
    .row_highlight_style(Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED));
    let mut state = TableState::default().with_selected(Some(app.selected));
    f.render_stateful_widget(table, area, &mut state);
}
