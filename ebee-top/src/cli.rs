//! Command-line flags (clap). Parsing errors exit with code 2, like every other usage error.

use std::time::Duration;

use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// top-style text.
    Text,
    /// JSON Lines: one object per interval (schema in the README).
    Json,
}

/// ebee-top: a top for Linux whose numbers come from eBPF programs in the kernel.
#[derive(Debug, Parser)]
#[command(name = "ebee-top", version, about, long_about = None)]
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

    /// Stop after this many intervals (batch mode; default: run until interrupted).
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

    /// Pin processes for syscall and request QoS (at most 8): per-syscall latency histograms,
    /// and for servers requests per second and latency percentiles.
    #[arg(short = 'p', long = "pid", value_name = "PID[,PID...]", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    pub pids: Vec<u32>,

    /// Load the programs, print every eBPF map with the memory the kernel charges for it, and
    /// exit.
    #[arg(long)]
    pub print_maps: bool,
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
