//! The real terminal: raw mode, the alternate screen and (unless `--no-mouse`) mouse capture on
//! entry; all restored on drop, on panic, and (through the quit message the signal thread
//! sends) on SIGINT, SIGTERM and SIGHUP. The
//! threads that turn terminal input and signals into messages for the screen loop live here
//! too.

use std::io::{BufWriter, Stdout, Write, stdout};
use std::sync::Once;
use std::sync::mpsc::Sender;

use anyhow::Context as _;
use crossterm::{
    cursor,
    event::{DisableMouseCapture, EnableMouseCapture},
    execute,
    terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode},
};
use ratatui::{Terminal, backend::CrosstermBackend};

use crate::app::Msg;

/// The terminal behind a buffer as large as any frame: a frame reaches it in one write at the
/// flush that ends each draw. Stdout's own line buffer passed it on in 1 KiB pieces, five or
/// six writes a frame for the 200x50 screen.
pub type Term = Terminal<CrosstermBackend<BufWriter<Stdout>>>;

/// Holds the terminal in raw mode on the alternate screen; dropping it puts it back.
pub struct Guard(());

static HOOK: Once = Once::new();

/// Put the terminal back as we found it. Safe to call more than once; errors are ignored
/// because the terminal may already be gone (a dropped ssh connection).
pub fn restore() {
    let _ = disable_raw_mode();
    let mut out = stdout();
    // Turning capture off when it was never on is harmless, and covers every way out.
    let _ = execute!(out, DisableMouseCapture, LeaveAlternateScreen, cursor::Show);
    let _ = out.flush();
}

impl Guard {
    /// Take the terminal: raw mode, alternate screen, hidden cursor, the mouse when `mouse`,
    /// and a panic hook that restores it before printing one line.
    pub fn enter(mouse: bool) -> std::io::Result<(Self, Term)> {
        HOOK.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                // One line, no backtrace unless asked for.
                if std::env::var_os("RUST_BACKTRACE").is_some() {
                    default(info);
                } else {
                    eprintln!("ebee-top: internal error: {info}");
                }
            }));
        });
        enable_raw_mode()?;
        let guard = Self(());
        let mut out = stdout();
        // From here on, an error drops the guard, which restores the terminal.
        execute!(out, EnterAlternateScreen, cursor::Hide)?;
        if mouse {
            execute!(out, EnableMouseCapture)?;
        }
        let terminal = Terminal::new(CrosstermBackend::new(BufWriter::with_capacity(
            1 << 16,
            out,
        )))?;
        Ok((guard, terminal))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// Terminal input (keys, resizes) as messages, until the terminal goes away, which is then
/// reported as SIGHUP would be.
pub fn spawn_input(tx: Sender<Msg>) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("input".into())
        .spawn(move || {
            while let Ok(ev) = crossterm::event::read() {
                if tx.send(Msg::Input(ev)).is_err() {
                    return;
                }
            }
            // The terminal is gone (hang-up): leave like SIGHUP would.
            let _ = tx.send(Msg::Signal(signal_hook::consts::SIGHUP));
        })
        .context("starting the input thread")?;
    Ok(())
}

/// SIGINT, SIGTERM and SIGHUP as a message, so the loop quits and the guard restores the
/// terminal.
pub fn spawn_signals(tx: Sender<Msg>) -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let _ = tx.send(Msg::Signal(sig));
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}
