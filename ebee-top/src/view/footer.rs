//! The status line: the filter being typed, a notice, or the main keys.

use ratatui::{Frame, layout::Rect, text::Line};

use crate::app::{App, MainView};
use crate::view::theme::Theme;

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    let c = t.colors;
    let line = if app.filter_editing {
        Line::from(format!(
            "filter (name, cgroup or pid): {}_   Enter keep, Esc clear",
            app.filter
        ))
    } else if let Some(s) = &app.status {
        Line::styled(s.clone(), c.warn())
    } else if !app.filter.is_empty() {
        Line::from(format!("filter: {}   (Esc clears)", app.filter))
    } else if app.main == MainView::Cgroups {
        Line::from(
            "h help  q quit  C processes  j/k move  Enter its processes  / filter  space pause",
        )
    } else if app.main == MainView::Servers {
        Line::from(
            "h help  q quit  S processes  j/k move  p pin  R/L sort by req/s, p99  / filter  space pause  Enter details",
        )
    } else {
        Line::from(
            "h help  q quit  S servers  C cgroups  H threads  j/k move  p pin  / filter  P/M/W/I/N sort  space pause  +/- interval  Enter details",
        )
    };
    super::plain_table::paragraph(vec![line], area, f);
}
