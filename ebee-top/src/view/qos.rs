//! The QoS pane of one pinned (or recently pinned) process: syscalls/s, requests/s and
//! request latency percentiles as numbers and as sparklines over time, a latency histogram
//! (requests for a server, every syscall otherwise), and the syscalls that took the most time.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
};

use crate::app::{App, Focus};
use crate::model::qos::{HistOf, QosStats};
use crate::view::theme::Theme;
use crate::view::theme::sparkline;
use crate::view::{fmt_ns, fmt_us};

/// Rows the pane takes below the table on a tall screen, and on a short one.
pub const FULL_HEIGHT: u16 = 18;
pub const COMPACT_HEIGHT: u16 = 7;

fn opt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), fmt_us)
}

const STATS_HEAD: &str = "         sys/s      rps      p50      p99    p99.9";

fn stats_line(label: &str, s: &QosStats) -> String {
    format!(
        "{label:<5} {:>8.0} {:>8.0} {:>8} {:>8} {:>8}",
        s.syscalls_per_s,
        s.rps,
        opt_us(s.p50_us),
        opt_us(s.p99_us),
        opt_us(s.p999_us)
    )
}

/// The last `n` values, scaled to integers for a sparkline (x100 keeps two decimals).
fn tail(vals: impl Iterator<Item = f64>, n: usize) -> (Vec<u64>, u64) {
    let v: Vec<f64> = vals.collect();
    let start = v.len().saturating_sub(n);
    let s: Vec<u64> = v[start..].iter().map(|x| (x * 100.0) as u64).collect();
    let max = s.iter().copied().max().unwrap_or(0);
    (s, max)
}

pub fn render(app: &App, t: &Theme, pid: u32, f: &mut Frame, area: Rect) {
    let c = t.colors;
    let m = app.shown();
    let Some(v) = m.qos.view(pid) else {
        return;
    };
    let state = if v.exited {
        "exited"
    } else if v.pinned {
        "pinned"
    } else {
        "unpinned"
    };
    let kind = if v.server { "server" } else { "syscalls only" };
    let focus = if app.focus == Focus::Qos {
        "  [focus: Up/Down picks]"
    } else {
        ""
    };
    let title = format!(" QoS {pid} {} [{state}] {kind}{focus} ", v.comm);
    let inner = t.render_pane(&title, area, f);
    let w = inner.width as usize;
    let mut lines: Vec<Line> = Vec::new();
    lines.push(Line::styled(STATS_HEAD, c.title()));
    lines.push(Line::from(stats_line(
        &format!("{:.0}s", v.window.span_s),
        &v.window,
    )));
    if inner.height <= 5 {
        // Compact: the numbers, one sparkline, the heaviest syscalls on one line.
        let h = m.qos.history(pid);
        let (s, max) = tail(
            h.iter().map(|p| {
                if v.server {
                    p.p99_us.unwrap_or(0.0)
                } else {
                    p.syscalls_per_s
                }
            }),
            w.saturating_sub(7),
        );
        let label = if v.server { "p99   " } else { "sys/s " };
        lines.push(Line::from(vec![
            Span::raw(label),
            Span::styled(sparkline(&s, max, t.ascii), c.latency()),
        ]));
        let top: Vec<String> = v
            .top_syscalls
            .iter()
            .take(4)
            .map(|s| format!("{} {:.0}%", s.name, s.share * 100.0))
            .collect();
        lines.push(Line::from(format!("top: {}", top.join("  "))));
        super::plain_table::paragraph(lines, inner, f);
        return;
    }
    lines.push(Line::from(stats_line("last", &v.interval)));
    // How long its threads waited for a CPU each time they got one, over the window.
    if v.window.runq_waits > 0 {
        lines.push(Line::from(format!(
            "runq  p50 {}  p99 {}  max {}  ({} waits)",
            opt_us(v.window.runq_p50_us),
            opt_us(v.window.runq_p99_us),
            opt_us(v.window.runq_max_us),
            v.window.runq_waits
        )));
    }
    // Whom those waits were behind, over the last second.
    if let Some(who) = m.wait.culprits_of(pid).filter(|c| c.total_ns() > 0) {
        lines.push(Line::from(crate::view::overlay::culprits_line(
            m, pid, &who,
        )));
    }
    let h = m.qos.history(pid);
    let n = w.saturating_sub(7);
    let mut sparks: Vec<(&str, Vec<f64>)> = Vec::new();
    if v.server {
        sparks.push(("rps   ", h.iter().map(|p| p.rps).collect()));
        sparks.push((
            "p99   ",
            h.iter().map(|p| p.p99_us.unwrap_or(0.0)).collect(),
        ));
    } else {
        lines.push(Line::from("no requests answered: syscalls only"));
    }
    sparks.push(("sys/s ", h.iter().map(|p| p.syscalls_per_s).collect()));
    for (label, vals) in sparks {
        let (s, max) = tail(vals.into_iter(), n);
        lines.push(Line::from(vec![
            Span::raw(label),
            Span::styled(sparkline(&s, max, t.ascii), c.latency()),
        ]));
    }
    let room = (inner.height as usize).saturating_sub(lines.len());
    let sys_rows = (v.top_syscalls.len() + 1).min(room / 2).max(2);
    let hist_rows = room.saturating_sub(sys_rows + 2);
    if hist_rows > 0 {
        let of = if v.server {
            HistOf::Requests
        } else {
            HistOf::AllSyscalls
        };
        // The finest bars that fit, down to one per power of two.
        let mut bins = [2, 1]
            .iter()
            .map(|per| m.qos.hist_bins(pid, of, *per))
            .find(|b| b.len() <= hist_rows)
            .unwrap_or_else(|| m.qos.hist_bins(pid, of, 1));
        // Merge neighbours until the bars fit.
        while bins.len() > hist_rows && bins.len() > 1 {
            bins = bins
                .chunks(2)
                .map(|p| crate::model::qos::HistBin {
                    lo_ns: p[0].lo_ns,
                    hi_ns: p[p.len() - 1].hi_ns,
                    count: p.iter().map(|b| b.count).sum(),
                })
                .collect();
        }
        lines.push(Line::styled(
            format!(
                "latency, {} over the window",
                if v.server { "requests" } else { "all syscalls" }
            ),
            c.title(),
        ));
        let max = bins.iter().map(|b| b.count).max().unwrap_or(0);
        let bar_w = w.saturating_sub(28).max(4);
        for b in bins {
            let len = if max == 0 {
                0
            } else {
                ((b.count as u128 * bar_w as u128).div_ceil(max as u128)) as usize
            };
            let bar: String =
                std::iter::repeat_n(if t.ascii { '#' } else { '\u{2588}' }, len).collect();
            lines.push(Line::from(vec![
                Span::raw(format!("{:>8}-{:<8} ", fmt_ns(b.lo_ns), fmt_ns(b.hi_ns))),
                Span::styled(format!("{bar:<bar_w$}"), c.latency()),
                Span::raw(format!(" {}", b.count)),
            ]));
        }
    }
    lines.push(Line::styled(
        format!(
            "{:<14} {:>9} {:>6} {:>9} {:>9}",
            "syscall", "/s", "time%", "mean", "p99"
        ),
        c.title(),
    ));
    for s in v.top_syscalls.iter().take(sys_rows.saturating_sub(1)) {
        lines.push(Line::from(format!(
            "{:<14} {:>9.0} {:>5.1}% {:>9} {:>9}",
            s.name,
            s.per_s,
            s.share * 100.0,
            fmt_us(s.mean_us),
            opt_us(s.p99_us)
        )));
    }
    super::plain_table::paragraph(lines, inner, f);
}
