//! The minute of burst history of the selected process: one row per slice of the minute,
//! oldest at the top; each column is the busiest 10 ms cell of its span, so a short burst
//! keeps its height however many cells a column covers.

use ratatui::{
    Frame,
    buffer::Buffer,
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::Paragraph,
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
    paragraph(lines, inner, f);
}

/// `f.render_widget(Paragraph::new(lines), area)`, cell by cell when [`draw_plain`] can.
pub(super) fn paragraph(lines: Vec<Line>, area: Rect, f: &mut Frame) {
    if !draw_plain(&lines, area, f.buffer_mut()) {
        f.render_widget(Paragraph::new(lines), area);
    }
}

/// One column wide and a grapheme of its own: printable ASCII, the middle dot, box drawing and
/// block elements (every character the pane's sparklines and bars are made of).
pub(super) fn plain(c: char) -> bool {
    (' '..='~').contains(&c) || c == '\u{b7}' || ('\u{2500}'..='\u{259f}').contains(&c)
}

/// Draw `lines` into `area` as `Paragraph::new(lines)` does (no wrap, no scroll, no style),
/// a cell per character, when every character is [`plain`] and no line has a style or an
/// alignment of its own; false, drawing nothing, otherwise. A Paragraph sends each character
/// through grapheme segmentation, width lookups and a vector of styled graphemes: for the
/// pane's 1,500 cells, most of what drawing the pane cost.
fn draw_plain(lines: &[Line], area: Rect, buf: &mut Buffer) -> bool {
    let plain_line = |l: &Line| {
        l.style == Style::default()
            && l.alignment.is_none()
            && l.spans.iter().all(|s| s.content.chars().all(plain))
    };
    if !lines.iter().all(plain_line) {
        return false;
    }
    let area = area.intersection(buf.area);
    for (line, y) in lines.iter().zip(area.top()..area.bottom()) {
        let mut x = area.left();
        for span in &line.spans {
            if x >= area.right() {
                break;
            }
            let style = Style::default().patch(line.style).patch(span.style);
            x += super::plain_table::put_plain(buf, x, y, area.right() - x, &span.content, style);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use ratatui::{
        buffer::Buffer,
        layout::Rect,
        style::{Color, Modifier, Style},
        text::{Line, Span},
        widgets::{Paragraph, Widget},
    };

    use super::{draw_plain, plain};

    /// Each plain character is one column wide alone, as ratatui measures it.
    #[test]
    fn plain_characters_are_one_column() {
        for c in ('\0'..='\u{3000}').filter(|&c| plain(c)) {
            assert_eq!(Span::raw(c.to_string()).width(), 1, "{c:?}");
        }
    }

    /// Plain lines are drawn cell for cell as a Paragraph draws them: cut at the area's right
    /// edge and bottom, over what was there, spans styled over the cells' own styles.
    #[test]
    fn plain_lines_are_drawn_as_a_paragraph_draws_them() {
        let burst = Style::default().fg(Color::Green);
        let bold = Style::default()
            .add_modifier(Modifier::BOLD)
            .bg(Color::Blue);
        let lines = vec![
            Line::from(vec![
                Span::raw(" -60s "),
                Span::styled("\u{2581}\u{2588} \u{2583}\u{2587}\u{2581}", burst),
            ]),
            Line::from(vec![
                Span::raw(" wait "),
                Span::styled("#@ .~", bold),
                Span::raw(""),
                Span::styled("\u{2593}\u{2592}\u{2591}\u{b7}+", burst),
            ]),
            Line::from(""),
            Line::from(vec![Span::raw("   1s "), Span::styled("|-+", bold)]),
        ];
        for (w, h) in [(20, 6), (14, 4), (9, 2), (1, 1), (0, 3), (12, 0)] {
            let area = Rect::new(1, 1, w, h);
            let mut under = Buffer::empty(Rect::new(0, 0, 22, 8));
            under.set_string(0, 2, "x".repeat(22), Style::default().fg(Color::Red));
            let mut want = under.clone();
            Paragraph::new(lines.clone()).render(area, &mut want);
            let mut got = under;
            assert!(draw_plain(&lines, area, &mut got));
            assert_eq!(got, want, "{w}x{h}");
        }
        // Anything else is left to the Paragraph.
        let area = Rect::new(0, 0, 10, 2);
        let mut buf = Buffer::empty(area);
        for other in [
            vec![Line::from("\u{65e5}\u{672c}")],
            vec![Line::from("e\u{301}")],
            vec![Line::from("ab").centered()],
            vec![Line::from("ab").style(burst)],
        ] {
            assert!(!draw_plain(&other, area, &mut buf));
        }
        assert_eq!(buf, Buffer::empty(area));
    }
}
