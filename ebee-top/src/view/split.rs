//! Where a process's time went, as one bar: on a CPU, waiting for one, blocked on I/O,
//! blocked otherwise, sleeping. Each part has its own glyph as well as its colour, so the bar
//! reads without colour too.

use ratatui::text::Span;

use crate::model::procs::{CELL_NS, CPU_PCT_SPAN_NS, HISTORY_CELLS, ProcEntry};
use crate::view::theme::Theme;

/// The parts, in the bar's order: name and glyph (Unicode, ASCII).
const PARTS: [(&str, char, char); 5] = [
    ("run", '█', '#'),
    ("wait", '▓', 'w'),
    ("I/O", '▒', 'i'),
    ("blocked", '░', 'b'),
    ("sleep", '·', '.'),
];

/// `e`'s split over the last second and over the whole history kept (cells up to `now`).
pub fn last_second_and_minute(e: &ProcEntry, now: u64) -> ([u64; 5], [u64; 5]) {
    let sec = (now + 1).saturating_sub(CPU_PCT_SPAN_NS / CELL_NS);
    let min = (now + 1).saturating_sub(HISTORY_CELLS);
    (e.split(sec, now), e.split(min, now))
}

/// The bar, `width` columns, each part as wide as its share of the total (largest remainders
/// rounded up, so the widths add up); empty when nothing was measured.
pub fn bar(parts: [u64; 5], width: usize, t: &Theme) -> Vec<Span<'static>> {
    let total: u64 = parts.iter().sum();
    if total == 0 || width == 0 {
        return vec![Span::raw(" ".repeat(width))];
    }
    let exact: Vec<f64> = parts
        .iter()
        .map(|&p| p as f64 * width as f64 / total as f64)
        .collect();
    let mut cols: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let short = width.saturating_sub(cols.iter().sum());
    for &i in order.iter().take(short) {
        cols[i] += 1;
    }
    let c = t.colors;
    let styles = [
        c.burst(),
        c.latency(),
        c.iowait(),
        c.blocked(),
        ratatui::style::Style::default(),
    ];
    PARTS
        .iter()
        .zip(cols)
        .zip(styles)
        .filter(|((_, n), _)| *n > 0)
        .map(|(((_, uni, ascii), n), style)| {
            let g = if t.ascii { *ascii } else { *uni };
            Span::styled(g.to_string().repeat(n), style)
        })
        .collect()
}

/// The shares in words: `run 12% wait 3% I/O 40% blocked 1% sleep 44%`.
pub fn legend(parts: [u64; 5], t: &Theme) -> String {
    let total: u64 = parts.iter().sum();
    if total == 0 {
        return "nothing measured".into();
    }
    PARTS
        .iter()
        .zip(parts)
        .map(|((name, uni, ascii), p)| {
            let g = if t.ascii { *ascii } else { *uni };
            format!("{g} {name} {:.0}%", p as f64 * 100.0 / total as f64)
        })
        .collect::<Vec<_>>()
        .join("  ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(spans: &[Span]) -> String {
        spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn the_widths_add_up_and_follow_the_shares() {
        let t = Theme {
            ascii: true,
            ..Theme::default()
        };
        let s = text(&bar([50, 10, 25, 5, 10], 20, &t));
        assert_eq!(s, "##########wwiiiiib..");
        assert_eq!(text(&bar([1, 1, 1, 0, 0], 10, &t)).chars().count(), 10);
        assert_eq!(text(&bar([0; 5], 4, &t)), "    ");
        assert_eq!(
            legend([50, 10, 25, 5, 10], &t),
            "# run 50%  w wait 10%  i I/O 25%  b blocked 5%  . sleep 10%"
        );
    }
}
