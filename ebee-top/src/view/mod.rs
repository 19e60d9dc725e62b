//! Drawing: one file per screen region, each a function of the App and the [`Theme`]. Views
//! never do I/O and never change the App.
//!
//! Layout, by priority when space is short: the header (2 lines, and the meters: one line
//! below 24 rows, at most two fifths of the screen with the text), the CPU table, the footer
//! (status, filter or key hints; the replay timeline or the recording status), then the QoS
//! pane of the selected or pinned process (beside the table when the screen is wide, below it
//! when it is tall, a compact strip otherwise). When the left column is tall enough, the
//! memory table takes its lower third; overlays (help, details) go on top.

mod burst;
mod cgroups;
mod cpu_table;
mod footer;
mod header;
mod mem_table;
mod meters;
mod overlay;
mod plain_table;
mod qos;
mod servers;
mod setup;
mod split;
pub mod theme;
pub(crate) mod timeline;

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    widgets::Paragraph,
};

use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};

use crate::app::{App, MainView, Overlay, Pointer};
use theme::Theme;

/// The smallest terminal we draw into; below it we say so instead.
pub const MIN_WIDTH: u16 = 50;
pub const MIN_HEIGHT: u16 = 10;
/// From this width the QoS pane goes beside the table.
const WIDE: u16 = 150;
/// From this height the QoS pane gets its full height below the table.
const TALL: u16 = 36;

pub fn render(app: &App, t: &Theme, f: &mut Frame) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "terminal too small: {}x{}, need at least {}x{}",
            area.width, area.height, MIN_WIDTH, MIN_HEIGHT
        );
        f.render_widget(
            Paragraph::new(msg).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let l = layout(app, area);
    header::render(app, t, f, l.head, l.head_layout);
    let (qos_pid, qos_area, burst_area, foot, tl) =
        (l.qos_pid, l.qos_area, l.burst_area, l.foot, l.tl);
    let left = l.left;
    if app.main == MainView::Servers {
        servers::render(app, t, f, left, true);
        finish(app, t, f, area, qos_pid, qos_area, burst_area, foot, tl);
        return;
    }
    if app.main == MainView::Cgroups {
        cgroups::render(app, t, f, left);
        finish(app, t, f, area, qos_pid, qos_area, burst_area, foot, tl);
        return;
    }
    let (cpu, mem_area, srv_area) = (l.cpu, l.mem_area, l.srv_area);
    cpu_table::render(app, t, f, cpu);
    if let Some(m) = mem_area {
        mem_table::render(app, t, f, m);
    }
    if let Some(s) = srv_area {
        servers::render(app, t, f, s, false);
    }
    finish(app, t, f, area, qos_pid, qos_area, burst_area, foot, tl);
}

/// Where each region of the screen goes: the one layout that drawing and the mouse share.
struct Areas {
    head: Rect,
    /// What the header holds (meters, lines) in `head`.
    head_layout: header::HeaderLayout,
    /// The main view's column (the process, SERVERS or cgroups table and what goes under it).
    left: Rect,
    /// The process table.
    cpu: Rect,
    mem_area: Option<Rect>,
    srv_area: Option<Rect>,
    qos_pid: Option<u32>,
    qos_area: Option<Rect>,
    burst_area: Option<Rect>,
    foot: Rect,
    tl: Rect,
}

/// The layout of a screen `area` big, a pure function of the App.
fn layout(app: &App, area: Rect) -> Areas {
    // The header's meters leave the process table ten rows, with a QoS pane under it too.
    let qos_under = match app.qos_pid() {
        Some(_) if area.width < WIDE && area.height >= TALL => qos::FULL_HEIGHT,
        Some(_) if area.width < WIDE => qos::COMPACT_HEIGHT,
        _ => 0,
    };
    let room = area
        .height
        .saturating_sub(1 + timeline::height(app) + qos_under);
    let head_layout = header::layout(app, area, room);
    let [head, body, foot, tl] = Layout::vertical([
        Constraint::Length(head_layout.height()),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(timeline::height(app)),
    ])
    .areas(area);
    let qos_pid = app.qos_pid();
    let (left, qos_area) = match qos_pid {
        Some(_) if body.width >= WIDE => {
            let w = (body.width * 2 / 5).clamp(60, 100);
            let [l, r] =
                Layout::horizontal([Constraint::Min(60), Constraint::Length(w)]).areas(body);
            (l, Some(r))
        }
        Some(_) => {
            let h = if area.height >= TALL {
                qos::FULL_HEIGHT
            } else {
                qos::COMPACT_HEIGHT
            };
            let h = h.min(body.height.saturating_sub(5));
            let [l, r] = Layout::vertical([Constraint::Min(5), Constraint::Length(h)]).areas(body);
            (l, (h >= 3).then_some(r))
        }
        None => (body, None),
    };
    // The minute of burst history of the selected process: under the QoS pane when that is
    // beside the table, else under the table when the screen is tall.
    let (left, qos_area, burst_area) = match qos_area {
        Some(q) if body.width >= WIDE && q.height >= qos::FULL_HEIGHT + burst::HEIGHT => {
            let [q, b] = Layout::vertical([
                Constraint::Min(qos::FULL_HEIGHT),
                Constraint::Length(burst::HEIGHT),
            ])
            .areas(q);
            (left, Some(q), Some(b))
        }
        _ if left.height >= 30 => {
            let [l, b] = Layout::vertical([Constraint::Min(10), Constraint::Length(burst::HEIGHT)])
                .areas(left);
            (l, qos_area, Some(b))
        }
        _ => (left, qos_area, None),
    };
    let mut l = Areas {
        head,
        head_layout,
        left,
        cpu: left,
        mem_area: None,
        srv_area: None,
        qos_pid,
        qos_area,
        burst_area,
        foot,
        tl,
    };
    if app.main != MainView::Processes {
        return l;
    }
    // A few rows of the SERVERS table under the process table when servers answered requests
    // and the process table keeps at least 14 rows.
    let n_servers = app.server_rows().len() as u16;
    let srv_h = (n_servers + 2).min(servers::PANE_HEIGHT);
    let (left, srv_area) = if n_servers > 0 && left.height >= 14 + srv_h {
        let [l, s] = Layout::vertical([Constraint::Min(14), Constraint::Length(srv_h)]).areas(left);
        (l, Some(s))
    } else {
        (left, None)
    };
    // The memory table takes the lower part of the left column when it is tall enough to
    // leave the process table at least 14 rows.
    let mem_h = (left.height / 3).min(14);
    let (cpu, mem_area): (Rect, Option<Rect>) = if app.shown().mem.available
        && mem_h >= mem_table::MIN_HEIGHT
        && left.height >= 14 + mem_h
    {
        let [c, m] = Layout::vertical([Constraint::Min(14), Constraint::Length(mem_h)]).areas(left);
        (c, Some(m))
    } else {
        (left, None)
    };
    (l.cpu, l.mem_area, l.srv_area) = (cpu, mem_area, srv_area);
    l
}

/// What a mouse event on a screen `area` big hits: a row or a column header of the process
/// table, or the wheel (anywhere). Computed from the layout drawing uses, never stored from it.
pub fn pointer(app: &App, area: Rect, ev: MouseEvent) -> Option<Pointer> {
    match ev.kind {
        MouseEventKind::ScrollDown => return Some(Pointer::Wheel(1)),
        MouseEventKind::ScrollUp => return Some(Pointer::Wheel(-1)),
        MouseEventKind::Down(MouseButton::Left) => {}
        _ => return None,
    }
    if area.width < MIN_WIDTH
        || area.height < MIN_HEIGHT
        || app.main != MainView::Processes
        || app.overlay.is_some()
    {
        return None;
    }
    let cpu = layout(app, area).cpu;
    let (x, y) = (ev.column, ev.row);
    if x < cpu.x || x >= cpu.x + cpu.width || y < cpu.y || y >= cpu.y + cpu.height {
        return None;
    }
    if y == cpu.y {
        let spans = cpu_table::column_spans(app, cpu);
        // A click in the space between two columns counts for the one on its left.
        let col = spans
            .iter()
            .rev()
            .find(|(_, r)| x >= r.start)
            .map(|(c, _)| *c)?;
        return Some(Pointer::Header(col));
    }
    cpu_table::row_at(app, cpu, y).map(Pointer::Row)
}

/// What every main view shares: the QoS and burst panes, the footer, the replay timeline and
/// the overlays.
#[allow(clippy::too_many_arguments)]
fn finish(
    app: &App,
    t: &Theme,
    f: &mut Frame,
    area: Rect,
    qos_pid: Option<u32>,
    qos_area: Option<Rect>,
    burst_area: Option<Rect>,
    foot: Rect,
    tl: Rect,
) {
    if let (Some(pid), Some(a)) = (qos_pid, qos_area) {
        qos::render(app, t, pid, f, a);
    }
    if let Some(b) = burst_area {
        burst::render(app, t, f, b);
    }
    footer::render(app, t, f, foot);
    timeline::render(app, t, f, tl);
    match &app.overlay {
        Some(Overlay::Help) => overlay::help(app, t, f, area),
        Some(Overlay::Details(k, d)) => overlay::details(app, t, *k, d.as_deref(), f, area),
        Some(Overlay::Signal(menu)) => overlay::signal_menu(app, t, menu, f, area),
        Some(Overlay::Users(cursor)) => overlay::users(app, t, *cursor, f, area),
        Some(Overlay::Setup(cursor)) => setup::render(app, t, *cursor, f, area),
        None => {}
    }
}

/// Format ns as a short duration: `850us`, `12.3ms`, `1.25s`, `2:03.4`.
pub fn fmt_ns(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ns < 1000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{}us", ns / 1000)
    } else if ms < 1000.0 {
        format!("{ms:.1}ms")
    } else if ms < 60_000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else {
        let s = ns / 1_000_000_000;
        format!("{}:{:02}.{}", s / 60, s % 60, (ns / 100_000_000) % 10)
    }
}

/// Format µs with a unit that keeps it short.
pub fn fmt_us(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.1}us")
    } else if us < 1e6 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

#[cfg(test)]
mod setup_tests;
#[cfg(test)]
pub(crate) mod tests;
