//! The terminal guard: raw mode and the alternate screen on entry; restored on drop, on panic,
//! and (through the quit message the signal thread sends) on SIGINT, SIGTERM and SIGHUP.

use std::io::{Stdout, Write, stdout};
use std::sync::Once;

use crossterm::{
    cursor, execute,
    terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode},
};
use ratatui::{Terminal, backend::CrosstermBackend};

pub type Term = Terminal<CrosstermBackend<Stdout>>;

/// Owns the terminal while the screen is up.
pub struct Tui {
    pub terminal: Term,
}

static HOOK: Once = Once::new();

/// Put the terminal back as we found it. Safe to call more than once; errors are ignored
/// because the terminal may already be gone (a dropped ssh connection).
pub fn restore() {
    let _ = disable_raw_mode();
    let mut out = stdout();
    let _ = execute!(out, LeaveAlternateScreen, cursor::Show);
    let _ = out.flush();
}

impl Tui {
    pub fn enter() -> std::io::Result<Self> {
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
        let mut out = stdout();
        if let Err(e) = execute!(out, EnterAlternateScreen, cursor::Hide) {
            restore();
            return Err(e);
        }
        let terminal = match Terminal::new(CrosstermBackend::new(out)) {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(e);
            }
        };
        Ok(Self { terminal })
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        restore();
    }
}
