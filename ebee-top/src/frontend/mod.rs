//! The ways to run ebee-top, each a front-end over the layers below: the interactive screen
//! (live in live.rs, a recording in replay.rs, both through the screen loop in screen/), batch
//! output (lines/), export of a recording (export.rs), `--print-maps` (maps.rs), and the
//! Prometheus endpoint (metrics/: beside the screen or batch mode, or headless as `serve`),
//! and the shell completions and man page (assets.rs).
//! `main.rs` picks one. Here are the pieces they share.

pub mod assets;
pub mod config;
pub mod export;
pub mod latency;
pub mod lines;
pub mod live;
pub mod maps;
pub mod metrics;
pub mod recording;
pub mod replay;
pub mod screen;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;

use crate::app::ColorMode;
use crate::cli::{Cli, ColorArg, ScreenArgs};
use crate::probes::ProbeConfig;
use crate::record::Timeline;
use crate::source::{Live, Source as _};
use crate::view::theme::{Colors, Theme};

/// The load-time options the flags ask for.
pub fn probe_config(cli: &Cli) -> ProbeConfig {
    ProbeConfig {
        shadow: cli.exact,
        trace: false,
        bpf_stats: !cli.no_bpf_stats,
        no_servers: cli.no_servers,
        no_culprits: cli.no_culprits,
        stats_sampled: true,
        cgroups: cgroups_want(cli.cgroups),
        syscalls_now: !cli.pids.is_empty(),
    }
}

/// The hierarchy `--cgroups` asks for.
pub fn cgroups_want(a: crate::cli::CgroupsArg) -> crate::os::cgroup::Want {
    use crate::cli::CgroupsArg as A;
    use crate::os::cgroup::Want;
    match a {
        A::Auto => Want::Auto,
        A::V1 => Want::V1,
        A::V2 => Want::V2,
        A::Off => Want::Off,
    }
}

/// Pin the processes given with `-p` (a missing one ends the run with exit code 5), and turn
/// on the per-thread mode with `-H`.
pub fn pin(source: &mut Live, cli: &Cli) -> anyhow::Result<()> {
    if !cli.pids.is_empty() {
        source.set_pins(&cli.pids)?;
    }
    if cli.threads {
        source.set_threads(true)?;
    }
    Ok(())
}

/// A flag set by SIGINT, SIGTERM or SIGHUP.
pub fn signal_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, flag.clone()).context("installing signal handlers")?;
    }
    Ok(flag)
}

/// Open a recording (a file, or a flight recorder's folder as one timeline) to play or
/// export: the damage found goes to stderr, one line each, and a recording with no complete
/// interval is refused (the typed error gives the exit code).
pub fn open_recording(path: &Path) -> anyhow::Result<Timeline> {
    let tl = Timeline::open(path)?;
    for d in tl.notes() {
        eprintln!("ebee-top: warning: {}: {d}", path.display());
    }
    Ok(tl)
}

/// How the screen is drawn, from `--color`, `--ascii` and the environment (NO_COLOR,
/// COLORTERM, TERM).
pub fn theme(a: &ScreenArgs) -> Theme {
    theme_for(color_mode(a.color), a.ascii)
}

/// The theme for a colour mode (`--color`, or the setup screen's).
pub fn theme_for(mode: ColorMode, ascii: bool) -> Theme {
    let env = |k: &str| std::env::var(k).ok();
    let colors = match mode {
        ColorMode::Auto => Colors::detect(
            env("NO_COLOR").as_deref(),
            env("COLORTERM").as_deref(),
            env("TERM").as_deref(),
        ),
        ColorMode::Never => Colors::None,
        ColorMode::C16 => Colors::Ansi16,
        ColorMode::C256 => Colors::Ansi256,
        ColorMode::Truecolor => Colors::TrueColor,
    };
    Theme { colors, ascii }
}

/// `--color` as the settings name it.
pub fn color_mode(a: ColorArg) -> ColorMode {
    match a {
        ColorArg::Auto => ColorMode::Auto,
        ColorArg::Never => ColorMode::Never,
        ColorArg::C16 => ColorMode::C16,
        ColorArg::C256 => ColorMode::C256,
        ColorArg::Truecolor => ColorMode::Truecolor,
    }
}

/// The settings' colour mode as `--color` would say it.
pub fn color_arg(m: ColorMode) -> ColorArg {
    match m {
        ColorMode::Auto => ColorArg::Auto,
        ColorMode::Never => ColorArg::Never,
        ColorMode::C16 => ColorArg::C16,
        ColorMode::C256 => ColorArg::C256,
        ColorMode::Truecolor => ColorArg::Truecolor,
    }
}

/// Give the screen's App what the settings file said (the flags have been merged in already
/// by `main`), and say on its status line what in the file could not be used.
/// One stderr line per optional pipeline that is off in this run, with why: batch mode and
/// `serve` say it before their first output.
pub fn say_pipelines_off(live: &crate::source::Live) {
    for off in live.probes().pipelines_off() {
        eprintln!("ebee-top: {off}");
    }
}

/// The pipelines that are off, as one status line for the screen (None: all on).
pub fn pipelines_off_line(off: &[crate::probes::PipelineOff]) -> Option<String> {
    if off.is_empty() {
        return None;
    }
    let parts: Vec<String> = off
        .iter()
        .map(|o| format!("{} ({})", o.name, o.reason))
        .collect();
    Some(format!("off in this run: {}", parts.join("; ")))
}

pub fn apply_config(app: &mut crate::app::App, cfg: &config::Loaded, screen: &ScreenArgs) {
    let color = screen.color;
    app.apply_settings(cfg.settings.clone());
    // The settings' default, unless `--tree` says so anyway.
    app.tree = screen.tree || app.tree_default;
    app.settings_note = cfg.note();
    app.color = color_mode(color);
    if let Some(w) = &cfg.warning {
        app.status = Some(w.clone());
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn color_and_ascii_flags() {
        let t = |args: &[&str]| theme(&Cli::try_parse_from(args).unwrap().screen);
        assert_eq!(
            t(&["ebee-top", "--color", "256", "--ascii"]).colors,
            Colors::Ansi256
        );
        assert!(t(&["ebee-top", "--color", "256", "--ascii"]).ascii);
        for (v, want) in [
            ("never", Colors::None),
            ("16", Colors::Ansi16),
            ("truecolor", Colors::TrueColor),
        ] {
            assert_eq!(t(&["ebee-top", "--color", v]).colors, want);
        }
    }
}
