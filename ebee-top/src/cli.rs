//! Command-line flags (clap types only; what they mean to each front-end is decided there).
//! Parsing errors exit with code 2, like every other usage error.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::time::TimeSpec;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// top-style text.
    Text,
    /// JSON Lines: one object per interval (schema in the README).
    Json,
}

/// How much colour the screen uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorArg {
    /// From NO_COLOR, COLORTERM and TERM.
    Auto,
    /// None: bold and reverse only.
    Never,
    /// The 16 ANSI colours.
    #[value(name = "16")]
    C16,
    /// The 256-colour palette.
    #[value(name = "256")]
    C256,
    /// 24-bit colour.
    Truecolor,
}

/// Which cgroup hierarchy to follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum CgroupsArg {
    /// cgroup v2 when it is the only hierarchy; on a v1 or hybrid machine the cpuacct (or
    /// cpu) controller's v1 hierarchy.
    #[default]
    Auto,
    /// The v1 hierarchy of the cpuacct (or cpu) controller.
    V1,
    /// The unified (v2) hierarchy, also when mounted beside v1 (hybrid).
    V2,
    /// No cgroups: no CGROUP column, no cgroups view, nothing read per switch.
    Off,
}

/// Screen options shared by the live screen and replay.
#[derive(Clone, Copy, Debug, Args)]
pub struct ScreenArgs {
    /// Colours: auto (NO_COLOR, COLORTERM, TERM decide), never, 16, 256 or truecolor.
    #[arg(long, value_enum, default_value_t = ColorArg::Auto, value_name = "WHEN")]
    pub color: ColorArg,

    /// Only ASCII on screen: sparklines, borders and marks.
    #[arg(long)]
    pub ascii: bool,

    /// Leave the mouse to the terminal (its own selection): no clicks or wheel on the screen.
    #[arg(long)]
    pub no_mouse: bool,

    /// Open the process table as a tree (`t` on the screen; `tree` in the settings file).
    #[arg(long)]
    pub tree: bool,

    /// Neither read nor save the settings file ($XDG_CONFIG_HOME/ebee-top/config.toml).
    #[arg(long)]
    pub no_config: bool,
}

/// ebee-top: a top for Linux whose numbers come from eBPF programs in the kernel.
#[derive(Debug, Parser)]
#[command(name = "ebee-top", version, about, long_about = None,
          args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// Seconds between updates, like top's -d (minimum 0.01).
    #[arg(short = 'd', long = "delay", value_name = "SECS", default_value = "0.05",
          value_parser = parse_delay)]
    pub delay: Duration,

    /// Number of processes to show.
    #[arg(short = 'k', long = "top", value_name = "K", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub top: u32,

    /// Batch mode: print every interval to stdout instead of the interactive screen.
    #[arg(short = 'b', long)]
    pub batch: bool,

    /// Stop after this many intervals (default: run until interrupted); on the screen, close
    /// after drawing this many, as top's -n does.
    #[arg(short = 'n', long = "iterations", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: Option<u64>,

    /// Output format in batch mode.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Also keep an exact per-process count beside the sketch and report it (`cpu_exact` in
    /// JSON). Costs more per context switch; meant for checking the sketch.
    #[arg(long)]
    pub exact: bool,

    /// Do not turn on the kernel's BPF run-time statistics (they cost two clock reads per
    /// program run); ebee-top's own eBPF cost then shows as unknown.
    #[arg(long)]
    pub no_bpf_stats: bool,

    /// Leave the servers pipeline off: no socket tracepoints, so no SERVERS pane, no network
    /// bytes, and socket I/O pays nothing.
    #[arg(long)]
    pub no_servers: bool,

    /// Leave the off-CPU split (I/O-blocked, blocked, sleeping: IOW%) off; the verifier then
    /// drops its code from the context-switch program, so it costs nothing.
    #[arg(long)]
    pub no_culprits: bool,

    /// The cgroup hierarchy processes are grouped by (the CGROUP column, the cgroups view).
    #[arg(long, value_enum, default_value_t = CgroupsArg::Auto, value_name = "WHICH")]
    pub cgroups: CgroupsArg,

    /// Threads instead of processes: one row per thread (TID, the thread's name, its
    /// process), like top -H. `H` switches on the screen.
    #[arg(short = 'H', long)]
    pub threads: bool,

    /// Only the processes of USER (a name or a uid) on the screen, as top and htop; `u` picks
    /// another there.
    #[arg(
        short = 'u',
        long = "user",
        value_name = "USER",
        conflicts_with = "batch"
    )]
    pub user: Option<String>,

    /// Pin processes for syscall and request QoS (at most 8): per-syscall latency histograms,
    /// and for servers requests per second and latency percentiles.
    #[arg(short = 'p', long = "pid", value_name = "PID[,PID...]", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    pub pids: Vec<u32>,

    /// On exit, write how late each interval reached the screen (or stdout) as one JSON
    /// object to FILE: p50/p90/p99/max from the kernel closing it to the Batch arriving
    /// ("drain") and to its frame or line being written ("shown").
    #[arg(long, value_name = "FILE")]
    pub latency_report: Option<PathBuf>,

    /// Load the programs, print every eBPF map with the memory the kernel charges for it, and
    /// exit.
    #[arg(long)]
    pub print_maps: bool,

    /// Record every interval to FILE (created 0600; replay it with `ebee-top replay FILE`).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,

    /// Replace an existing recording file (never a symlink or a directory).
    #[arg(long, requires = "record")]
    pub force: bool,

    /// Stop recording before the file grows past SIZE bytes (suffixes K, M, G: KiB, MiB,
    /// GiB; at least 64K). Monitoring goes on.
    #[arg(long, value_name = "SIZE", requires = "record", value_parser = parse_size)]
    pub record_max_size: Option<u64>,

    /// With --record-max-size: rotate instead of stopping, keeping KEEP finished files
    /// (FILE.1 the newest).
    #[arg(long, value_name = "KEEP", requires = "record_max_size",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub record_rotate: Option<u32>,

    /// Also serve Prometheus metrics at http://ADDR:PORT/metrics while the screen or batch
    /// mode runs (an IP address and port: 127.0.0.1:9477, [::1]:9477; 0.0.0.0 exposes them to
    /// the network), or on a unix socket: unix:PATH (mode 0660, see --listen-group).
    #[arg(long, value_name = "ADDR:PORT|unix:PATH", value_parser = parse_listen)]
    pub listen: Option<ListenAddr>,

    /// With --listen unix:PATH: the group of the socket file (a name or a gid), whose members
    /// may connect; default the group ebee-top runs as.
    #[arg(long, value_name = "GROUP", requires = "listen")]
    pub listen_group: Option<String>,

    /// With --listen: TLS, client certificates, basic auth and headers from a Prometheus
    /// exporter-toolkit web config (node_exporter's --web.config.file format).
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub web_config: Option<PathBuf>,

    /// With --listen: processes exported per measure (CPU, memory, wait, disk read, disk
    /// write); the number of series is bounded by five times this.
    #[arg(long, value_name = "K", default_value_t = DEFAULT_METRICS_TOP, requires = "listen",
          value_parser = clap::value_parser!(u32).range(1..=MAX_METRICS_TOP as i64))]
    pub metrics_top: u32,

    #[command(flatten)]
    pub screen: ScreenArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Where `--listen` serves: a TCP address and port, or a unix socket's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "{a}"),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Longest unix socket path the kernel takes (`sun_path` is 108 bytes with its NUL).
pub const MAX_UNIX_PATH: usize = 107;

/// `ADDR:PORT` or `unix:PATH`.
fn parse_listen(s: &str) -> Result<ListenAddr, String> {
    if let Some(p) = s.strip_prefix("unix:") {
        if p.is_empty() || p.ends_with('/') {
            return Err(format!("'{s}': unix:PATH needs the socket file's path"));
        }
        if p.len() > MAX_UNIX_PATH {
            return Err(format!(
                "'{s}': a unix socket path is at most {MAX_UNIX_PATH} bytes"
            ));
        }
        return Ok(ListenAddr::Unix(PathBuf::from(p)));
    }
    s.parse().map(ListenAddr::Tcp).map_err(|_| {
        format!("'{s}' is neither an IP address and port (127.0.0.1:9477) nor unix:PATH")
    })
}

/// Default of `--metrics-top`.
pub const DEFAULT_METRICS_TOP: u32 = 20;
/// Largest `--metrics-top`: keeps a scrape at a few thousand series at most.
pub const MAX_METRICS_TOP: u32 = 500;

/// Subcommands; without one, ebee-top monitors the live kernel.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Play a recording back on the same screens (no privileges needed).
    Replay(ReplayArgs),
    /// Write a recording's intervals as JSON Lines (the batch schema), CSV or text.
    Export(ExportArgs),
    /// Run headless: no terminal, serve Prometheus metrics at http://ADDR:PORT/metrics until
    /// SIGTERM or SIGINT; messages go to stderr.
    Serve(ServeArgs),
    /// Print a completion script for SHELL to stdout (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout; the Debian package installs it.
    #[command(hide = true)]
    Manpage,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("job").args(["listen", "record_dir"]).required(true)
    .multiple(true)))]
pub struct ServeArgs {
    /// Where to serve the metrics: an IP address and port (127.0.0.1:9477, [::1]:9477;
    /// 0.0.0.0:9477 exposes them to the network), or a unix socket: unix:PATH (mode 0660, see
    /// --listen-group).
    #[arg(long, value_name = "ADDR:PORT|unix:PATH", value_parser = parse_listen)]
    pub listen: Option<ListenAddr>,

    /// Flight recorder: record every interval into DIR without end (created 0700 if
    /// missing), a new file every hour, the oldest files deleted to keep within --retain and
    /// --retain-for. `ebee-top replay DIR` plays the folder as one timeline.
    #[arg(long, value_name = "DIR")]
    pub record_dir: Option<PathBuf>,

    /// With --record-dir: most space the recordings may take on disk (K, M, G, T; at least
    /// 1M).
    #[arg(long, value_name = "SIZE", default_value = "1G", requires = "record_dir",
          value_parser = parse_retain)]
    pub retain: u64,

    /// With --record-dir: delete recordings older than this (like 7d, 36h, 90m).
    #[arg(long, value_name = "DURATION", default_value = "7d", requires = "record_dir",
          value_parser = parse_retain_for)]
    pub retain_for: Duration,

    /// With --listen unix:PATH: the group of the socket file (a name or a gid), whose members
    /// may connect; default the group ebee-top runs as.
    #[arg(long, value_name = "GROUP")]
    pub listen_group: Option<String>,

    /// TLS, client certificates, basic auth and headers from a Prometheus exporter-toolkit
    /// web config (node_exporter's --web.config.file format).
    #[arg(long, value_name = "FILE")]
    pub web_config: Option<PathBuf>,

    /// Seconds between intervals (minimum 0.01). Scrapes see the last closed interval.
    #[arg(short = 'd', long = "delay", value_name = "SECS", default_value = "1",
          value_parser = parse_delay)]
    pub delay: Duration,

    /// Processes exported per measure (CPU, memory, wait, disk read, disk write).
    #[arg(long, value_name = "K", default_value_t = DEFAULT_METRICS_TOP,
          value_parser = clap::value_parser!(u32).range(1..=MAX_METRICS_TOP as i64))]
    pub metrics_top: u32,

    /// Pin processes for syscall and request QoS (at most 8); their request counts and
    /// latency histograms are exported.
    #[arg(short = 'p', long = "pid", value_name = "PID[,PID...]", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    pub pids: Vec<u32>,

    /// Do not turn on the kernel's BPF run-time statistics (ebee-top's own eBPF run time is
    /// then not exported).
    #[arg(long)]
    pub no_bpf_stats: bool,

    /// Leave the servers pipeline off (no socket tracepoints; no server or network metrics).
    #[arg(long)]
    pub no_servers: bool,

    /// Leave the off-CPU split off (no I/O-blocked, blocked or sleep time).
    #[arg(long)]
    pub no_culprits: bool,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recording: a file, or a flight recorder's folder (`serve --record-dir`), played as
    /// one timeline.
    pub file: PathBuf,

    /// Playback speed, 0.25 to 16.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    pub speed: f64,

    /// Start at this time: HH:MM[:SS] (UTC, as on screen; its latest occurrence), HH:MM local,
    /// YYYY-MM-DD HH:MM[:SS] (UTC, or add "local"), +DUR from the start, -DUR before the end,
    /// or @UNIX_SECONDS.
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    pub from: Option<TimeSpec>,

    /// Start paused.
    #[arg(long)]
    pub paused: bool,

    /// Number of processes to show.
    #[arg(short = 'k', long = "top", value_name = "K", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub top: u32,

    #[command(flatten)]
    pub screen: ScreenArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// JSON Lines, exactly as `ebee-top -b --format json` prints them.
    Json,
    /// CSV of one table (--table), with a header row.
    Csv,
    /// top-style text, as `ebee-top -b` prints it.
    Text,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Table {
    /// One row per interval: time, length, switches, losses, own cost.
    Intervals,
    /// One row per process shown per interval (the top K by on-CPU time).
    Cpu,
    /// One row per process that ended.
    Exits,
    /// One row per process shown per interval (the top K by resident memory).
    Mem,
    /// One row per process shown per interval (the top K by run-queue wait).
    Wait,
    /// One row per process shown per interval (the top K by disk bytes read and written).
    Io,
    /// One row per process shown per interval (the top K by time blocked in the kernel: on
    /// I/O plus otherwise), with its sleep.
    Blocked,
    /// One row per (victim, culprit) pair of processes per interval (the top K by the
    /// run-queue wait the culprit caused the victim).
    WaitBy,
    /// One row per (victim, culprit) pair of cgroups per interval (the top K by wait).
    CgroupWaitBy,
    /// One row per server per interval (the top K by requests).
    Servers,
    /// One row per process shown per interval (the top K by socket bytes).
    Net,
    /// One row per cgroup per interval (the top K by on-CPU time).
    Cgroups,
    /// One row per thread per interval (the top K by on-CPU time; recordings made with -H).
    Threads,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The recording: a file, or a flight recorder's folder, exported as one timeline.
    pub file: PathBuf,

    #[arg(long, value_enum, default_value_t = ExportFormat::Json)]
    pub format: ExportFormat,

    /// The table to write as CSV.
    #[arg(long, value_enum, default_value_t = Table::Cpu)]
    pub table: Table,

    /// First interval to write (same forms as `replay --from`).
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    pub from: Option<TimeSpec>,

    /// Last interval to write (same forms).
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    pub to: Option<TimeSpec>,

    /// Processes per interval, as in batch mode.
    #[arg(short = 'k', long = "top", value_name = "K", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub top: u32,
}

/// Smallest --retain: a few files of the flight recorder.
pub const MIN_RETAIN: u64 = 1 << 20;

/// Smallest --record-max-size: room for the header and a few records.
pub const MIN_RECORD_SIZE: u64 = 64 * 1024;

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("'{s}': unknown size suffix (K, M, G, T)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (like 500M or 2G)"))?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < MIN_RECORD_SIZE as f64 || bytes > 1e18 {
        return Err(format!("'{s}' must be between 64K and an exabyte"));
    }
    Ok(bytes as u64)
}

fn parse_retain(s: &str) -> Result<u64, String> {
    let v = parse_size(s)?;
    if v < MIN_RETAIN {
        return Err(format!("'{s}' is below the smallest budget, 1M"));
    }
    Ok(v)
}

fn parse_retain_for(s: &str) -> Result<Duration, String> {
    let ms = crate::time::parse_duration_ms(s)?;
    if ms < 60_000 {
        return Err(format!("'{s}' is shorter than a minute"));
    }
    Ok(Duration::from_millis(ms))
}

fn parse_speed(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('x')
        .parse()
        .map_err(|_| format!("'{s}' is not a speed (0.25 to 16)"))?;
    if !(0.25..=16.0).contains(&v) {
        return Err(format!("speed {s} is outside 0.25 to 16"));
    }
    Ok(v)
}

fn parse_delay(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !secs.is_finite() || secs < 0.01 {
        return Err(format!("{s} is below the minimum of 0.01 seconds"));
    }
    if secs > 3600.0 {
        return Err(format!("{s} is above the maximum of 3600 seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_readme() {
        let c = Cli::try_parse_from(["ebee-top"]).unwrap();
        assert_eq!(c.delay, Duration::from_millis(50));
        assert_eq!(c.top, 20);
        assert!(!c.batch);
        assert_eq!(c.format, Format::Text);
    }

    #[test]
    fn bad_values_are_rejected() {
        for args in [
            &["ebee-top", "-d", "0.001"][..],
            &["ebee-top", "-d", "abc"],
            &["ebee-top", "-d", "NaN"],
            &["ebee-top", "-k", "0"],
            &["ebee-top", "-n", "0"],
            &["ebee-top", "--format", "xml"],
            &["ebee-top", "--bogus"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?} accepted");
        }
    }

    #[test]
    fn pids_parse_as_a_list() {
        let c = Cli::try_parse_from(["ebee-top", "-p", "12,34", "--pid", "56"]).unwrap();
        assert_eq!(c.pids, vec![12, 34, 56]);
        assert!(Cli::try_parse_from(["ebee-top"]).unwrap().pids.is_empty());
        for bad in ["0", "x", "1,,2", "-3"] {
            assert!(
                Cli::try_parse_from(["ebee-top", "-p", bad]).is_err(),
                "-p {bad} accepted"
            );
        }
    }

    #[test]
    fn record_flags_and_subcommands() {
        let c = Cli::try_parse_from([
            "ebee-top",
            "-b",
            "--record",
            "/tmp/x",
            "--record-max-size",
            "1.5M",
            "--record-rotate",
            "3",
        ])
        .unwrap();
        assert_eq!(c.record.as_deref(), Some(std::path::Path::new("/tmp/x")));
        assert_eq!(c.record_max_size, Some(1_572_864));
        assert_eq!(c.record_rotate, Some(3));
        assert!(c.command.is_none());
        for bad in [
            &["ebee-top", "--force"][..],
            &["ebee-top", "--record-max-size", "1M"],
            &["ebee-top", "--record", "x", "--record-rotate", "2"],
            &["ebee-top", "--record", "x", "--record-max-size", "1k"],
            &["ebee-top", "--record", "x", "--record-max-size", "12Q"],
            &["ebee-top", "-b", "replay", "f"],
            &["ebee-top", "replay"],
            &["ebee-top", "replay", "f", "--speed", "32"],
            &["ebee-top", "replay", "f", "--from", "tomorrow"],
            &["ebee-top", "export", "f", "--format", "xml"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} accepted");
        }
        let c = Cli::try_parse_from(["ebee-top", "replay", "f", "--speed", "2x", "--from", "-1m"])
            .unwrap();
        match c.command {
            Some(Command::Replay(r)) => {
                assert_eq!(r.speed, 2.0);
                assert_eq!(r.from, Some(TimeSpec::FromEnd(60_000)));
            }
            other => panic!("{other:?}"),
        }
        let c = Cli::try_parse_from([
            "ebee-top", "export", "f", "--format", "csv", "--table", "exits", "--to", "+10s",
        ])
        .unwrap();
        match c.command {
            Some(Command::Export(e)) => {
                assert_eq!(e.format, ExportFormat::Csv);
                assert_eq!(e.table, Table::Exits);
                assert_eq!(e.to, Some(TimeSpec::FromStart(10_000)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn color_and_ascii_flags() {
        let c = Cli::try_parse_from(["ebee-top", "--color", "256", "--ascii"]).unwrap();
        assert_eq!(c.screen.color, ColorArg::C256);
        assert!(c.screen.ascii);
        for (v, want) in [
            ("never", ColorArg::Never),
            ("16", ColorArg::C16),
            ("truecolor", ColorArg::Truecolor),
        ] {
            let c = Cli::try_parse_from(["ebee-top", "--color", v]).unwrap();
            assert_eq!(c.screen.color, want);
        }
        assert!(Cli::try_parse_from(["ebee-top", "--color", "88"]).is_err());
        let c = Cli::try_parse_from(["ebee-top", "replay", "f", "--color", "never"]).unwrap();
        match c.command {
            Some(Command::Replay(r)) => assert_eq!(r.screen.color, ColorArg::Never),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn completions_and_manpage_parse() {
        let c = Cli::try_parse_from(["ebee-top", "completions", "bash"]).unwrap();
        assert!(matches!(
            c.command,
            Some(Command::Completions {
                shell: clap_complete::Shell::Bash
            })
        ));
        let c = Cli::try_parse_from(["ebee-top", "manpage"]).unwrap();
        assert!(matches!(c.command, Some(Command::Manpage)));
        assert!(Cli::try_parse_from(["ebee-top", "completions", "tcsh"]).is_err());
    }

    #[test]
    fn listen_flags_and_serve() {
        let c = Cli::try_parse_from(["ebee-top", "-b", "--listen", "127.0.0.1:9477"]).unwrap();
        assert_eq!(
            c.listen,
            Some(ListenAddr::Tcp("127.0.0.1:9477".parse().unwrap()))
        );
        assert_eq!(c.metrics_top, DEFAULT_METRICS_TOP);
        let c =
            Cli::try_parse_from(["ebee-top", "--listen", "[::1]:1", "--metrics-top", "5"]).unwrap();
        assert_eq!(c.metrics_top, 5);
        let c = Cli::try_parse_from(["ebee-top", "serve", "--listen", "0.0.0.0:9477"]).unwrap();
        match c.command {
            Some(Command::Serve(s)) => {
                assert_eq!(
                    s.listen,
                    Some(ListenAddr::Tcp("0.0.0.0:9477".parse().unwrap()))
                );
                assert_eq!(s.delay, Duration::from_secs(1));
                assert_eq!(s.record_dir, None);
                assert_eq!(s.metrics_top, DEFAULT_METRICS_TOP);
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            &["ebee-top", "--listen", "localhost"][..],
            &["ebee-top", "--listen", "1.2.3.4"],
            &["ebee-top", "--metrics-top", "5"],
            &["ebee-top", "--listen", "127.0.0.1:1", "--metrics-top", "0"],
            &[
                "ebee-top",
                "--listen",
                "127.0.0.1:1",
                "--metrics-top",
                "501",
            ],
            &["ebee-top", "serve"],
            &["ebee-top", "serve", "--retain", "2G"],
            &["ebee-top", "serve", "--record-dir", "d", "--retain", "100K"],
            &[
                "ebee-top",
                "serve",
                "--record-dir",
                "d",
                "--retain-for",
                "10s",
            ],
            &[
                "ebee-top",
                "serve",
                "--listen",
                "127.0.0.1:1",
                "--retain-for",
                "1d",
            ],
            &["ebee-top", "-b", "serve", "--listen", "127.0.0.1:1"],
            &["ebee-top", "--listen", "unix:"],
            &["ebee-top", "--listen", "unix:/run/"],
            &["ebee-top", "--listen-group", "prometheus"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_flight_recorder_flags() {
        let c = Cli::try_parse_from(["ebee-top", "serve", "--record-dir", "/var/lib/ebee-top"])
            .unwrap();
        match c.command {
            Some(Command::Serve(s)) => {
                assert_eq!(s.listen, None);
                assert_eq!(
                    s.record_dir.as_deref(),
                    Some(std::path::Path::new("/var/lib/ebee-top"))
                );
                assert_eq!(s.retain, 1 << 30);
                assert_eq!(s.retain_for, Duration::from_secs(7 * 86_400));
            }
            other => panic!("{other:?}"),
        }
        let c = Cli::try_parse_from([
            "ebee-top",
            "serve",
            "--listen",
            "127.0.0.1:9477",
            "--record-dir",
            "d",
            "--retain",
            "250M",
            "--retain-for",
            "36h",
        ])
        .unwrap();
        match c.command {
            Some(Command::Serve(s)) => {
                assert!(s.listen.is_some());
                assert_eq!(s.retain, 250 << 20);
                assert_eq!(s.retain_for, Duration::from_secs(36 * 3600));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn listen_on_a_unix_socket() {
        let c = Cli::try_parse_from([
            "ebee-top",
            "-b",
            "--listen",
            "unix:/run/ebee-top/metrics.sock",
            "--listen-group",
            "prometheus",
        ])
        .unwrap();
        assert_eq!(
            c.listen,
            Some(ListenAddr::Unix("/run/ebee-top/metrics.sock".into()))
        );
        assert_eq!(c.listen_group.as_deref(), Some("prometheus"));
        assert_eq!(
            c.listen.unwrap().to_string(),
            "unix:/run/ebee-top/metrics.sock"
        );
        let c = Cli::try_parse_from(["ebee-top", "serve", "--listen", "unix:m.sock"]).unwrap();
        match c.command {
            Some(Command::Serve(s)) => {
                assert_eq!(s.listen, Some(ListenAddr::Unix("m.sock".into())));
                assert_eq!(s.listen_group, None);
            }
            other => panic!("{other:?}"),
        }
        let long = format!("unix:/{}", "a".repeat(MAX_UNIX_PATH));
        let e = Cli::try_parse_from(["ebee-top", "--listen", &long]).unwrap_err();
        assert!(e.to_string().contains("at most 107 bytes"), "{e}");
    }

    #[test]
    fn batch_flags_parse() {
        let c = Cli::try_parse_from([
            "ebee-top", "-b", "-n", "3", "-d", "0.2", "-k", "5", "--format", "json",
        ])
        .unwrap();
        assert!(c.batch);
        assert_eq!(c.iterations, Some(3));
        assert_eq!(c.delay, Duration::from_millis(200));
        assert_eq!(c.top, 5);
        assert_eq!(c.format, Format::Json);
    }
}
