//! Colours and glyphs. Every style the views use comes from here, so `--color never` (or
//! `NO_COLOR`) leaves only bold and reverse, and `--ascii` leaves only ASCII. The theme is
//! chosen once at start (by the front-end, from flags and environment) and knows nothing of
//! the App.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};

/// How the screen is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Theme {
    pub colors: Colors,
    /// Only ASCII: sparklines, borders and marks.
    pub ascii: bool,
}

impl Theme {
    /// A bordered pane titled `title`, in the border and title styles.
    pub fn pane<'a>(&self, title: impl Into<String>) -> ratatui::widgets::Block<'a> {
        let c = self.colors;
        ratatui::widgets::Block::default()
            .borders(ratatui::widgets::Borders::ALL)
            .border_set(border_set(self.ascii))
            .border_style(c.border())
            .title(ratatui::text::Line::styled(title.into(), c.title()))
    }

    /// Draw [`Theme::pane`] into `area` as the Block draws itself, and give the area inside
    /// its borders. With a title of [`plain`](super::plain_table::plain) characters (every pane's, but
    /// for a command line's) the borders and the title are written cell by cell: the Block
    /// styles every cell of its area, then sends the title through grapheme segmentation.
    pub fn render_pane(&self, title: &str, area: Rect, f: &mut ratatui::Frame) -> Rect {
        if !title.chars().all(super::plain_table::plain) {
            let block = self.pane(title);
            let inner = block.inner(area);
            f.render_widget(block, area);
            return inner;
        }
        // A title on the top border takes no room of its own: the inner area is the borders'.
        let inner = ratatui::widgets::Block::bordered().inner(area);
        let buf = f.buffer_mut();
        let area = area.intersection(buf.area);
        if area.is_empty() {
            return inner;
        }
        let (set, style) = (border_set(self.ascii), self.colors.border());
        let (left, right) = (area.left(), area.right() - 1);
        let (top, bottom) = (area.top(), area.bottom() - 1);
        // The Block's order: sides, then corners over them.
        let mut put = |x: u16, y: u16, symbol: &str| {
            buf[(x, y)].set_symbol(symbol).set_style(style);
        };
        for y in top..=bottom {
            put(left, y, set.vertical_left);
        }
        for x in left..=right {
            put(x, top, set.horizontal_top);
        }
        for y in top..=bottom {
            put(right, y, set.vertical_right);
        }
        for x in left..=right {
            put(x, bottom, set.horizontal_bottom);
        }
        put(right, bottom, set.bottom_right);
        put(right, top, set.top_right);
        put(left, bottom, set.bottom_left);
        put(left, top, set.top_left);
        // The title, on the top border between the corners, in the title style.
        let room = area.width.saturating_sub(2);
        if room > 0 {
            super::plain_table::put_plain(buf, left + 1, top, room, title, self.colors.title());
        }
        inner
    }
}

/// How many colours the terminal gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Colors {
    /// No colour at all: bold and reverse only.
    None,
    /// The 16 ANSI colours.
    #[default]
    Ansi16,
    /// The xterm 256-colour palette.
    Ansi256,
    /// 24-bit RGB.
    TrueColor,
}

impl Colors {
    /// `--color auto`: NO_COLOR (any value) turns colour off; COLORTERM and TERM say how much
    /// the terminal takes.
    pub fn detect(no_color: Option<&str>, colorterm: Option<&str>, term: Option<&str>) -> Self {
        if no_color.is_some_and(|v| !v.is_empty()) {
            return Colors::None;
        }
        if colorterm.is_some_and(|c| c == "truecolor" || c == "24bit") {
            return Colors::TrueColor;
        }
        match term {
            Some("dumb") => Colors::None,
            Some(t) if t.contains("256") => Colors::Ansi256,
            _ => Colors::Ansi16,
        }
    }

    fn pick(self, c16: Color, c256: u8, rgb: (u8, u8, u8)) -> Option<Color> {
        match self {
            Colors::None => None,
            Colors::Ansi16 => Some(c16),
            Colors::Ansi256 => Some(Color::Indexed(c256)),
            Colors::TrueColor => Some(Color::Rgb(rgb.0, rgb.1, rgb.2)),
        }
    }

    fn fg(self, c16: Color, c256: u8, rgb: (u8, u8, u8)) -> Style {
        match self.pick(c16, c256, rgb) {
            Some(c) => Style::default().fg(c),
            None => Style::default(),
        }
    }

    /// Column headers and titles.
    pub fn title(self) -> Style {
        self.fg(Color::Cyan, 39, (80, 170, 255))
            .add_modifier(Modifier::BOLD)
    }

    /// The table's header row.
    pub fn header_row(self) -> Style {
        match self.pick(Color::Blue, 24, (30, 70, 120)) {
            Some(c) => Style::default()
                .bg(c)
                .fg(Color::White)
                .add_modifier(Modifier::BOLD),
            None => Style::default().add_modifier(Modifier::REVERSED),
        }
    }

    /// The selected row: a background, not reverse video, which would turn every blank
    /// cell of a sparkline into a full bar.
    pub fn selected(self) -> Style {
        match self.pick(Color::DarkGray, 237, (60, 60, 70)) {
            Some(c) => Style::default().bg(c).add_modifier(Modifier::BOLD),
            None => Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
        }
    }

    /// Burst sparklines.
    pub fn burst(self) -> Style {
        self.fg(Color::Green, 42, (60, 210, 120))
    }

    /// Latency sparklines and histogram bars.
    pub fn latency(self) -> Style {
        self.fg(Color::Yellow, 214, (250, 180, 40))
    }

    /// Time blocked on I/O in the off-CPU split bar.
    pub fn iowait(self) -> Style {
        self.fg(Color::Red, 203, (240, 90, 80))
    }

    /// Time blocked otherwise in the off-CPU split bar.
    pub fn blocked(self) -> Style {
        self.fg(Color::Magenta, 170, (200, 100, 220))
    }

    /// Exited processes.
    pub fn exited(self) -> Style {
        match self {
            Colors::None => Style::default().add_modifier(Modifier::DIM),
            _ => self.fg(Color::DarkGray, 244, (130, 130, 130)),
        }
    }

    /// Pinned processes.
    pub fn pinned(self) -> Style {
        self.fg(Color::Magenta, 170, (210, 110, 220))
            .add_modifier(Modifier::BOLD)
    }

    /// Processes tagged for a signal or a renice.
    pub fn tagged(self) -> Style {
        self.fg(Color::Yellow, 220, (240, 200, 60))
            .add_modifier(Modifier::BOLD)
    }

    /// Tree rows shown only to lead to a listed process (an idle parent).
    pub fn context(self) -> Style {
        match self {
            Colors::None => Style::default(),
            _ => self.fg(Color::Gray, 248, (160, 160, 160)),
        }
    }

    /// Warnings: losses, notices.
    pub fn warn(self) -> Style {
        self.fg(Color::Red, 196, (240, 80, 60))
            .add_modifier(Modifier::BOLD)
    }

    /// Borders of the panes.
    pub fn border(self) -> Style {
        self.fg(Color::DarkGray, 240, (90, 90, 90))
    }
}

/// Sparkline levels, empty to full.
const BLOCKS: [char; 9] = [
    ' ', '\u{2581}', '\u{2582}', '\u{2583}', '\u{2584}', '\u{2585}', '\u{2586}', '\u{2587}',
    '\u{2588}',
];
const ASCII_LEVELS: [char; 9] = [' ', '.', ',', '-', '~', '+', '*', '#', '@'];

/// One sparkline cell for `v` of `full` (anything above `full` is full; anything above zero
/// shows, so a short burst never disappears).
pub fn spark(v: u64, full: u64, ascii: bool) -> char {
    let levels = if ascii { &ASCII_LEVELS } else { &BLOCKS };
    if v == 0 || full == 0 {
        return levels[0];
    }
    let i = ((v.min(full) as u128 * 8).div_ceil(full as u128) as usize).clamp(1, 8);
    levels[i]
}

/// A sparkline string of `vals` scaled to `full`.
pub fn sparkline(vals: &[u64], full: u64, ascii: bool) -> String {
    vals.iter().map(|v| spark(*v, full, ascii)).collect()
}

/// Borders: the light box-drawing set, or ASCII.
pub fn border_set(ascii: bool) -> ratatui::symbols::border::Set {
    if ascii {
        ratatui::symbols::border::Set {
            top_left: "+",
            top_right: "+",
            bottom_left: "+",
            bottom_right: "+",
            vertical_left: "|",
            vertical_right: "|",
            horizontal_top: "-",
            horizontal_bottom: "-",
        }
    } else {
        ratatui::symbols::border::PLAIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pane drawn by `render_pane` is the Block `pane` gives, drawn over what was there, at
    /// every size, with titles that fit, that do not, and that are not plain.
    #[test]
    fn a_pane_is_drawn_as_its_block() {
        use ratatui::widgets::Widget;
        use ratatui::{Terminal, backend::TestBackend, buffer::Buffer};
        let titles = [
            " MEMORY by RES ",
            "",
            " burst history 12 cc1 ",
            " \u{65e5}\u{672c} wide ",
        ];
        for ascii in [false, true] {
            for colors in [Colors::None, Colors::Ansi16, Colors::TrueColor] {
                let t = Theme { colors, ascii };
                for title in titles {
                    for (w, h) in [(30, 6), (12, 3), (2, 2), (1, 4), (5, 1), (0, 3), (3, 0)] {
                        let area = Rect::new(1, 1, w, h);
                        let mut under = Buffer::empty(Rect::new(0, 0, 34, 9));
                        under.set_string(0, 1, "x".repeat(34), Style::default().fg(Color::Red));
                        let mut want = under.clone();
                        t.pane(title).render(area, &mut want);
                        let mut term = Terminal::new(TestBackend::new(34, 9)).unwrap();
                        let mut inner = Rect::default();
                        let frame = term
                            .draw(|f| {
                                *f.buffer_mut() = under.clone();
                                inner = t.render_pane(title, area, f);
                            })
                            .unwrap();
                        assert_eq!(*frame.buffer, want, "{title:?} {w}x{h}");
                        assert_eq!(inner, t.pane(title).inner(area));
                    }
                }
            }
        }
    }

    #[test]
    fn no_color_wins_then_colorterm_then_term() {
        assert_eq!(
            Colors::detect(Some("1"), Some("truecolor"), Some("xterm-256color")),
            Colors::None
        );
        assert_eq!(
            Colors::detect(Some(""), Some("truecolor"), None),
            Colors::TrueColor
        );
        assert_eq!(
            Colors::detect(None, None, Some("screen-256color")),
            Colors::Ansi256
        );
        assert_eq!(Colors::detect(None, None, Some("xterm")), Colors::Ansi16);
        assert_eq!(Colors::detect(None, None, Some("dumb")), Colors::None);
        assert_eq!(Colors::None.burst(), Style::default());
    }

    #[test]
    fn sparks_scale_and_never_hide_a_burst() {
        assert_eq!(spark(0, 10, false), ' ');
        assert_eq!(spark(10, 10, false), '\u{2588}');
        assert_eq!(spark(99, 10, true), '@');
        assert_eq!(spark(1, 1_000_000, true), '.');
        assert_eq!(sparkline(&[0, 5, 10], 10, true), " ~@");
        assert!(sparkline(&[1, 2, 3], 3, true).is_ascii());
    }
}
