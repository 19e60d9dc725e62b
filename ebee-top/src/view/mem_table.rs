//! The memory table: the processes holding the most resident memory (the memory pipeline's
//! last-known RSS), with their growth per second over the last interval. It has rows of its
//! own because the processes holding memory are often not the ones using CPU (an idle cache
//! server). With `M` (process table by RES) it ranks by growth instead.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    style::Style,
};

use crate::app::{App, SortBy};
use crate::view::plain_table::{PlainTable, TableCell};
use crate::view::theme::Theme;

/// Below this height the pane is left out (the CPU table's RES column remains).
pub const MIN_HEIGHT: u16 = 6;

/// Bytes per second as a signed short figure: `+12.3M/s`, `-800K/s`, `0`.
pub fn rate(bps: f64) -> String {
    if bps == 0.0 || !bps.is_finite() {
        return "0".into();
    }
    let sign = if bps < 0.0 { "-" } else { "+" };
    format!("{sign}{}/s", super::cpu_table::bytes(bps.abs() as u64))
}

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    let c = t.colors;
    let m = app.shown();
    let by_growth = app.sort == SortBy::Mem;
    // With `M` the process table is ranked by RES, so this pane ranks by growth: both
    // memory rankings are then on screen.
    let title = if by_growth {
        " MEMORY by growth "
    } else {
        " MEMORY by RES "
    };
    let inner = t.render_pane(title, area, f);
    if !m.mem.available {
        f.render_widget(
            ratatui::widgets::Paragraph::new("memory pipeline not loaded"),
            inner,
        );
        return;
    }
    let n = inner.height.saturating_sub(1) as usize;
    // The filter (`/`) applies here as in the process table: pid, name or command line; and
    // so does the user (`-u`, `u`).
    let needle = app.filter.to_lowercase();
    let matches = |pid: u32| {
        let owner = m.proc_info(pid).and_then(|p| p.uid);
        (app.user.is_none() || owner == app.user)
            && (needle.is_empty()
                || pid.to_string() == needle
                || m.proc_info(pid).is_some_and(|p| {
                    p.comm.to_lowercase().contains(&needle)
                        || p.cmdline.to_lowercase().contains(&needle)
                }))
    };
    // The Model keeps both rankings ready; read them in order only until the pane is full.
    let entries: Box<dyn Iterator<Item = crate::model::mem::MemEntry>> = if by_growth {
        Box::new(m.mem.sketch.by_growth())
    } else {
        Box::new(m.mem.sketch.by_rss())
    };
    // The name borrowed from the Model, not copied.
    let texts: Vec<([String; 3], &str)> = entries
        .filter(|e| matches(e.pid))
        .take(n)
        .map(|e| {
            let name = m.proc_info(e.pid).map_or("?", |p| &*p.comm);
            (
                [
                    format!("{:>7}", e.pid),
                    format!("{:>6}", super::cpu_table::bytes(e.rss_bytes)),
                    format!("{:>9}", rate(e.growth_per_s)),
                ],
                name,
            )
        })
        .collect();
    let rows: Vec<(Vec<TableCell>, Style)> = texts
        .iter()
        .map(|(nums, name)| {
            let cells = nums.iter().map(|s| s.as_str().into());
            (cells.chain([(*name).into()]).collect(), Style::default())
        })
        .collect();
    let header = [
        "    PID".into(),
        if by_growth { "   RES" } else { "  RES*" }.into(),
        if by_growth { " GROWTH*" } else { "  GROWTH" }.into(),
        "COMMAND".into(),
    ];
    PlainTable {
        widths: &[
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(9),
            Constraint::Min(8),
        ],
        header: &header,
        header_style: c.header_row(),
        rows: &rows,
        selected: None,
        highlight: Style::default(),
    }
    .render(inner, f.buffer_mut());
}

#[cfg(test)]
mod tests {
    use super::rate;

    #[test]
    fn rates_are_short_and_signed() {
        assert_eq!(rate(0.0), "0");
        assert_eq!(rate(f64::NAN), "0");
        assert_eq!(rate(3.0 * 1024.0 * 1024.0), "+3.0M/s");
        assert_eq!(rate(-512.0 * 1024.0), "-512K/s");
    }
}
