//! Batch mode (`-b`, like top's): every interval written to stdout as it closes, as top-style
//! text or JSON Lines, drawn from the same Model as the screen. Export writes a recording's
//! intervals through the same writers.

mod json;
mod text;

use std::io::Write as _;

use anyhow::Context as _;

pub use json::{write_json, write_json_host};
pub use text::{write_text, write_text_host};

use super::latency::Latency;
use super::metrics::Endpoint;
use crate::cli::{Cli, Format};
use crate::model::Model;
use crate::os::host::{CpuShare, MemInfo, StatSampler};
use crate::source::{Live, Source, Tee};
use crate::time::monotonic_ns;

/// Syscalls listed per pinned process.
pub const QOS_TOP_SYSCALLS: usize = 5;

/// The machine as batch mode last read it: each CPU's time from the difference of two
/// readings of /proc/stat `span_ms` apart (the first at start), memory and swap from
/// /proc/meminfo at the second.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Host {
    pub cpus: Vec<CpuShare>,
    pub mem: Option<MemInfo>,
    /// Milliseconds between the two /proc/stat readings.
    pub span_ms: u64,
}

/// Reads [`Host`] as an interval closes, at most once per [`HOST_EVERY`]: /proc/stat's
/// counters move in 10 ms ticks, so a 50 ms interval's share of a CPU was 20% steps, and
/// generating /proc/stat (every CPU and interrupt) and /proc/meminfo each interval took a
/// sixteenth of ebee-top's own CPU at 50 ms.
struct HostSampler {
    stat: StatSampler,
    read_at: std::time::Instant,
    last: Option<Host>,
}

/// The least time between two readings of [`Host`] (the screen's meters read once a second).
const HOST_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl HostSampler {
    fn start() -> Self {
        Self {
            stat: StatSampler::start(),
            read_at: std::time::Instant::now(),
            last: None,
        }
    }

    /// The last reading while it is younger than [`HOST_EVERY`] (and there is one), else a
    /// new one. None when /proc/stat could not be read (now or at the previous reading): no
    /// numbers rather than made-up ones.
    fn read(&mut self) -> Option<&Host> {
        let now = std::time::Instant::now();
        let since = now.duration_since(self.read_at);
        if since < HOST_EVERY && self.last.is_some() {
            return self.last.as_ref();
        }
        self.read_at = now;
        self.last = self.stat.read().map(|s| Host {
            cpus: s.cpus,
            mem: crate::os::host::meminfo(),
            span_ms: since.as_millis() as u64,
        });
        self.last.as_ref()
    }
}

/// One interval of the Model in the chosen format.
pub fn write(
    out: &mut impl std::io::Write,
    m: &Model,
    k: usize,
    f: Format,
    host: Option<&Host>,
) -> std::io::Result<()> {
    match f {
        Format::Json => write_json_host(out, m, k, host),
        Format::Text => write_text_host(out, m, k, host),
    }
}

/// `ebee-top -b`: print every interval until `-n`, a signal, or a closed pipe; with
/// `--listen`, serve metrics meanwhile.
pub fn run(cli: &Cli, endpoint: Option<Endpoint>) -> anyhow::Result<()> {
    let mut live = Live::start(super::probe_config(cli), cli.delay)?;
    super::say_pipelines_off(&live);
    super::pin(&mut live, cli)?;
    let recorder = super::recording::start(cli, super::recording::stderr_notify())?;
    let metrics = super::metrics::start(endpoint, cli.metrics_top)?;
    let source: Box<dyn Source + Send> = match &recorder {
        Some(r) => Box::new(Tee {
            inner: live,
            tap: r.tap(),
        }),
        None => Box::new(live),
    };
    let mut source = super::metrics::wrap(source, metrics.as_ref());
    let quit = super::signal_flag()?;
    let mut model = Model::new();
    // Stdout's own buffer is a 1 KiB line buffer: a JSON line of a busy interval went out in
    // several writes. One write per interval, at the flush below.
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let k = cli.top as usize;
    let mut n = 0u64;
    let mut latency = Latency::new();
    let mut host = HostSampler::start();
    while !quit.load(std::sync::atomic::Ordering::Relaxed) {
        let Some(b) = source.next_batch()? else { break };
        let end_ns = b.end_ns;
        latency.drained(end_ns, monotonic_ns());
        model.ingest_owned(b);
        let h = host.read();
        match write(&mut out, &model, k, cli.format, h).and_then(|()| out.flush()) {
            Ok(()) => latency.shown(end_ns, monotonic_ns()),
            // The reader went away (`| head`): that is a normal end.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e).context("writing output"),
        }
        n += 1;
        if cli.iterations.is_some_and(|max| n >= max) {
            break;
        }
    }
    if let Some(r) = recorder {
        r.finish();
    }
    if let Some(path) = &cli.latency_report {
        latency.write_report(path)?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::batch::{Batch, MemStats, ProcInfo};
    use crate::model::Model;

    /// One interval: a process at half a CPU holding 300 MiB (64 MiB of it new), another
    /// holding 10 MiB.
    pub(crate) fn model() -> Model {
        let mut m = Model::new();
        m.ingest(
            &Batch::build(7, 0, 50_000_000)
                .wall_ms(1_700_000_000_123)
                .cpus(2, 0)
                .cpu(42, 25_000_000, &[])
                .proc(ProcInfo::named(42, "burn\"er"))
                .mem(42, 300 << 20, 64 << 20)
                .mem(43, 10 << 20, 0)
                .with(|b| {
                    b.mem_stats = MemStats {
                        available: true,
                        tracked: 2,
                        ..Default::default()
                    }
                })
                .done(),
        );
        m
    }
}
