//! What is drawn over the panes: the help screen and a process's details.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::Line,
    widgets::{Block, Borders, Clear, Paragraph, Wrap},
};

use crate::app::{App, SignalMenu};
use crate::model::procs::ProcKey;
use crate::os::details::Details;
use crate::view::theme::Theme;
use crate::view::theme::border_set;

/// The keys, as the help screen lists them (the README's table says the same).
pub const HELP: &[(&str, &str)] = &[
    ("q, F10, ^C", "quit"),
    ("Up/Down, j/k", "move the selection (PgUp/PgDn, Home/End)"),
    (
        "P / M / W",
        "sort by CPU / resident memory / run-queue wait (WAIT%)",
    ),
    ("I / N", "sort by disk I/O / network bytes (per second)"),
    ("S", "SERVERS table, or processes (R/L: sort by req/s, p99)"),
    ("C", "cgroups table, or processes (Enter: its processes)"),
    (
        "H",
        "threads instead of processes (pins and filters by process)",
    ),
    (
        "p",
        "pin/unpin the selected process (syscall and request QoS)",
    ),
    ("/, F3, F4", "filter by name, cgroup or pid; Esc clears"),
    (
        "t, F5",
        "tree: processes under their parents; Left/Right fold",
    ),
    ("F9, K", "send a signal (TERM, KILL, ...) to the process"),
    ("F7 / F8", "nicer / less nice: nice -1 / +1 on every thread"),
    (
        "T / U",
        "tag the process for F7/F8/F9 and go down / untag all",
    ),
    ("u", "only one user's processes (a list of those present)"),
    ("space", "pause the screen (collection and recording go on)"),
    ("+ / -", "longer / shorter interval (10 ms to 10 s)"),
    (
        "Tab / Enter",
        "focus: table or QoS pane / details of the process",
    ),
    (
        "F2",
        "setup: columns, sort, interval, colours, tree (saved)",
    ),
    ("mouse", "click a row or a header (sorts); the wheel moves"),
    ("h, ?, F1", "this help; any key closes it"),
];

fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    let [_, mid, _] = Layout::vertical([
        Constraint::Fill(1),
        Constraint::Length(h),
        Constraint::Fill(1),
    ])
    .areas(area);
    let [_, c, _] = Layout::horizontal([
        Constraint::Fill(1),
        Constraint::Length(w),
        Constraint::Fill(1),
    ])
    .areas(mid);
    c
}

fn block(t: &Theme, title: &str) -> Block<'static> {
    Block::default()
        .borders(Borders::ALL)
        .border_set(border_set(t.ascii))
        .border_style(t.colors.border())
        .title(Line::styled(format!(" {title} "), t.colors.title()))
}

pub fn help(app: &App, t: &Theme, f: &mut Frame, area: Rect) {
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(k, v)| Line::from(format!("{k:<14} {v}")))
        .collect();
    if app.replay.is_some() {
        lines.push(Line::from(""));
        let keys = if t.ascii {
            super::timeline::asciify(crate::app::REPLAY_KEYS)
        } else {
            crate::app::REPLAY_KEYS.to_string()
        };
        lines.push(Line::from(format!("replay: {keys}")));
    }
    let r = centered(area, 76, lines.len() as u16 + 2);
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .block(block(t, "keys"))
            .wrap(Wrap { trim: false }),
        r,
    );
}

pub fn details(app: &App, t: &Theme, key: ProcKey, d: Option<&Details>, f: &mut Frame, area: Rect) {
    let m = app.shown();
    let e = m.table.get(&key);
    let mut lines = Vec::new();
    let known_cmd = e.map(|e| e.command()).unwrap_or_default();
    match d {
        None => lines.push(Line::from("reading /proc...")),
        Some(d) => {
            let cmd = if d.cmdline.is_empty() {
                known_cmd
            } else {
                d.cmdline.clone()
            };
            lines.push(Line::from(format!("command  {cmd}")));
            if let Some(n) = &d.note {
                lines.push(Line::styled(n.clone(), t.colors.warn()));
            } else {
                lines.push(Line::from(format!(
                    "name     {}  state {}",
                    d.comm, d.state
                )));
                lines.push(Line::from(format!("user     {}", d.user)));
                if let Some(t) = d.threads {
                    lines.push(Line::from(format!("threads  {t}")));
                }
                if let Some(s) = d.start_s {
                    let up = app.host.as_ref().map(|h| h.uptime_s as f64);
                    lines.push(Line::from(match up {
                        Some(up) if up >= s => format!(
                            "started  {s:.1} s after boot ({} ago)",
                            super::fmt_ns(((up - s) * 1e9) as u64)
                        ),
                        _ => format!("started  {s:.1} s after boot"),
                    }));
                }
                // The hierarchy ebee-top follows, whole; else what /proc says.
                let cg = match e.filter(|e| !e.cgroup.is_empty()) {
                    Some(e) => format!("{} ({})", e.cgroup, m.cgroups.hierarchy),
                    None => d.cgroup.clone(),
                };
                lines.push(Line::from(format!("cgroup   {cg}")));
            }
        }
    }
    if let Some(e) = e {
        lines.push(Line::from(format!(
            "on-CPU   {} since seen, {:.1}% over the last second{}",
            super::fmt_ns(e.total_ns),
            e.cpu_pct,
            if e.exited() { " (exited)" } else { "" }
        )));
        if m.wait.available {
            lines.push(Line::from(format!(
                "waiting  {:.1}% of the last second runnable but not on a CPU (all threads)",
                e.wait_pct
            )));
        }
        if let Some(c) = m.wait.culprits_of(key.pid).filter(|c| c.total_ns() > 0) {
            lines.push(Line::from(format!(
                "behind   {}",
                culprits_line(m, key.pid, &c)
            )));
        }
        if m.wait.offcpu_available && e.caused_pct > 0.0 {
            lines.push(Line::from(format!(
                "holding  others waiting {:.1}% of the last second (ran on their CPU meanwhile)",
                e.caused_pct
            )));
        }
        if m.wait.offcpu_available {
            // One bar for the last second and one for the minute kept (all threads summed).
            let (sec, min) = super::split::last_second_and_minute(e, m.table.now_cell());
            let w = usize::from(area.width.saturating_sub(24)).clamp(10, 60);
            for (label, parts) in [("time 1s  ", sec), ("time 60s ", min)] {
                let mut spans = vec![ratatui::text::Span::raw(label)];
                spans.extend(super::split::bar(parts, w, t));
                lines.push(Line::from(spans));
            }
            lines.push(Line::from(format!(
                "         {}",
                super::split::legend(sec, t)
            )));
            lines.push(Line::from(format!(
                "         over 60 s: {}",
                super::split::legend(min, t)
            )));
        }
        if m.wait.io_available {
            lines.push(Line::from(format!(
                "disk     {}/s read, {}/s written over the last second",
                super::cpu_table::bytes(e.read_per_s as u64),
                super::cpu_table::bytes(e.write_per_s as u64)
            )));
        }
    }
    lines.push(Line::from(""));
    lines.push(Line::from("any key closes"));
    let w = area.width.saturating_sub(4).min(120);
    let r = centered(area, w, (lines.len() as u16 + 4).min(area.height));
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .block(block(t, &format!("pid {}", key.pid)))
            .wrap(Wrap { trim: false }),
        r,
    );
}

/// Who a process waited behind over the last second, as shares of its wait: the three
/// heaviest culprits by name, then wakeup latency and what no slice explains ("waits behind:
/// ffmpeg 61%, rustc 27%, wakeup latency 9%, unattributed 3%").
pub fn culprits_line(
    m: &crate::model::Model,
    pid: u32,
    c: &crate::model::wait::Culprits,
) -> String {
    let total = c.total_ns().max(1) as f64;
    let pct = |ns: u64| ns as f64 * 100.0 / total;
    let mut parts: Vec<String> =
        c.by.iter()
            .take(3)
            .map(|&(who, ns)| {
                let name = if who == pid {
                    "its own threads".to_owned()
                } else {
                    m.proc_info(who)
                        .map(|p| p.comm.to_string())
                        .filter(|n| !n.is_empty())
                        .unwrap_or_else(|| format!("pid {who}"))
                };
                format!("{name} {:.0}%", pct(ns))
            })
            .collect();
    let rest: u64 = c.by.iter().skip(3).map(|x| x.1).sum();
    if rest > 0 {
        parts.push(format!("others {:.0}%", pct(rest)));
    }
    if c.wakeup_ns > 0 {
        parts.push(format!("wakeup latency {:.0}%", pct(c.wakeup_ns)));
    }
    if c.unattributed_ns > 0 {
        parts.push(format!("unattributed {:.0}%", pct(c.unattributed_ns)));
    }
    format!("waits behind: {}", parts.join(", "))
}

/// The signal menu (F9): the signals, the one under the cursor marked, then the question that
/// names every target by pid and command before anything is sent.
pub fn signal_menu(app: &App, t: &Theme, menu: &SignalMenu, f: &mut Frame, area: Rect) {
    use crate::os::act::SIGNALS;
    let sel = menu.cursor.min(SIGNALS.len() - 1);
    let (num, name) = SIGNALS[sel];
    let who = match menu.targets.as_slice() {
        [(k, cmd)] => match app.shown().table.get(k).map(|e| e.comm.as_ref()) {
            Some(comm) if !comm.is_empty() => format!("{} ({comm})", k.pid),
            _ => format!("{} {cmd}", k.pid),
        },
        many => format!("{} processes", many.len()),
    };
    let mut lines: Vec<Line> = Vec::new();
    if menu.confirm {
        lines.push(Line::styled(
            format!("send SIG{name} ({num}) to {who}?"),
            t.colors.warn(),
        ));
        for (k, cmd) in menu
            .targets
            .iter()
            .take(usize::from(area.height.saturating_sub(8)))
        {
            lines.push(Line::from(format!("  {:>7}  {cmd}", k.pid)));
        }
        lines.push(Line::from(""));
        lines.push(Line::from("y or Enter: send   any other key: back"));
    } else {
        // A window of the list around the cursor, as tall as the screen allows.
        let room = usize::from(area.height.saturating_sub(6)).clamp(3, SIGNALS.len());
        let first = sel.saturating_sub(room / 2).min(SIGNALS.len() - room);
        for (i, (n, s)) in SIGNALS.iter().enumerate().skip(first).take(room) {
            let text = format!("{} {n:>2} {s}", if i == sel { ">" } else { " " });
            lines.push(if i == sel {
                Line::styled(text, t.colors.selected())
            } else {
                Line::from(text)
            });
        }
        lines.push(Line::from(""));
        lines.push(Line::from(if menu.typed.is_empty() {
            "Up/Down or a number, Enter, Esc".to_string()
        } else {
            format!("number: {}", menu.typed)
        }));
    }
    let w = area.width.saturating_sub(4).min(72);
    let r = centered(area, w, (lines.len() as u16 + 2).min(area.height));
    f.render_widget(Clear, r);
    let title = format!("signal to {who}");
    let title: String = title
        .chars()
        .take(usize::from(w.saturating_sub(6)))
        .collect();
    f.render_widget(
        Paragraph::new(lines)
            .block(block(t, &title))
            .wrap(Wrap { trim: false }),
        r,
    );
}

/// The user picker (`u`): every user with a process in the table, the one shown marked.
pub fn users(app: &App, t: &Theme, cursor: usize, f: &mut Frame, area: Rect) {
    let choices = app.user_choices();
    let sel = cursor.min(choices.len().saturating_sub(1));
    let room = usize::from(area.height.saturating_sub(5)).max(1);
    let first = sel.saturating_sub(room.saturating_sub(1));
    let mut lines: Vec<Line> = choices
        .iter()
        .enumerate()
        .skip(first)
        .take(room)
        .map(|(i, (uid, name))| {
            let id = uid.map_or(String::new(), |u| format!(" ({u})"));
            let now = if *uid == app.user { " *" } else { "" };
            let text = format!("{} {name}{id}{now}", if i == sel { ">" } else { " " });
            if i == sel {
                Line::styled(text, t.colors.selected())
            } else {
                Line::from(text)
            }
        })
        .collect();
    lines.push(Line::from("Enter: only this user   Esc: every user"));
    let w = area.width.saturating_sub(4).min(50);
    let r = centered(area, w, (lines.len() as u16 + 2).min(area.height));
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .block(block(t, "user"))
            .wrap(Wrap { trim: false }),
        r,
    );
}

#[cfg(test)]
mod culprit_tests {
    use crate::model::Model;
    use crate::model::wait::Culprits;

    #[test]
    fn the_culprits_line_gives_shares_of_the_wait() {
        let c = Culprits {
            by: vec![(30, 610), (10, 200), (40, 70), (50, 20)],
            wakeup_ns: 70,
            unattributed_ns: 30,
        };
        assert_eq!(
            super::culprits_line(&Model::default(), 10, &c),
            "waits behind: pid 30 61%, its own threads 20%, pid 40 7%, others 2%, \
             wakeup latency 7%, unattributed 3%"
        );
    }
}
