//! The App's side of a replay: the playback state the timeline shows, the keys that steer it
//! (turned into [`ReplayCmd`]s for the replay thread, `source::replay`), and folding in what
//! that thread sends back.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::{App, Effect};
use crate::source::replay::{Apply, ReplayCmd, ReplayStatus, ReplayUpdate};
use crate::time::TimeSpec;

/// The UI side of a replay: what the timeline shows and the keys that steer it.
#[derive(Clone, Debug, Default)]
pub struct ReplayControl {
    pub status: ReplayStatus,
    /// The "go to" prompt, while it is open: what was typed.
    pub prompt: Option<String>,
    /// Why the last "go to" was not understood.
    pub prompt_error: Option<String>,
}

/// The keys, for the help line and the README.
pub const KEYS: &str = "space pause  ./, step  \u{2190}/\u{2192} \u{b1}10s  [/] \u{b1}1m  \
                        g go to  Home/End  </> speed";

impl ReplayControl {
    pub fn new(status: ReplayStatus) -> Self {
        Self {
            status,
            ..Default::default()
        }
    }

    /// Handle a key if it is a replay key; None leaves it to the App.
    pub fn key(&mut self, k: &KeyEvent) -> Option<Effect> {
        if let Some(p) = &mut self.prompt {
            match k.code {
                KeyCode::Esc => self.prompt = None,
                KeyCode::Backspace => {
                    p.pop();
                }
                KeyCode::Enter => {
                    let typed = p.clone();
                    self.prompt = None;
                    return Some(match typed.parse::<TimeSpec>() {
                        Ok(t) => {
                            self.prompt_error = None;
                            Effect::Replay(ReplayCmd::GoTo(t))
                        }
                        Err(e) => {
                            self.prompt_error = Some(e);
                            Effect::Redraw
                        }
                    });
                }
                KeyCode::Char(c)
                    if !k.modifiers.contains(KeyModifiers::CONTROL) && p.len() < 40 =>
                {
                    p.push(c);
                }
                KeyCode::Char(_) if !k.modifiers.contains(KeyModifiers::CONTROL) => {}
                // Ctrl-C still quits from the prompt.
                KeyCode::Char(_) => return None,
                _ => {}
            }
            return Some(Effect::Redraw);
        }
        let shift = k.modifiers.contains(KeyModifiers::SHIFT);
        let cmd = match k.code {
            KeyCode::Char(' ') => ReplayCmd::TogglePause,
            KeyCode::Char('.') => ReplayCmd::Step(1),
            KeyCode::Char(',') => ReplayCmd::Step(-1),
            KeyCode::Right if shift => ReplayCmd::Seek(60_000),
            KeyCode::Left if shift => ReplayCmd::Seek(-60_000),
            KeyCode::Right => ReplayCmd::Seek(10_000),
            KeyCode::Left => ReplayCmd::Seek(-10_000),
            KeyCode::Char(']') => ReplayCmd::Seek(60_000),
            KeyCode::Char('[') => ReplayCmd::Seek(-60_000),
            KeyCode::Home => ReplayCmd::GoTo(TimeSpec::FromStart(0)),
            KeyCode::End => ReplayCmd::GoTo(TimeSpec::FromEnd(0)),
            KeyCode::Char('>') | KeyCode::Char('+') => ReplayCmd::Faster,
            KeyCode::Char('<') | KeyCode::Char('-') => ReplayCmd::Slower,
            KeyCode::Char('g') => {
                self.prompt = Some(String::new());
                self.prompt_error = None;
                return Some(Effect::Redraw);
            }
            _ => return None,
        };
        Some(Effect::Replay(cmd))
    }
}

impl App {
    /// Fold an update from the replay thread in.
    pub fn on_replay(&mut self, u: ReplayUpdate) -> Effect {
        if let Some(c) = &mut self.replay {
            c.status = u.status;
        }
        match u.apply {
            Apply::None => {}
            Apply::Batch(b) => self.model.ingest_owned(*b),
            Apply::Reset(m) => self.model = *m,
        }
        Effect::Redraw
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::app::Msg;
    use crate::model::Model;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn app_routes_replay_keys_and_updates() {
        use crossterm::event::Event;
        let mut app = App::new(20, Duration::from_millis(50));
        app.replay = Some(ReplayControl::default());
        let k = |c| Msg::Input(Event::Key(key(c)));
        assert_eq!(
            app.update(k(KeyCode::Char(' '))),
            Effect::Replay(ReplayCmd::TogglePause)
        );
        assert!(!app.paused, "space pauses the playback, not the screen");
        assert_eq!(
            app.update(k(KeyCode::Char('+'))),
            Effect::Replay(ReplayCmd::Faster)
        );
        assert_eq!(app.update(k(KeyCode::Char('q'))), Effect::Quit);
        let b = crate::batch::build::plausible(7, 3);
        let status = ReplayStatus {
            shown: Some(6),
            len: 10,
            ..Default::default()
        };
        let e = app.update(Msg::Replay(Box::new(ReplayUpdate {
            status: status.clone(),
            apply: Apply::Batch(Box::new(b.clone())),
        })));
        assert_eq!(e, Effect::Redraw);
        assert_eq!(app.model.latest(), Some(&b));
        assert_eq!(app.replay.as_ref().unwrap().status, status);
        app.update(Msg::Replay(Box::new(ReplayUpdate {
            status,
            apply: Apply::Reset(Box::new(Model::new())),
        })));
        assert!(app.model.latest().is_none());
    }

    #[test]
    fn keys_map_to_commands_and_the_prompt_takes_a_time() {
        let mut c = ReplayControl::default();
        let cmd = |c: &mut ReplayControl, k: KeyEvent| c.key(&k);
        assert_eq!(
            cmd(&mut c, key(KeyCode::Char(' '))),
            Some(Effect::Replay(ReplayCmd::TogglePause))
        );
        assert_eq!(
            cmd(&mut c, key(KeyCode::Left)),
            Some(Effect::Replay(ReplayCmd::Seek(-10_000)))
        );
        assert_eq!(
            cmd(&mut c, KeyEvent::new(KeyCode::Right, KeyModifiers::SHIFT)),
            Some(Effect::Replay(ReplayCmd::Seek(60_000)))
        );
        // Not ours: selection and quit stay with the App.
        assert_eq!(cmd(&mut c, key(KeyCode::Char('q'))), None);
        assert_eq!(cmd(&mut c, key(KeyCode::Down)), None);
        // The prompt swallows keys until Enter.
        assert_eq!(cmd(&mut c, key(KeyCode::Char('g'))), Some(Effect::Redraw));
        for ch in "+90q".chars() {
            assert_eq!(cmd(&mut c, key(KeyCode::Char(ch))), Some(Effect::Redraw));
        }
        cmd(&mut c, key(KeyCode::Backspace));
        assert_eq!(
            cmd(&mut c, key(KeyCode::Enter)),
            Some(Effect::Replay(ReplayCmd::GoTo(TimeSpec::FromStart(90_000))))
        );
        assert!(c.prompt.is_none());
        cmd(&mut c, key(KeyCode::Char('g')));
        cmd(&mut c, key(KeyCode::Char('x')));
        assert_eq!(cmd(&mut c, key(KeyCode::Enter)), Some(Effect::Redraw));
        assert!(c.prompt_error.is_some());
    }
}
