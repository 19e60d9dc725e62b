//! The bottom lines: the replay timeline (position, speed, the file's span and damage, the
//! keys or the "go to" prompt), or the recording status while recording live.

use ratatui::{
    Frame,
    layout::Rect,
    style::{Modifier, Style},
    text::{Line, Span},
};

use crate::app::App;
use crate::app::{REPLAY_KEYS as KEYS, ReplayControl};
use crate::time::{fmt_span, fmt_wall};
use crate::view::theme::Theme;

/// Lines this region needs.
pub fn height(app: &App) -> u16 {
    if app.replay.is_some() {
        2
    } else if app.recording.is_some() {
        1
    } else {
        0
    }
}

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    if area.height == 0 {
        return;
    }
    if let Some(r) = &app.replay {
        let mut l = lines(r, area.width);
        if t.ascii {
            for line in &mut l {
                for span in &mut line.spans {
                    span.content = asciify(&span.content).into();
                }
            }
        }
        super::plain_table::paragraph(l, area, f);
    } else if let Some(s) = &app.recording {
        let style = if s.stopped.is_some() {
            Style::default().add_modifier(Modifier::BOLD)
        } else {
            Style::default()
        };
        super::plain_table::paragraph(vec![Line::styled(s.line(), style)], area, f);
    }
}

/// The timeline's symbols in ASCII, for `--ascii` (same widths for the bar's cells).
pub fn asciify(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\u{23f8}' => out.push_str("||"),
            '\u{25a0}' => out.push_str("[]"),
            '\u{25b6}' => out.push('>'),
            '\u{2501}' => out.push('='),
            '\u{25cf}' => out.push('O'),
            '\u{2500}' => out.push('-'),
            '\u{2192}' => out.push_str("->"),
            '\u{2190}' => out.push_str("<-"),
            '\u{b1}' => out.push_str("+-"),
            '\u{2588}' => out.push('_'),
            '\u{26a0}' => out.push('!'),
            c if c.is_ascii() => out.push(c),
            _ => out.push('?'),
        }
    }
    out
}

/// A bar `width` cells wide with a marker at `pos` of `len`.
fn bar(pos: usize, len: usize, width: usize) -> String {
    if width == 0 {
        return String::new();
    }
    let at = if len <= 1 {
        0
    } else {
        (pos * (width - 1)) / (len - 1)
    };
    (0..width)
        .map(|i| match i.cmp(&at) {
            std::cmp::Ordering::Less => '\u{2501}',
            std::cmp::Ordering::Equal => '\u{25cf}',
            std::cmp::Ordering::Greater => '\u{2500}',
        })
        .collect()
}

fn lines(r: &ReplayControl, width: u16) -> Vec<Line<'static>> {
    let s = &r.status;
    let state = if s.paused {
        "\u{23f8} paused"
    } else if s.at_end {
        "\u{25a0} end"
    } else {
        "\u{25b6} playing"
    };
    let pos = s.shown.map_or(0, |i| i + 1);
    let left = format!(
        "{state} {}x  {}  #{pos}/{}  ",
        s.speed,
        fmt_wall(s.t_ms),
        s.len
    );
    // A folder of recordings can span days: then the ends carry their dates.
    let days = s.first_ms / 86_400_000 != s.last_ms / 86_400_000;
    let end = |t: u64| {
        if days {
            let (_, m, d) = crate::time::civil_date(t / 86_400_000);
            format!("{m:02}-{d:02} {}", &fmt_wall(t)[..8])
        } else {
            fmt_wall(t)
        }
    };
    let right = format!("  {} \u{2192} {} UTC", end(s.first_ms), end(s.last_ms));
    let room = (width as usize).saturating_sub(left.chars().count() + right.chars().count());
    let first = Line::from(vec![
        Span::styled(left, Style::default().add_modifier(Modifier::BOLD)),
        Span::raw(bar(s.shown.unwrap_or(0), s.len, room.min(60))),
        Span::raw(right),
    ]);
    let second = if let Some(p) = &r.prompt {
        Line::from(format!(
            "go to (HH:MM UTC, HH:MM local, YYYY-MM-DD HH:MM, +DUR, -DUR): {p}\u{2588}   \
             Enter go, Esc cancel"
        ))
    } else if let Some(e) = &r.prompt_error {
        Line::styled(e.clone(), Style::default().add_modifier(Modifier::BOLD))
    } else if s.gap_ms > 0 {
        Line::styled(
            format!(
                "\u{26a0} gap: nothing was recorded for {} before this interval (ebee-top was \
                 not running)",
                fmt_span(s.gap_ms)
            ),
            Style::default().add_modifier(Modifier::BOLD),
        )
    } else if !s.damage.is_empty() || s.skipped > 0 {
        let mut t = s.damage.clone();
        if s.skipped > 0 {
            t.push_str(&format!("  ({} intervals could not be decoded)", s.skipped));
        }
        Line::styled(
            format!("\u{26a0} {}", t.trim()),
            Style::default().add_modifier(Modifier::BOLD),
        )
    } else {
        let mut what = s.file.clone();
        if s.files > 1 {
            what.push_str(&format!(" ({} files", s.files));
            if s.gaps > 0 {
                what.push_str(&format!(
                    ", {} gaps of {} in all",
                    s.gaps,
                    fmt_span(s.gaps_ms)
                ));
            }
            what.push(')');
        }
        Line::from(format!("{what}  {KEYS}"))
    };
    vec![first, second]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::replay::ReplayStatus;

    #[test]
    fn ascii_timeline_is_ascii() {
        let c = ReplayControl::new(ReplayStatus {
            file: "x.ebr".into(),
            shown: Some(1),
            len: 3,
            paused: true,
            ..Default::default()
        });
        for l in lines(&c, 100) {
            assert!(asciify(&l.to_string()).is_ascii());
        }
        assert_eq!(asciify("\u{2190}/\u{2192} \u{b1}10s"), "<-/-> +-10s");
    }

    #[test]
    fn bar_marks_the_position() {
        assert_eq!(bar(0, 10, 5), "\u{25cf}\u{2500}\u{2500}\u{2500}\u{2500}");
        assert_eq!(bar(9, 10, 5), "\u{2501}\u{2501}\u{2501}\u{2501}\u{25cf}");
        assert_eq!(bar(0, 1, 3).chars().count(), 3);
        assert_eq!(bar(3, 10, 0), "");
    }

    #[test]
    fn the_timeline_shows_position_damage_and_prompt() {
        let mut c = ReplayControl::new(ReplayStatus {
            file: "x.ebr".into(),
            shown: Some(4),
            len: 10,
            t_ms: 3_723_004,
            speed: 2.0,
            paused: true,
            damage: "the file ends early".into(),
            ..Default::default()
        });
        let text = |c: &ReplayControl| {
            lines(c, 100)
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
        };
        let t = text(&c);
        assert!(t[0].contains("paused 2x  01:02:03.004  #5/10"), "{}", t[0]);
        assert!(t[1].contains("ends early"));
        c.prompt = Some("+90".into());
        assert!(text(&c)[1].contains("go to") && text(&c)[1].contains("+90"));
    }

    #[test]
    fn a_folder_shows_its_files_its_days_and_its_gaps() {
        let day = 86_400_000;
        let mut c = ReplayControl::new(ReplayStatus {
            file: "/var/lib/ebee-top".into(),
            shown: Some(4),
            len: 10,
            first_ms: 1_700_000_000_000 - day,
            t_ms: 1_700_000_000_000,
            last_ms: 1_700_000_000_000,
            files: 25,
            gaps: 2,
            gaps_ms: 1_500_000,
            ..Default::default()
        });
        let text = |c: &ReplayControl| {
            lines(c, 160)
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
        };
        let t = text(&c);
        assert!(
            t[0].contains("11-13 22:13:20 \u{2192} 11-14 22:13:20 UTC"),
            "{}",
            t[0]
        );
        assert!(
            t[1].contains("(25 files, 2 gaps of 25m 0s in all)"),
            "{}",
            t[1]
        );
        c.status.gap_ms = 1_200_000;
        assert!(
            text(&c)[1].contains("nothing was recorded for 20m 0s"),
            "{:?}",
            text(&c)
        );
    }
}
