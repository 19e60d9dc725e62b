//! Tables and lines drawn cell by cell. ratatui's `Table` and `Paragraph` send every character
//! through grapheme segmentation, a width lookup and a styled-grapheme iterator; the `Table`
//! was about half of what drawing the screen cost at 50 ms. [`PlainTable`] draws exactly what
//! that `Table` draws, and [`paragraph`] what that `Paragraph` draws (the tests below compare
//! them), writing text a character per cell ([`put_plain`]) when every character is
//! [`plain`], and through ratatui's own `Text` or `Paragraph` otherwise (a command line with
//! wide or combining characters).

use ratatui::{
    Frame,
    buffer::Buffer,
    layout::{Constraint, Flex, Layout, Rect},
    style::Style,
    text::{Line, Span, Text},
    widgets::{Paragraph, Widget},
};

/// One cell: its text and the style of its span (`Style::default()` for a plain `&str` cell).
#[derive(Clone, Copy, Debug)]
pub struct TableCell<'a> {
    pub text: &'a str,
    pub style: Style,
}

impl<'a> From<&'a str> for TableCell<'a> {
    fn from(text: &'a str) -> Self {
        Self {
            text,
            style: Style::default(),
        }
    }
}

/// What `Table::new(rows, widths).header(Row::new(header).style(header_style))
/// .column_spacing(1).flex(Flex::Start).highlight_symbol(">").row_highlight_style(highlight)`
/// draws with `TableState::default().with_selected(selected)`.
pub struct PlainTable<'a> {
    pub widths: &'a [Constraint],
    pub header: &'a [TableCell<'a>],
    pub header_style: Style,
    /// Each row's cells and the row's style.
    pub rows: &'a [(Vec<TableCell<'a>>, Style)],
    /// The selected row, marked `>` and drawn in `highlight`; None: no mark column.
    pub selected: Option<usize>,
    pub highlight: Style,
}

impl PlainTable<'_> {
    pub fn render(&self, area: Rect, buf: &mut Buffer) {
        if area.is_empty() {
            return;
        }
        // The highlight mark's column is there only while a row can be selected.
        let mark_w = u16::from(self.selected.is_some() && !self.rows.is_empty());
        let [_, cols_area] = Layout::horizontal([Constraint::Length(mark_w), Constraint::Fill(0)])
            .areas(Rect::new(0, 0, area.width, 1));
        let cols = Layout::horizontal(self.widths.iter().copied())
            .flex(Flex::Start)
            .spacing(1)
            .split(cols_area);
        let [header_area, rows_area] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
        buf.set_style(header_area, self.header_style);
        for (c, cell) in cols.iter().zip(self.header) {
            put(
                *cell,
                Rect::new(
                    header_area.x + c.x,
                    header_area.y,
                    c.width,
                    header_area.height,
                ),
                buf,
            );
        }
        if self.rows.is_empty() {
            return;
        }
        let selected = self.selected.map(|s| s.min(self.rows.len() - 1));
        let (start, end) = match selected {
            Some(s) => row_bounds(self.rows.len(), s, rows_area.height),
            None => (0, self.rows.len().min(usize::from(rows_area.height))),
        };
        let mut selected_row = None;
        for (i, (cells, style)) in self.rows.iter().enumerate().take(end).skip(start) {
            let row = Rect::new(
                rows_area.x,
                rows_area.y + (i - start) as u16,
                rows_area.width,
                1,
            );
            if *style != Style::default() {
                buf.set_style(row, *style);
            }
            if selected == Some(i) {
                put(
                    ">".into(),
                    Rect {
                        width: mark_w,
                        ..row
                    },
                    buf,
                );
                selected_row = Some(row);
            }
            for (c, cell) in cols.iter().zip(cells) {
                put(*cell, Rect::new(row.x + c.x, row.y, c.width, 1), buf);
            }
        }
        if let Some(row) = selected_row {
            buf.set_style(row, self.highlight);
        }
    }
}

/// The rows shown in `height` lines, from the top, scrolled just enough that the selected
/// row is the last one when it would be below (ratatui's `get_row_bounds` from offset 0 for
/// rows one line high).
fn row_bounds(len: usize, selected: usize, height: u16) -> (usize, usize) {
    let height = usize::from(height);
    let end = len.min(height).max(selected + 1);
    (end.saturating_sub(height), end)
}

/// `text`'s characters, each [`plain`], into the cells from (`x`, `y`) rightwards, at most
/// `width` of them (all inside `buf`), each styled with `style` over its own style: what
/// drawing the text a cell at a time through `buf[(x, y)]` does, with the row found once.
/// The number of cells written.
pub(super) fn put_plain(
    buf: &mut Buffer,
    x: u16,
    y: u16,
    width: u16,
    text: &str,
    style: Style,
) -> u16 {
    let start = buf.index_of(x, y);
    let row = &mut buf.content[start..start + usize::from(width)];
    // Styling with the default style changes nothing.
    let styled = style != Style::default();
    let mut n = 0;
    for (cell, c) in row.iter_mut().zip(text.chars()) {
        cell.set_char(c);
        if styled {
            cell.set_style(style);
        }
        n += 1;
    }
    n
}

/// A cell's text into `area` as `Cell::render` draws it.
fn put(cell: TableCell, area: Rect, buf: &mut Buffer) {
    let area = area.intersection(buf.area);
    if area.is_empty() {
        return;
    }
    if cell.text.chars().all(plain) {
        put_plain(buf, area.x, area.y, area.width, cell.text, cell.style);
    } else if cell.style == Style::default() {
        Text::from(cell.text).render(area, buf);
    } else {
        Text::from(Line::from(Span::styled(cell.text, cell.style))).render(area, buf);
    }
}

/// `f.render_widget(Paragraph::new(lines), area)`, cell by cell when [`draw_plain`] can.
pub(super) fn paragraph(lines: Vec<Line>, area: Rect, f: &mut Frame) {
    if !draw_plain(&lines, area, f.buffer_mut()) {
        f.render_widget(Paragraph::new(lines), area);
    }
}

/// One column wide and a grapheme of its own: printable ASCII, the middle dot, box drawing and
/// block elements (every character the sparklines, bars and borders are made of).
pub(super) fn plain(c: char) -> bool {
    (' '..='~').contains(&c) || c == '\u{b7}' || ('\u{2500}'..='\u{259f}').contains(&c)
}

/// Draw `lines` into `area` as `Paragraph::new(lines)` does (no wrap, no scroll, no style),
/// a cell per character, when every character is [`plain`] and no line has a style or an
/// alignment of its own; false, drawing nothing, otherwise. A Paragraph sends each character
/// through grapheme segmentation, width lookups and a vector of styled graphemes: for the
/// burst pane's 1,500 cells, most of what drawing the pane cost.
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
            x += put_plain(buf, x, y, area.right() - x, &span.content, style);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use ratatui::{
        buffer::Buffer,
        layout::{Constraint, Flex, Rect},
        style::{Color, Modifier, Style},
        text::{Line, Span},
        widgets::{Cell, Paragraph, Row, StatefulWidget, Table, TableState},
    };

    use super::{PlainTable, TableCell, draw_plain, plain};

    fn ratatui_table(t: &PlainTable, area: Rect, buf: &mut Buffer) {
        fn cell<'a>(c: &TableCell<'a>) -> Cell<'a> {
            if c.style == Style::default() {
                Cell::from(c.text)
            } else {
                Cell::from(Line::from(Span::styled(c.text, c.style)))
            }
        }
        let rows: Vec<Row> = t
            .rows
            .iter()
            .map(|(cells, style)| Row::new(cells.iter().map(cell)).style(*style))
            .collect();
        let table = Table::new(rows, t.widths.iter().copied())
            .header(Row::new(t.header.iter().map(cell)).style(t.header_style))
            .column_spacing(1)
            .flex(Flex::Start)
            .highlight_symbol(">")
            .row_highlight_style(t.highlight);
        let mut state = TableState::default().with_selected(t.selected);
        table.render(area, buf, &mut state);
    }

    /// Drawn over a buffer that already holds text, at every size and selection, with plain
    /// and other texts, styled spans and rows: the same cells as ratatui's Table.
    #[test]
    fn draws_what_ratatuis_table_draws() {
        let green = Style::default().fg(Color::Green);
        let row_style = Style::default()
            .fg(Color::Yellow)
            .add_modifier(Modifier::BOLD);
        let texts = [
            "   1234",
            " 12.5",
            "\u{2581}\u{2588} \u{2583}\u{2587}\u{2581}\u{b7}",
            "/usr/bin/python3 -m http.server 8000",
            "\u{2502} \u{251c}\u{2500}(exited) rustc --crate-name x",
            "\u{6f22}\u{5b57}a\u{6f22}b wide",
            "e\u{301}e\u{301}abc combining",
            "two\nlines",
            "tab\there",
            "",
            "a\u{1f600}b",
        ];
        let widths = [
            Constraint::Length(2),
            Constraint::Length(7),
            Constraint::Length(5),
            Constraint::Length(6),
            Constraint::Min(10),
        ];
        let header: Vec<TableCell> = ["  ", "    PID", " %CPU", "BURST 0.06s", "COMMAND"]
            .into_iter()
            .map(TableCell::from)
            .collect();
        let rows: Vec<(Vec<TableCell>, Style)> = (0..9)
            .map(|i| {
                let cells = (0..5)
                    .map(|j| TableCell {
                        text: texts[(i * 3 + j * 7) % texts.len()],
                        style: if j == 3 { green } else { Style::default() },
                    })
                    .collect();
                (
                    cells,
                    if i % 3 == 1 {
                        row_style
                    } else {
                        Style::default()
                    },
                )
            })
            .collect();
        let highlight = Style::default()
            .bg(Color::Blue)
            .add_modifier(Modifier::REVERSED);
        for n in [0, 1, 4, 9] {
            for selected in [None, Some(0), Some(1), Some(3), Some(5), Some(8), Some(20)] {
                for (w, h) in [
                    (60, 12),
                    (60, 5),
                    (40, 3),
                    (24, 2),
                    (12, 1),
                    (80, 30),
                    (1, 4),
                ] {
                    let t = PlainTable {
                        widths: &widths,
                        header: &header,
                        header_style: Style::default().add_modifier(Modifier::UNDERLINED),
                        rows: &rows[..n],
                        selected,
                        highlight,
                    };
                    let area = Rect::new(1, 1, w, h);
                    let mut under = Buffer::empty(Rect::new(0, 0, 82, 32));
                    for y in 0..32 {
                        under.set_string(
                            0,
                            y,
                            "x\u{6f22}".repeat(28),
                            Style::default().fg(Color::Red),
                        );
                    }
                    let mut want = under.clone();
                    ratatui_table(&t, area, &mut want);
                    let mut got = under;
                    t.render(area, &mut got);
                    assert_eq!(got, want, "{n} rows, selected {selected:?}, {w}x{h}");
                }
            }
        }
    }

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
            ratatui::widgets::Widget::render(Paragraph::new(lines.clone()), area, &mut want);
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
