//! The header's meters: one bar per CPU (its busy time split by kind), memory and swap, folded
//! into up to four columns as htop and btop do, or one compact line when the screen is short.
//! The numbers come from the host thread's /proc readings ([`HostInfo`]).

use ratatui::{
    style::Style,
    text::{Line, Span},
};

use crate::os::host::{CpuShare, HostInfo, MemInfo};
use crate::view::theme::{Colors, Theme};

/// Columns the CPU meters may fold into.
const MAX_COLUMNS: usize = 4;
/// The narrowest meter worth drawing (a label, brackets, and room for `100.0%` and a bar).
const MIN_METER_WIDTH: usize = 16;
/// Below this terminal height the meters shrink to one line.
pub const COMPACT_BELOW: u16 = 24;
/// Below this height there are no meters: every line goes to the process table.
const NONE_BELOW: u16 = 16;
/// The header (meters and text) may take at most this share of the screen, in fifths; more
/// and the meters shrink to one line.
const MAX_FIFTHS: u16 = 2;
/// Lines the process table keeps whatever the meters: its header row and ten rows.
const TABLE_KEEPS: u16 = 11;

/// How the meters are drawn on a screen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing known yet (the first reading, or a replay) or no room.
    None,
    /// One line: each CPU's busy share, memory and swap.
    Compact,
    /// A bar per CPU in `columns` columns of `rows` lines; memory and swap either in the same
    /// line (`mem_beside`: few CPUs, room to spare) or on a line of their own.
    Full {
        columns: usize,
        rows: usize,
        mem_beside: bool,
    },
}

impl Plan {
    /// The meters' lines.
    pub fn lines(self) -> u16 {
        match self {
            Plan::None => 0,
            Plan::Compact => 1,
            Plan::Full {
                rows, mem_beside, ..
            } => rows as u16 + u16::from(!mem_beside),
        }
    }
}

/// The meters' plan for `host` on a `width` x `height` screen whose header has `text_lines`
/// lines besides the meters, when the header and the process table share `room` lines (the
/// rest being the footer, a replay's timeline and a QoS pane under the table).
pub fn plan(host: Option<&HostInfo>, width: u16, height: u16, text_lines: u16, room: u16) -> Plan {
    let Some(h) = host.filter(|h| !h.cpus.is_empty()) else {
        return Plan::None;
    };
    let fits = |lines: u16| text_lines + lines + TABLE_KEEPS <= room;
    if height < NONE_BELOW || !fits(1) {
        return Plan::None;
    }
    if height < COMPACT_BELOW {
        return Plan::Compact;
    }
    let n = h.cpus.len();
    let fit = ((usize::from(width) + 1) / (MIN_METER_WIDTH + 1)).clamp(1, MAX_COLUMNS);
    // With memory and swap in the CPUs' line when all of them fit in one.
    let full = if n + 2 <= fit {
        Plan::Full {
            columns: n + 2,
            rows: 1,
            mem_beside: true,
        }
    } else {
        // As few lines as the columns allow, then the CPUs spread evenly over them.
        let rows = n.div_ceil(fit);
        Plan::Full {
            columns: n.div_ceil(rows),
            rows,
            mem_beside: false,
        }
    };
    if (text_lines + full.lines()) * 5 > height * MAX_FIFTHS || !fits(full.lines()) {
        Plan::Compact
    } else {
        full
    }
}

/// One kind of time (or memory) in a bar: its share in percent, its style and its glyph.
struct Part {
    pct: f64,
    style: Style,
    glyph: char,
}

/// Just the colour of a theme's style: the meters' glyphs are not bold.
fn fg(s: Style) -> Style {
    match s.fg {
        Some(c) => Style::default().fg(c),
        None => Style::default(),
    }
}

/// Distinct glyphs per kind when colour cannot tell them apart (`--ascii` or no colour),
/// as htop does in monochrome; else `|` in the kind's colour.
fn glyph(t: &Theme, ascii: char) -> char {
    if t.ascii || t.colors == Colors::None {
        ascii
    } else {
        '|'
    }
}

/// User (with nice), system, iowait, irq (with softirq), steal.
fn cpu_parts(t: &Theme, c: &CpuShare) -> [Part; 5] {
    let k = t.colors;
    [
        Part {
            pct: c.user,
            style: fg(k.burst()),
            glyph: '|',
        },
        Part {
            pct: c.system,
            style: fg(k.warn()),
            glyph: glyph(t, '#'),
        },
        Part {
            pct: c.iowait,
            style: fg(k.exited()),
            glyph: glyph(t, '.'),
        },
        Part {
            pct: c.irq,
            style: fg(k.latency()),
            glyph: glyph(t, '*'),
        },
        Part {
            pct: c.steal,
            style: fg(k.title()),
            glyph: glyph(t, '%'),
        },
    ]
}

/// Used, buffers, cache, as shares of the total.
fn mem_parts(t: &Theme, m: &MemInfo) -> [Part; 3] {
    let k = t.colors;
    let pct = |v: u64| {
        if m.total == 0 {
            0.0
        } else {
            v as f64 * 100.0 / m.total as f64
        }
    };
    [
        Part {
            pct: pct(m.used()),
            style: fg(k.burst()),
            glyph: '|',
        },
        Part {
            pct: pct(m.buffers),
            style: fg(k.title()),
            glyph: glyph(t, '#'),
        },
        Part {
            pct: pct(m.cached),
            style: fg(k.latency()),
            glyph: glyph(t, '*'),
        },
    ]
}

/// Bytes as a short size: `512M`, `4.0G`, `1.5T`.
pub fn size(bytes: u64) -> String {
    const M: f64 = (1u64 << 20) as f64;
    let b = bytes as f64;
    if b < 1024.0 * M {
        format!("{:.0}M", b / M)
    } else if b < 1024.0 * 1024.0 * M {
        format!("{:.1}G", b / (1024.0 * M))
    } else {
        format!("{:.1}T", b / (1024.0 * 1024.0 * M))
    }
}

/// `label[bar   text]` in `width` cells: the parts fill the bar from the left, each with as
/// many cells as its share (rounded where the shares add up, so the bar's length is the
/// rounded sum), and `text` sits at the bar's right end, over it when the bar is that full.
fn bar(
    t: &Theme,
    label: &str,
    label_w: usize,
    parts: &[Part],
    text: &str,
    width: usize,
) -> Vec<Span<'static>> {
    let mut spans = vec![
        Span::styled(format!("{label:>label_w$}"), t.colors.title()),
        Span::raw("["),
    ];
    let inner = width.saturating_sub(label_w + 2);
    let mut cells: Vec<(char, Style)> = vec![(' ', Style::default()); inner];
    let mut sum = 0.0;
    let mut from = 0;
    for p in parts {
        sum += p.pct.max(0.0);
        let to = ((sum.min(100.0) / 100.0 * inner as f64).round() as usize).min(inner);
        for c in cells.iter_mut().take(to).skip(from) {
            *c = (p.glyph, p.style);
        }
        from = from.max(to);
    }
    let text: Vec<char> = text.chars().collect();
    if text.len() <= inner {
        for (c, ch) in cells[inner - text.len()..].iter_mut().zip(text) {
            *c = (ch, Style::default());
        }
    }
    // Runs of one style as one span.
    let mut run = String::new();
    let mut style = Style::default();
    for (ch, s) in cells {
        if s != style && !run.is_empty() {
            spans.push(Span::styled(std::mem::take(&mut run), style));
        }
        style = s;
        run.push(ch);
    }
    if !run.is_empty() {
        spans.push(Span::styled(run, style));
    }
    spans.push(Span::raw("]"));
    spans
}

fn pct_text(v: f64) -> String {
    format!("{:.1}%", v.clamp(0.0, 100.0))
}

fn cpu_meter(t: &Theme, c: &CpuShare, label_w: usize, width: usize) -> Vec<Span<'static>> {
    bar(
        t,
        &c.cpu.to_string(),
        label_w,
        &cpu_parts(t, c),
        &pct_text(c.busy()),
        width,
    )
}

fn mem_meter(t: &Theme, m: Option<&MemInfo>, width: usize) -> Vec<Span<'static>> {
    match m {
        Some(m) => bar(
            t,
            "Mem",
            3,
            &mem_parts(t, m),
            &format!("{}/{}", size(m.used()), size(m.total)),
            width,
        ),
        None => bar(t, "Mem", 3, &[], "n/a", width),
    }
}

fn swap_meter(t: &Theme, m: Option<&MemInfo>, width: usize) -> Vec<Span<'static>> {
    let Some(m) = m else {
        return bar(t, "Swp", 3, &[], "n/a", width);
    };
    let used = Part {
        pct: if m.swap_total == 0 {
            0.0
        } else {
            m.swap_used() as f64 * 100.0 / m.swap_total as f64
        },
        style: fg(t.colors.warn()),
        glyph: '|',
    };
    bar(
        t,
        "Swp",
        3,
        &[used],
        &format!("{}/{}", size(m.swap_used()), size(m.swap_total)),
        width,
    )
}

/// Cells `0..n` of a `width` split into `n` columns with one blank between them: the
/// widths, the spare cells going to the first ones.
fn widths(width: usize, n: usize) -> Vec<usize> {
    let n = n.max(1);
    let room = width.saturating_sub(n - 1);
    (0..n)
        .map(|i| room / n + usize::from(i < room % n))
        .collect()
}

/// The meters' lines for `plan`.
pub fn lines(h: &HostInfo, t: &Theme, plan: Plan, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width);
    let label_w = h
        .cpus
        .iter()
        .map(|c| c.cpu.to_string().len())
        .max()
        .unwrap_or(1);
    match plan {
        Plan::None => Vec::new(),
        Plan::Compact => vec![compact(h, t, width)],
        Plan::Full {
            columns,
            rows,
            mem_beside,
        } => {
            let w = widths(width, columns);
            let mut out = Vec::new();
            for r in 0..rows {
                let mut spans = Vec::new();
                // Column-major, as htop numbers its CPUs: down the first column, then the next.
                for (col, cw) in w.iter().enumerate() {
                    let i = if mem_beside { col } else { col * rows + r };
                    if col > 0 {
                        spans.push(Span::raw(" "));
                    }
                    match h.cpus.get(i) {
                        Some(c) => spans.extend(cpu_meter(t, c, label_w, *cw)),
                        None if mem_beside && i == h.cpus.len() => {
                            spans.extend(mem_meter(t, h.mem.as_ref(), *cw));
                        }
                        None if mem_beside && i == h.cpus.len() + 1 => {
                            spans.extend(swap_meter(t, h.mem.as_ref(), *cw));
                        }
                        None => {}
                    }
                }
                out.push(Line::from(spans));
            }
            if !mem_beside {
                let w = widths(width, 2);
                let mut spans = mem_meter(t, h.mem.as_ref(), w[0]);
                spans.push(Span::raw(" "));
                spans.extend(swap_meter(t, h.mem.as_ref(), w[1]));
                out.push(Line::from(spans));
            }
            out
        }
    }
}

/// One line: `CPUs 0 52% 1 10%` when every CPU's number fits, else a cell per CPU (a
/// sparkline of their busy shares, in CPU order; when even those do not fit, each cell is
/// the busiest of a few neighbours, and the label says how many), then memory and swap as
/// numbers as far as they fit.
fn compact(h: &HostInfo, t: &Theme, width: usize) -> Line<'static> {
    let c = t.colors;
    let (mem, swap) = match &h.mem {
        Some(m) => (
            format!("  Mem {}/{}", size(m.used()), size(m.total)),
            format!("  Swp {}/{}", size(m.swap_used()), size(m.swap_total)),
        ),
        None => (String::new(), String::new()),
    };
    let numbers: Vec<String> = h
        .cpus
        .iter()
        .map(|s| format!(" {} {:.0}%", s.cpu, s.busy().clamp(0.0, 100.0)))
        .collect();
    // `CPUs`, not `CPU`: a line that reads as a pid after three cells is a table row to a
    // reader of the screen (the tmux tests' `rows`).
    let mut spans = vec![Span::styled("CPUs", c.title())];
    let used = 4 + numbers.iter().map(String::len).sum::<usize>();
    let tail = if used + mem.len() + swap.len() <= width {
        for (s, n) in h.cpus.iter().zip(numbers) {
            spans.push(Span::styled(n, busy_style(t, s)));
        }
        mem + &swap
    } else {
        let n = h.cpus.len();
        let range = format!(
            " {}-{} ",
            h.cpus.first().map_or(0, |s| s.cpu),
            h.cpus.last().map_or(0, |s| s.cpu)
        );
        let room = width.saturating_sub(4 + range.len());
        // A cell per CPU with as much of memory and swap as fits beside them; else memory
        // beside cells that fold neighbours together; else the cells alone.
        let fold = |tail: &str| {
            // The label's length depends on the fold, which depends on the room left.
            let mut per = n.div_ceil(room.saturating_sub(tail.len()).max(1)).max(2);
            loop {
                let label = format!("{range}(busiest of {per}) ");
                let cells = width.saturating_sub(4 + label.len() + tail.len());
                if n.div_ceil(per) <= cells || cells == 0 {
                    return (label, per, cells);
                }
                per += 1;
            }
        };
        let (label, tail, per) = if n + mem.len() + swap.len() <= room {
            (range, mem + &swap, 1)
        } else if n + mem.len() <= room {
            (range, mem, 1)
        } else if let (label, per, 16..) = fold(&mem) {
            (label, mem, per)
        } else if n <= room {
            (range, String::new(), 1)
        } else {
            let (label, per, _) = fold("");
            (label, String::new(), per)
        };
        let cells: String = h
            .cpus
            .chunks(per)
            .map(|g| {
                let busiest = g.iter().map(CpuShare::busy).fold(0.0, f64::max);
                crate::view::theme::spark((busiest * 10.0) as u64, 1000, t.ascii)
            })
            .collect();
        spans.push(Span::raw(label));
        spans.push(Span::styled(cells, fg(c.burst())));
        tail
    };
    spans.push(Span::raw(tail));
    Line::from(spans)
}

/// A CPU's number in the compact line: the colour of what keeps it busiest, when it is busy.
fn busy_style(t: &Theme, s: &CpuShare) -> Style {
    if s.busy() < 50.0 {
        return Style::default();
    }
    cpu_parts(t, s)
        .into_iter()
        .max_by(|a, b| a.pct.total_cmp(&b.pct))
        .map_or(Style::default(), |p| p.style)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(cpu: u32, user: f64, system: f64) -> CpuShare {
        CpuShare {
            cpu,
            user,
            system,
            ..Default::default()
        }
    }

    fn text(spans: &[Span]) -> String {
        spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn a_bar_fills_by_share_with_the_number_at_its_end() {
        let ascii = Theme {
            ascii: true,
            ..Theme::default()
        };
        let c = CpuShare {
            cpu: 1,
            user: 30.0,
            system: 20.0,
            iowait: 10.0,
            irq: 10.0,
            steal: 10.0,
        };
        // 20 cells inside: 6 user, 4 system, 2 iowait, 2 irq, 2 steal, then blanks and 80.0%.
        let s = text(&cpu_meter(&ascii, &c, 1, 23));
        assert_eq!(s, "1[||||||####..**%80.0%]");
        let empty = text(&cpu_meter(&ascii, &share(0, 0.0, 0.0), 2, 16));
        assert_eq!(empty, " 0[        0.0%]");
        // Colour tells the kinds apart: one glyph then.
        let colour = text(&cpu_meter(&Theme::default(), &c, 1, 23));
        assert_eq!(colour, "1[|||||||||||||||80.0%]");
        // Shares that round up past 100 never overflow the bar.
        let full = text(&cpu_meter(&ascii, &share(3, 70.0, 40.0), 1, 12));
        assert_eq!(full.chars().count(), 12, "{full}");
        assert!(full.ends_with("100.0%]"), "{full}");
    }

    #[test]
    fn plans_fold_and_shrink() {
        let host = |n: u32| HostInfo {
            cpus: (0..n).map(|c| share(c, 10.0, 5.0)).collect(),
            ..Default::default()
        };
        let h2 = host(2);
        assert_eq!(plan(None, 80, 24, 2, 23), Plan::None);
        assert_eq!(plan(Some(&HostInfo::default()), 80, 24, 2, 23), Plan::None);
        // Two CPUs at 80x24: the CPUs, memory and swap in one line.
        assert_eq!(
            plan(Some(&h2), 80, 24, 2, 23),
            Plan::Full {
                columns: 4,
                rows: 1,
                mem_beside: true
            }
        );
        assert_eq!(plan(Some(&h2), 80, 23, 2, 22), Plan::Compact);
        assert_eq!(plan(Some(&h2), 80, 15, 2, 14), Plan::None);
        // 64 CPUs: four columns of 16 at 200x50; too many lines for 80x24.
        let h64 = host(64);
        assert_eq!(
            plan(Some(&h64), 200, 50, 2, 49),
            Plan::Full {
                columns: 4,
                rows: 16,
                mem_beside: false
            }
        );
        assert_eq!(plan(Some(&h64), 80, 24, 2, 23), Plan::Compact);
        // Six CPUs at 80 columns: two lines of three, evenly.
        assert_eq!(
            plan(Some(&host(6)), 80, 40, 2, 39),
            Plan::Full {
                columns: 3,
                rows: 2,
                mem_beside: false
            }
        );
        // A QoS pane of 7 lines under the table at 80x24 leaves 16 for the header and the
        // table: nine CPUs' four lines would leave the table 9 rows, so they fold into one;
        // with 12 there is no room even for that.
        let h9 = host(9);
        assert_eq!(plan(Some(&h9), 80, 24, 2, 16), Plan::Compact);
        assert_eq!(plan(Some(&h9), 80, 24, 2, 23).lines(), 4);
        assert_eq!(plan(Some(&h9), 80, 20, 2, 12), Plan::None);
    }

    #[test]
    fn sizes() {
        assert_eq!(size(512 << 20), "512M");
        assert_eq!(size(4 << 30), "4.0G");
        assert_eq!(size(3 << 40), "3.0T");
        assert_eq!(size(0), "0M");
    }

    /// Whole screens drawn into ratatui's TestBackend with the meters (`cargo insta review`
    /// after an intended change).
    mod screens {

        use ratatui::{Terminal, backend::TestBackend};

        use super::share;
        use crate::app::{App, Msg};
        use crate::batch::ProcInfo;
        use crate::batch::qos::QosBatch;
        use crate::os::host::{CpuShare, HostInfo, MemInfo};
        use crate::view::tests::{MS, batch, buffer_text, proc, qos_sample};
        use crate::view::theme::Theme;

        const GIB: u64 = 1 << 30;

        /// `n` CPUs with shares that differ from CPU to CPU (every kind somewhere), 24 GiB of
        /// memory of which 6.5 are used, 2 GiB of swap of which 256 MiB are used.
        fn host(n: u32) -> HostInfo {
            HostInfo {
                hostname: "db1".into(),
                kernel: "6.18.0".into(),
                uptime_s: 93_784,
                load: [0.52, 0.40, 0.31],
                cpu_busy_pct: Some(37.5),
                mem_total_kib: 24 * 1024 * 1024,
                mem_avail_kib: 16 * 1024 * 1024,
                cpus: (0..n)
                    .map(|c| {
                        let k = f64::from(c % 7);
                        CpuShare {
                            iowait: if c % 3 == 1 { 4.0 } else { 0.0 },
                            irq: if c % 4 == 2 { 3.0 } else { 0.0 },
                            steal: if c % 5 == 3 { 2.0 } else { 0.0 },
                            ..share(c, 10.0 + 9.0 * k, 2.0 + 2.0 * k)
                        }
                    })
                    .collect(),
                mem: Some(MemInfo {
                    total: 24 * GIB,
                    free: 4 * GIB,
                    available: 16 * GIB,
                    buffers: GIB / 2,
                    cached: 13 * GIB,
                    swap_total: 2 * GIB,
                    swap_free: 2 * GIB - GIB / 4,
                }),
                psi: None,
            }
        }

        /// 40 processes (more than any table here shows), `n` CPUs; with `qos`, the first one
        /// is pinned, so a QoS pane goes under the table when the screen is narrow.
        fn busy(n: u32, qos: bool) -> App {
            let mut a = crate::view::tests::app();
            a.host = Some(host(n));
            let procs: Vec<ProcInfo> = (0..40)
                .map(|i| proc(1000 + i, "worker", &format!("worker --shard {i}")))
                .collect();
            if qos {
                a.model.table.pin_pid(1000);
            }
            for seq in 1..=20 {
                let rows: Vec<(u32, [u64; 5])> = (0..40u32)
                    .map(|i| (1000 + i, [u64::from(40 - i) * MS / 10; 5]))
                    .collect();
                let mut b = batch(seq, &rows, &procs);
                if qos {
                    b.pinned = vec![1000];
                    b.qos = QosBatch {
                        procs: vec![qos_sample(1000, false)],
                        request_model: true,
                        ..Default::default()
                    };
                }
                a.update(Msg::Batch(Box::new(b)));
            }
            a
        }

        fn text_with(app: &App, theme: Theme, w: u16, h: u16) -> String {
            let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
            t.draw(|f| crate::view::render(app, &theme, f)).unwrap();
            buffer_text(t.backend().buffer())
        }

        fn text(app: &App, w: u16, h: u16) -> String {
            text_with(app, Theme::default(), w, h)
        }

        /// Rows of the process table: the lines under its header row that show a process.
        fn table_rows(t: &str) -> usize {
            t.lines()
                .skip_while(|l| !l.contains("COMMAND"))
                .filter(|l| l.contains("worker --shard"))
                .count()
        }

        #[test]
        fn at_80x24_the_table_keeps_ten_rows() {
            // Without meters (no per-CPU reading yet): what the table gets today.
            let mut a = busy(2, false);
            a.host.as_mut().unwrap().cpus.clear();
            assert_eq!(table_rows(&text(&a, 80, 24)), 20);
            let mut q = busy(2, true);
            q.host.as_mut().unwrap().cpus.clear();
            assert_eq!(table_rows(&text(&q, 80, 24)), 13);
            // With them, whatever the CPUs, with or without a QoS pane under the table.
            for n in [1, 2, 4, 6, 8, 9, 12, 16, 24, 32, 64, 128, 256] {
                for qos in [false, true] {
                    let t = text(&busy(n, qos), 80, 24);
                    let rows = table_rows(&t);
                    assert!(rows >= 10, "{n} CPUs, qos {qos}: {rows} rows\n{t}");
                }
            }
            let t = text(&busy(2, false), 80, 24);
            assert_eq!(table_rows(&t), 19, "{t}");
            let t = text(&busy(2, true), 80, 24);
            assert_eq!(table_rows(&t), 12, "{t}");
        }

        #[test]
        fn two_cpus_80x24() {
            let t = text(&busy(2, false), 80, 24);
            let meters = t.lines().nth(1).unwrap_or_default();
            // CPU 1: 19% user, 4% system, 4% iowait.
            assert!(meters.starts_with("0[||  "), "{t}");
            assert!(meters.contains(" 1[") && meters.contains("27.0%]"), "{t}");
            // Used: 24 - 4 free - 0.5 buffers - 13 cache.
            assert!(
                meters.contains("Mem[") && meters.contains("6.5G/24.0G]"),
                "{t}"
            );
            assert!(
                meters.contains("Swp[") && meters.contains("256M/2.0G]"),
                "{t}"
            );
            // The memory meter replaces the text line's memory.
            assert!(!t.contains("Mem 8.0/24.0G"), "{t}");
            insta::assert_snapshot!(t);
        }

        #[test]
        fn two_cpus_200x50() {
            let t = text(&busy(2, false), 200, 50);
            let meters = t.lines().nth(1).unwrap_or_default();
            assert!(meters.contains(" 1[") && meters.contains("Swp["), "{t}");
            insta::assert_snapshot!(t);
        }

        #[test]
        fn sixty_four_cpus_200x50() {
            let t = text(&busy(64, false), 200, 50);
            // Four columns of sixteen, numbered down each column.
            let first = t.lines().nth(1).unwrap_or_default();
            for c in [" 0[", "16[", "32[", "48["] {
                assert!(first.contains(c), "{c}: {t}");
            }
            let last = t.lines().nth(16).unwrap_or_default();
            assert!(last.contains("15[") && last.contains("63["), "{t}");
            assert!(
                t.lines().nth(17).unwrap_or_default().starts_with("Mem["),
                "{t}"
            );
            assert_eq!(table_rows(&t), 20, "the top 20, all of them: {t}");
            insta::assert_snapshot!(t);
        }

        #[test]
        fn ascii_meters() {
            let ascii = Theme {
                ascii: true,
                ..Theme::default()
            };
            let t = text_with(&busy(2, false), ascii, 80, 24);
            assert!(t.is_ascii(), "{t}");
            // CPU 1's system time after its user time.
            let meters = t.lines().nth(1).unwrap_or_default();
            assert!(meters.contains(" 1[|||#  "), "{t}");
            insta::assert_snapshot!(t);
            let wide = text_with(&busy(64, false), ascii, 200, 50);
            assert!(wide.is_ascii(), "{wide}");
            for kind in ['#', '.', '*', '%'] {
                assert!(
                    wide.lines().take(17).any(|l| l.contains(kind)),
                    "{kind}: {wide}"
                );
            }
            let short = text_with(&busy(64, false), ascii, 80, 23);
            assert!(short.is_ascii(), "{short}");
        }

        #[test]
        fn below_24_rows_one_line() {
            let t = text(&busy(2, false), 80, 23);
            let line = t.lines().nth(1).unwrap_or_default();
            assert_eq!(
                line, "CPUs 0 12% 1 27%  Mem 6.5G/24.0G  Swp 256M/2.0G",
                "{t}"
            );
            assert!(
                t.lines()
                    .nth(2)
                    .unwrap_or_default()
                    .starts_with("CPU 37.5% of 2")
            );
            // Too many CPUs for their numbers: a cell each, at 110 columns with memory and swap.
            let t = text(&busy(64, false), 110, 23);
            let line = t.lines().nth(1).unwrap_or_default();
            assert!(line.starts_with("CPUs 0-63 "), "{t}");
            assert!(line.ends_with("  Mem 6.5G/24.0G  Swp 256M/2.0G"), "{t}");
            assert_eq!(
                line.chars()
                    .filter(|c| ('\u{2581}'..='\u{2588}').contains(c))
                    .count(),
                64,
                "{t}"
            );
            insta::assert_snapshot!(t);
            // At 80 columns, the busiest of each two, and memory.
            let t = text(&busy(64, false), 80, 23);
            let line = t.lines().nth(1).unwrap_or_default();
            assert!(line.starts_with("CPUs 0-63 (busiest of 2) "), "{t}");
            assert!(line.ends_with("  Mem 6.5G/24.0G"), "{t}");
            insta::assert_snapshot!("compact_64_cpus_80x23", t);
            // 256 CPUs: a cell for the busiest of each seven, and memory.
            let t = text(&busy(256, false), 80, 23);
            let line = t.lines().nth(1).unwrap_or_default();
            assert!(line.starts_with("CPUs 0-255 (busiest of 7) "), "{t}");
            assert!(line.ends_with("  Mem 6.5G/24.0G"), "{t}");
            // The smallest screens keep every line for the table.
            let t = text(&busy(2, false), 80, 15);
            assert!(
                t.lines()
                    .nth(1)
                    .unwrap_or_default()
                    .starts_with("CPU 37.5%"),
                "{t}"
            );
        }
    }
}
