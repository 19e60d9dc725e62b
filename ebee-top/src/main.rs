//! ebee-top's entry point: parse flags, check what loading needs, pick the front-end, run; any
//! error becomes one line and an exit code.

use clap::Parser as _;
use ebee_top::cli::{Cli, Command};
use ebee_top::{exit, frontend};

fn main() {
    ebee_top::os::residency::no_fault_around();
    ebee_top::os::residency::big_blocks_mapped();
    let cli = match Cli::try_parse() {
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
    if let Err(e) = run(&cli) {
        eprintln!("ebee-top: {e:#}");
        std::process::exit(exit::code_for(&e));
    }
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    // Replay and export read a file: no privileges, nothing loaded.
    match &cli.command {
        Some(Command::Replay(a)) => return frontend::replay::run(a),
        Some(Command::Export(a)) => return frontend::export::run(a),
        Some(Command::Serve(a)) => {
            // The port first: a port in use is one line before anything is loaded.
            let endpoint =
                frontend::metrics::Endpoint::bind(a.listen)?.secure(a.web_config.as_deref())?;
            ebee_top::probes::preflight::check_live()?;
            return frontend::metrics::serve(a, endpoint);
        }
        Some(Command::Completions { shell }) => {
            return frontend::assets::completions(*shell, &mut std::io::stdout().lock());
        }
        Some(Command::Manpage) => return frontend::assets::manpage(&mut std::io::stdout().lock()),
        None => {}
    }
    let endpoint = frontend::metrics::bind(cli.listen, cli.web_config.as_deref())?;
    ebee_top::probes::preflight::check_live()?;
    if cli.print_maps {
        frontend::maps::run(cli)
    } else if cli.batch {
        frontend::lines::run(cli, endpoint)
    } else {
        frontend::live::run(cli, endpoint)
    }
}
