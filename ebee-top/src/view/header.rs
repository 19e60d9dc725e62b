//! The header: interval, CPUs, context switches and what was lost.

use ratatui::{Frame, layout::Rect, text::Line, widgets::Paragraph};

use crate::app::App;

pub fn render(app: &App, f: &mut Frame, area: Rect) {
    let mut lines = Vec::new();
    match app.model.latest() {
        Some(b) => {
            lines.push(Line::from(format!(
                "ebee-top  {}  interval {:.0} ms  cpus {}  switches {}{}",
                crate::output::fmt_wall(b.t_ms),
                b.interval_ns() as f64 / 1e6,
                b.ncpus,
                b.switches,
                if app.paused { "  [paused]" } else { "" }
            )));
            lines.push(Line::from(format!(
                "lost: {} evictions ({:.3} ms), {} lifecycle events",
                b.dropped.sketch_evictions,
                b.dropped.sketch_evicted_ns as f64 / 1e6,
                b.dropped.lifecycle_lost
            )));
        }
        None => lines.push(Line::from("ebee-top  waiting for the first interval...")),
    }
    f.render_widget(Paragraph::new(lines), area);
}
