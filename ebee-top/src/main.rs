//! ebee-top's entry point: parse flags, run, and turn any error into one line and an exit code.

use clap::Parser as _;

fn main() {
    let cli = match ebee_top::cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // --help and --version are "errors" that print to stdout and exit 0.
            let code = if e.use_stderr() {
                ebee_top::exit::USAGE
            } else {
                ebee_top::exit::OK
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    if let Err(e) = ebee_top::run::main(cli) {
        eprintln!("ebee-top: {e:#}");
        std::process::exit(ebee_top::exit::code_for(&e));
    }
}
