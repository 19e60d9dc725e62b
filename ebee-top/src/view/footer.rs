//! The status line: the filter being typed, a notice, or the main keys.

use ratatui::{Frame, layout::Rect, text::Line, widgets::Paragraph};

use crate::app::App;
use crate::view::theme::Theme;

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    let c = t.colors;
    let line = if app.filter_editing {
        Line::from(format!(
            "filter (name or pid): {}_   Enter keep, Esc clear",
            app.filter
        ))
    } else if let Some(s) = &app.status {
        Line::styled(s.clone(), c.warn())
    } else if !app.filter.is_empty() {
        Line::from(format!("filter: {}   (Esc clears)", app.filter))
    } else {
        Line::from(
            "h help  q quit  j/k move  p pin  / filter  P/M/W/I sort  space pause  +/- interval  Enter details",
        )
    };
    f.render_widget(Paragraph::new(line), area);
}
