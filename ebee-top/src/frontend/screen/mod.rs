//! The interactive screen, whatever feeds it. [`Screen`] is the loop: each message (an
//! interval, a key, a resize, a signal, news from the recorder, host or replay thread) is folded
//! into the `App`; the frame is redrawn only when `update` says something changed; effects
//! other than redraw and quit go to the caller. It is generic over ratatui's `Backend` and takes
//! what it reads from the world as [`Inputs`] (the clock, a process's details) and everything
//! else as messages, so whole key flows run in tests on a `TestBackend`, without root or a
//! terminal. [`run`] puts it on the real terminal.

pub mod terminal;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::mpsc::{Receiver, Sender};

use anyhow::Context as _;
use ratatui::buffer::Buffer;
use ratatui::{Terminal, backend::Backend};

use super::config::Saver;
use super::latency::Latency;
use crate::app::{App, Effect, Msg};
use crate::model::procs::ProcKey;
use crate::os::details::Details;
use crate::view::theme::Theme;

/// What the screen loop reads from the world besides its messages.
pub struct Inputs {
    /// `CLOCK_MONOTONIC` now, ns: when an interval's Batch arrived and its frame was drawn.
    pub clock: Box<dyn FnMut() -> u64>,
    /// A process's details for the popup, read when it opens (never while drawing).
    pub details: Box<dyn FnMut(ProcKey) -> Details>,
    /// Save the settings after a change in the setup screen (F2); the error is one line.
    pub save: Saver,
}

impl Inputs {
    /// The machine ebee-top runs on: its clock and its /proc.
    pub fn live() -> Self {
        Self {
            clock: Box::new(crate::time::monotonic_ns),
            details: Box::new(|k| crate::os::details::details(k.pid, k.start_ticks)),
            save: no_save(),
        }
    }

    /// A recording: this machine's /proc says nothing about a recorded process.
    pub fn recording() -> Self {
        Self {
            clock: Box::new(crate::time::monotonic_ns),
            details: Box::new(|k| Details {
                pid: k.pid,
                note: Some("from a recording: only what was recorded is known".into()),
                ..Default::default()
            }),
            save: no_save(),
        }
    }

    /// Save the settings with `save` (the settings file's saver).
    pub fn saving(mut self, save: Saver) -> Self {
        self.save = save;
        self
    }
}

/// The cells of `next` to send to a terminal showing `prev` (indexes into both, same area),
/// into `out`: ratatui's `Buffer::diff`, the same cells in the same order. That only asks
/// whether a symbol is wider than one column, and how wide if so: a single character known
/// narrow (see [`narrow`]; nearly every cell: text, borders, bars) is taken as 1 without a
/// Unicode table lookup (a width of 0 or 1 gives the same cells).
pub(super) fn changed_cells(prev: &Buffer, next: &Buffer, out: &mut Vec<usize>) {
    fn width(symbol: &str) -> usize {
        // One byte is one ASCII character: narrow (the common case, without decoding).
        if symbol.len() == 1 {
            return 1;
        }
        let mut chars = symbol.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) if narrow(c) => 1,
            _ => ratatui::text::Span::raw(symbol).width(),
        }
    }
    out.clear();
    // Cells invalidated by drawing or replacing a preceding wide character, and cells of
    // `next` to skip because a preceding wide character covers them.
    let (mut invalidated, mut to_skip) = (0usize, 0usize);
    for (i, (cur, old)) in next.content.iter().zip(&prev.content).enumerate() {
        let same = same_cell(cur, old);
        if !cur.skip && (!same || invalidated > 0) && to_skip == 0 {
            out.push(i);
        }
        // An unchanged cell (most of them) has one symbol to measure.
        let w_cur = width(cur.symbol());
        let w_old = if same { w_cur } else { width(old.symbol()) };
        to_skip = w_cur.saturating_sub(1);
        invalidated = w_cur.max(w_old).max(invalidated).saturating_sub(1);
    }
}

/// `a == b` for two cells, cheaper: a symbol of one byte (nearly every cell) is compared as
/// that byte rather than through `memcmp`, and the fields without the `Option`s of the style
/// they make (a test checks it against `==`).
#[inline]
pub(super) fn same_cell(a: &ratatui::buffer::Cell, b: &ratatui::buffer::Cell) -> bool {
    let (x, y) = (a.symbol().as_bytes(), b.symbol().as_bytes());
    let symbol = match (x, y) {
        ([p], [q]) => p == q,
        _ => x == y,
    };
    symbol
        & (a.fg == b.fg)
        & (a.bg == b.bg)
        & (a.underline_color == b.underline_color)
        & (a.modifier == b.modifier)
        & (a.skip == b.skip)
}

/// Characters no wider than one column alone (a test checks each against ratatui's width):
/// below U+1100 (where the first wide characters are), box drawing, block elements and
/// braille (the screen's borders, bars and graphs).
pub(super) fn narrow(c: char) -> bool {
    c < '\u{1100}'
        || ('\u{2500}'..='\u{259f}').contains(&c)
        || ('\u{2800}'..='\u{28ff}').contains(&c)
}

fn no_save() -> Saver {
    Box::new(|_| Err("not saved: no settings file".into()))
}

/// The App on a terminal.
pub struct Screen<B: Backend> {
    terminal: Terminal<B>,
    /// What the terminal shows: the last frame drawn (see [`Screen::draw`]).
    shown: Buffer,
    /// The cells of the frame being drawn that differ from `shown` (indexes), kept between
    /// frames.
    changed: Vec<usize>,
    app: App,
    theme: Theme,
    inputs: Inputs,
    /// How late each interval's frame was, from the kernel closing it.
    latency: Latency,
    /// The interval the source was last told (the setup screen changes `App::interval`).
    interval: std::time::Duration,
    /// Intervals still to draw before the screen closes (`-n`, as top's); None: no end.
    intervals_left: Option<u64>,
}

impl<B: Backend> Screen<B> {
    /// The App sized to the terminal, nothing drawn yet.
    pub fn new(terminal: Terminal<B>, mut app: App, theme: Theme, inputs: Inputs) -> Self {
        if let Ok(size) = terminal.size() {
            app.screen = (size.width, size.height);
        }
        let interval = app.interval;
        Self {
            terminal,
            shown: Buffer::empty(ratatui::layout::Rect::ZERO),
            changed: Vec::new(),
            app,
            theme,
            inputs,
            latency: Latency::new(),
            interval,
            intervals_left: None,
        }
    }

    /// Close after `n` intervals' frames (`-n`, as top's): the same intervals in a script or
    /// a benchmark, however fast they come.
    pub fn stop_after(&mut self, n: Option<u64>) {
        self.intervals_left = n;
    }

    pub fn app(&self) -> &App {
        &self.app
    }

    pub fn backend(&self) -> &B {
        self.terminal.backend()
    }

    /// Draw the App as it is (only the cells that changed reach the terminal).
    ///
    /// What ratatui's `Terminal::draw` does, step by step, but with the frame compared with the
    /// last one by [`changed_cells`]: ratatui's own comparison measured the Unicode width of
    /// every cell's symbol three times, a quarter of the screen's instructions.
    pub fn draw(&mut self) -> anyhow::Result<()> {
        let (app, theme) = (&self.app, &self.theme);
        // A new size clears the terminal (and ratatui's buffers).
        self.terminal.autoresize().context("drawing")?;
        // The buffer drawn into holds the frame before last (swapped below): start blank, as
        // ratatui's swap_buffers leaves it.
        self.terminal.current_buffer_mut().reset();
        let mut frame = self.terminal.get_frame();
        crate::view::render(app, theme, &mut frame);
        let next = self.terminal.current_buffer_mut();
        if self.shown.area != next.area {
            // The first frame, or the terminal was resized and cleared: nothing is shown.
            self.shown = Buffer::empty(next.area);
        }
        changed_cells(&self.shown, next, &mut self.changed);
        std::mem::swap(&mut self.shown, next);
        let shown = &self.shown;
        let updates = self.changed.iter().map(|&i| {
            let (x, y) = shown.pos_of(i);
            (x, y, &shown.content[i])
        });
        let backend = self.terminal.backend_mut();
        backend.draw(updates).context("drawing")?;
        self.terminal.hide_cursor().context("drawing")?;
        self.terminal.backend_mut().flush().context("drawing")?;
        Ok(())
    }

    /// Fold one message in and redraw if it changed something. Effects other than redraw and
    /// quit go to `on_effect`. False when the screen is to close.
    pub fn step(&mut self, msg: Msg, on_effect: &mut impl FnMut(Effect)) -> anyhow::Result<bool> {
        let interval_end = match &msg {
            Msg::Batch(b) => {
                self.latency.drained(b.end_ns, (self.inputs.clock)());
                Some(b.end_ns)
            }
            _ => None,
        };
        // The mouse, placed by the layout the frame is drawn with.
        let msg = match msg {
            Msg::Input(crossterm::event::Event::Mouse(m)) => {
                let (w, h) = self.app.screen;
                match crate::view::pointer(&self.app, ratatui::layout::Rect::new(0, 0, w, h), m) {
                    Some(p) => Msg::Pointer(p),
                    None => return Ok(true),
                }
            }
            other => other,
        };
        match self.app.update(msg) {
            Effect::None => return Ok(true),
            Effect::Quit => return Ok(false),
            Effect::Redraw => {}
            Effect::Details(k) => {
                // Read now, on opening: one small read, never while drawing.
                let d = (self.inputs.details)(k);
                self.app.update(Msg::Details(Box::new(d)));
            }
            Effect::SaveSettings => {
                self.theme = super::theme_for(self.app.color, self.theme.ascii);
                if let Err(e) = (self.inputs.save)(&self.app.settings) {
                    self.app.status = Some(e);
                }
                if self.app.interval != self.interval {
                    self.interval = self.app.interval;
                    on_effect(Effect::SetInterval(self.interval));
                }
            }
            other => on_effect(other),
        }
        self.draw()?;
        if let Some(end) = interval_end {
            // `draw` has flushed the changed cells to the terminal.
            self.latency.shown(end, (self.inputs.clock)());
            if let Some(left) = &mut self.intervals_left {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Draw, then fold messages in until the App quits or every sender is gone.
    pub fn run(
        &mut self,
        rx: &Receiver<Msg>,
        mut on_effect: impl FnMut(Effect),
    ) -> anyhow::Result<()> {
        self.draw()?;
        while let Ok(msg) = rx.recv() {
            if !self.step(msg, &mut on_effect)? {
                break;
            }
        }
        Ok(())
    }
}

/// Run the screen on the real terminal: signals and input become messages on `tx`, the
/// terminal is restored before this returns, and with `latency_report` (live only: replayed
/// intervals ended long ago) how late each interval's frame was is written there on the way
/// out. With `mouse`, clicks and the wheel reach the App. With `iterations`, it closes after
/// that many intervals (`-n`). The App's error, if it quit on one, is the result.
#[allow(clippy::too_many_arguments)]
pub fn run(
    app: App,
    theme: Theme,
    inputs: Inputs,
    (tx, rx): (Sender<Msg>, Receiver<Msg>),
    latency_report: Option<&Path>,
    mouse: bool,
    iterations: Option<u64>,
    on_effect: impl FnMut(Effect),
) -> anyhow::Result<()> {
    terminal::spawn_signals(tx.clone())?;
    let (guard, term) = terminal::Guard::enter(mouse).context("setting up the terminal")?;
    terminal::spawn_input(tx)?;
    let mut screen = Screen::new(term, app, theme, inputs);
    screen.stop_after(iterations);
    let r = screen.run(&rx, on_effect);
    drop(guard);
    r?;
    if let Some(path) = latency_report {
        screen.latency.write_report(path)?;
    }
    match screen.app.error {
        Some(e) => Err(anyhow::anyhow!(e)),
        None => Ok(()),
    }
}
