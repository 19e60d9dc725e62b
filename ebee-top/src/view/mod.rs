//! Drawing: one file per screen region. Views read the App; they never do I/O.

mod cpu_table;
mod header;
mod timeline;

use ratatui::{
    Frame,
    layout::{Constraint, Layout},
    widgets::Paragraph,
};

use crate::app::App;

/// The smallest terminal we draw into; below it we say so instead.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 6;

pub fn render(app: &App, f: &mut Frame) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "terminal too small: {}x{}, need at least {}x{}",
            area.width, area.height, MIN_WIDTH, MIN_HEIGHT
        );
        f.render_widget(Paragraph::new(msg), area);
        return;
    }
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(1),
        Constraint::Length(timeline::height(app)),
    ])
    .areas(area);
    header::render(app, f, head);
    cpu_table::render(app, f, body);
    timeline::render(app, f, foot);
}
