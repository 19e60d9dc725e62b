//! The header: host, kernel, uptime, load; the meters (each CPU, memory, swap: see
//! [`super::meters`]); CPU and memory totals, the interval, context switches, ebee-top's own
//! cost, and what was lost.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
};

use crate::app::App;
use crate::view::meters;
use crate::view::theme::Theme;

/// The header's lines: two of text (a third one when something was lost or there is room),
/// and the meters'.
#[derive(Clone, Copy, Debug)]
pub struct HeaderLayout {
    text: u16,
    plan: meters::Plan,
}

impl HeaderLayout {
    pub fn height(&self) -> u16 {
        self.text + self.plan.lines()
    }
}

/// The header's layout on a screen of `area`, when it and the process table share `room`
/// lines.
pub fn layout(app: &App, area: Rect, room: u16) -> HeaderLayout {
    let lost = app.shown().latest().is_some_and(|b| b.dropped.any());
    let text = if lost || area.height >= 40 { 3 } else { 2 };
    HeaderLayout {
        text,
        plan: meters::plan(app.host.as_ref(), area.width, area.height, text, room),
    }
}

fn uptime(s: u64) -> String {
    let d = s / 86_400;
    let h = (s / 3600) % 24;
    let m = (s / 60) % 60;
    if d > 0 {
        format!("{d}d {h:02}:{m:02}")
    } else {
        format!("{h:02}:{m:02}")
    }
}

fn gib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / (1024.0 * 1024.0))
}

pub fn render(app: &App, t: &Theme, f: &mut Frame, area: Rect, hl: HeaderLayout) {
    let c = t.colors;
    let m = app.shown();
    let mut first = vec![Span::styled("ebee-top", c.title())];
    match &app.host {
        Some(h) => {
            first.push(Span::raw(format!(
                "  {}  {}  up {}  load {:.2} {:.2} {:.2}",
                h.hostname,
                h.kernel,
                uptime(h.uptime_s),
                h.load[0],
                h.load[1],
                h.load[2]
            )));
        }
        None => {
            if let Some(r) = &app.replay
                && !r.status.host.is_empty()
            {
                first.push(Span::raw(format!("  replay of {}", r.status.host)));
            }
        }
    }
    if let Some(b) = m.latest() {
        first.push(Span::raw(format!("  {}", crate::time::fmt_wall(b.t_ms))));
    }
    // The host's pressure (PSI some avg10), where the kernel has it and the line has room.
    if let Some(p) = app.host.as_ref().and_then(|h| h.psi) {
        let psi = format!("  psi cpu {:.1} io {:.1} mem {:.1}", p.cpu, p.io, p.memory);
        let used: usize = first.iter().map(|s| s.content.chars().count()).sum();
        if used + psi.len() <= usize::from(area.width) {
            let busy = p.cpu.max(p.io).max(p.memory) >= 10.0;
            first.push(if busy {
                Span::styled(psi, c.warn())
            } else {
                Span::raw(psi)
            });
        }
    }
    if app.paused {
        first.push(Span::styled("  [paused]", c.warn()));
    }
    let mut lines = vec![Line::from(first)];
    let plan = hl.plan;
    if let Some(h) = &app.host {
        lines.extend(meters::lines(h, t, plan, area.width));
    }
    let Some(b) = m.latest() else {
        lines.push(Line::from("waiting for the first interval..."));
        super::plain_table::paragraph(lines, area, f);
        return;
    };
    let mut second = Vec::new();
    if let Some(h) = &app.host {
        if let Some(busy) = h.cpu_busy_pct {
            second.push(format!("CPU {busy:.1}% of {}", b.ncpus));
        }
        // The memory meter shows it when there are meters.
        if h.mem_total_kib > 0 && plan == meters::Plan::None {
            second.push(format!(
                "Mem {}/{}G",
                gib(h.mem_total_kib.saturating_sub(h.mem_avail_kib)),
                gib(h.mem_total_kib)
            ));
        }
    } else {
        second.push(format!("{} CPUs", b.ncpus));
    }
    let ns = b.interval_ns().max(1) as f64;
    second.push(format!("interval {:.0}ms", ns / 1e6));
    // Own cost as a share of one core: the process's CPU time plus its programs' run time.
    let own = b.cost.cpu_ns as f64 * 100.0 / ns;
    // `~`: the programs' share is an estimate from the sampled statistics.
    let approx = if b.cost.bpf_sampled { "~" } else { " " };
    second.push(match b.cost.bpf_ns {
        Some(bpf) => format!(
            "self {:.2}% (bpf{approx}{:.2}%)",
            own + bpf as f64 * 100.0 / ns,
            bpf as f64 * 100.0 / ns
        ),
        None => format!("self {own:.2}% (bpf n/a)"),
    });
    second.push(format!("{} sw", b.switches));
    lines.push(Line::from(second.join("  ")));
    if hl.text >= 3 {
        let d = &b.dropped;
        let rare = |n: u64, what: &str| {
            if n > 0 {
                format!(", {n} {what}")
            } else {
                String::new()
            }
        };
        let text = format!(
            "lost: {} sketch evictions ({:.3} ms), {} lifecycle events, {} handshake timeouts{}{}",
            d.sketch_evictions,
            d.sketch_evicted_ns as f64 / 1e6,
            d.lifecycle_lost,
            d.handshake_timeouts,
            rare(d.shadow_full, "shadow full"),
            rare(d.prog_errors, "program errors"),
        );
        lines.push(if d.any() {
            Line::styled(text, c.warn())
        } else {
            Line::from(text)
        });
    }
    super::plain_table::paragraph(lines, area, f);
}
