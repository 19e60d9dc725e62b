//! ebee-top's entry point: parse flags, check what loading needs, pick the front-end, run; any
//! error becomes one line and an exit code.

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory as _, FromArgMatches as _};
use ebee_top::cli::{Cli, Command};
use ebee_top::{exit, frontend};

fn main() {
    ebee_top::os::residency::no_fault_around();
    ebee_top::os::residency::big_blocks_mapped();
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
    let (mut cli, matches) = match parsed {
        Ok(c) => c,
        Err(e) => {
            // --help and --version are "errors" that print to stdout and exit 0.
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let cfg = screen_config(&mut cli, &matches).unwrap_or_default();
    if let Err(e) = run(&cli, &cfg) {
        eprintln!("ebee-top: {e:#}");
        std::process::exit(exit::code_for(&e));
    }
}

fn run(cli: &Cli, cfg: &frontend::config::Loaded) -> anyhow::Result<()> {
    // Replay and export read a file: no privileges, nothing loaded.
    match &cli.command {
        Some(Command::Replay(a)) => return frontend::replay::run(a, cfg),
        Some(Command::Export(a)) => return frontend::export::run(a),
        Some(Command::Serve(a)) => {
            // The port and the folder first: a port in use or a folder we must not write
            // into is one line before anything is loaded.
            let endpoint = match &a.listen {
                Some(l) => Some(
                    frontend::metrics::Endpoint::bind(l, a.listen_group.as_deref())?
                        .secure(a.web_config.as_deref())?,
                ),
                None => None,
            };
            if let Some(d) = &a.record_dir {
                ebee_top::record::dir::prepare(d)?;
            }
            ebee_top::probes::preflight::check_live()?;
            return frontend::metrics::serve(a, endpoint);
        }
        Some(Command::Completions { shell }) => {
            return frontend::assets::completions(*shell, &mut std::io::stdout().lock());
        }
        Some(Command::Manpage) => return frontend::assets::manpage(&mut std::io::stdout().lock()),
        None => {}
    }
    let endpoint = frontend::metrics::bind(
        cli.listen.as_ref(),
        cli.listen_group.as_deref(),
        cli.web_config.as_deref(),
    )?;
    ebee_top::probes::preflight::check_live()?;
    if cli.print_maps {
        frontend::maps::run(cli)
    } else if cli.batch {
        frontend::lines::run(cli, endpoint)
    } else {
        frontend::live::run(cli, endpoint, cfg)
    }
}

/// The settings file, for the screen (live or a replay) only: read once, its warning (one
/// line) printed before the terminal is taken (the status line repeats it), and its interval
/// and colours put into `cli` where no flag gave them: flags win.
fn screen_config(cli: &mut Cli, m: &ArgMatches) -> Option<frontend::config::Loaded> {
    let given = |m: &ArgMatches, id| m.value_source(id) == Some(ValueSource::CommandLine);
    let live = cli.command.is_none() && !cli.batch && !cli.print_maps;
    let (args, sub) = match &mut cli.command {
        Some(Command::Replay(a)) => (&mut a.screen, m.subcommand_matches("replay")?),
        _ if live => (&mut cli.screen, m),
        _ => return None,
    };
    let cfg = frontend::config::load(args.no_config);
    if let Some(w) = &cfg.warning {
        eprintln!("ebee-top: warning: {w}");
    }
    if let (Some(c), false) = (cfg.settings.color, given(sub, "color")) {
        args.color = frontend::color_arg(c);
    }
    // A recording's interval is its own.
    if let (Some(d), true, false) = (cfg.settings.interval, live, given(m, "delay")) {
        cli.delay = d;
    }
    Some(cfg)
}
