//! The minute of burst history of the selected process: one row per slice of the minute,
//! oldest at the top; each column is the busiest 10 ms cell of its span, so a short burst
//! keeps its height however many cells a column covers.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
};

use crate::app::App;
use crate::model::procs::{CELL_NS, HISTORY_CELLS};
use crate::view::theme::Theme;
use crate::view::theme::spark;

/// Rows the pane takes.
pub const HEIGHT: u16 = 9;

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    let c = t.colors;
    let Some(e) = app.selected_process() else {
        return;
    };
    let inner_w = area.width.saturating_sub(2 + 6) as u64;
    // With waits from the kernel, the last line is the minute's run-queue wait; with the
    // off-CPU split, one more line shows it over the last second and over the minute.
    let waits = app.shown().wait.available;
    let split = app.shown().wait.offcpu_available;
    let rows = u64::from(
        area.height
            .saturating_sub(2 + u16::from(waits) + u16::from(split)),
    )
    .max(1);
    if inner_w == 0 {
        return;
    }
    // Cells per column so that rows x columns cover the minute.
    let per_col = HISTORY_CELLS.div_ceil(rows * inner_w).max(1);
    let per_row = per_col * inner_w;
    let title = format!(
        " burst history {} {}: {} s, 1 col = busiest 10 ms of {} ms ",
        e.key.pid,
        e.comm,
        per_row * rows * CELL_NS / 1_000_000_000,
        per_col * CELL_NS / 1_000_000
    );
    let inner = t.render_pane(&title, area, f);
    let now = app.shown().table.now_cell();
    let total = (per_row * rows) as usize;
    let mut lines: Vec<Line> = e.burst.with_dense(now, total, |cells| {
        cells
            .chunks(per_row as usize)
            .enumerate()
            .map(|(i, row)| {
                let ago_s = (rows - i as u64) * per_row * CELL_NS / 1_000_000_000;
                let s: String = row
                    .chunks(per_col as usize)
                    .map(|col| spark(col.iter().copied().max().unwrap_or(0), CELL_NS, t.ascii))
                    .collect();
                Line::from(vec![
                    Span::raw(format!("{:>5} ", format!("-{ago_s}s"))),
                    Span::styled(s, c.burst()),
                ])
            })
            .collect()
    });
    // The run-queue wait of the whole minute on one line, each column the average wait of
    // its span (a full column: one thread waiting all the time).
    if waits {
        let w = inner_w as usize;
        let span = total.div_ceil(w.max(1)).max(1);
        let s: String = e.wait.with_dense(now, span * w, |cells| {
            cells
                .chunks(span)
                .map(|col| {
                    let avg = col.iter().sum::<u64>() / col.len() as u64;
                    spark(avg, CELL_NS, t.ascii)
                })
                .collect()
        });
        lines.push(Line::from(vec![
            Span::raw(format!("{:>5} ", "wait")),
            Span::styled(s, c.latency()),
        ]));
    }
    // run / wait / I/O / blocked / sleep: the last second's bar, then the minute's.
    if split {
        let (sec, min) = crate::view::split::last_second_and_minute(e, now);
        let half = (inner_w as usize).saturating_sub(5) / 2;
        let mut spans = vec![Span::raw(format!("{:>5} ", "1s"))];
        spans.extend(crate::view::split::bar(sec, half, t));
        spans.push(Span::raw(" 60s "));
        spans.extend(crate::view::split::bar(
            min,
            (inner_w as usize).saturating_sub(half + 5),
            t,
        ));
        lines.push(Line::from(spans));
    }
    super::plain_table::paragraph(lines, inner, f);
}
