//! `ebee-top completions SHELL` and `ebee-top manpage`: the shell completions and the man page,
//! generated from the clap definitions (clap_complete, clap_mangen) so they never disagree with
//! the flags. The Debian package (`cargo xtask deb`) installs both.

use anyhow::Context as _;
use clap::CommandFactory as _;

use crate::cli::Cli;

/// Write the completion script for `shell` to `out`.
pub fn completions(
    shell: clap_complete::Shell,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "ebee-top", out);
    out.flush().context("writing the completions")
}

/// Write the man page (roff): ebee-top(1), with a section per subcommand.
pub fn manpage(out: &mut impl std::io::Write) -> anyhow::Result<()> {
    let cmd = Cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(out).context("writing the man page")?;
    man.render_name_section(out)
        .context("writing the man page")?;
    man.render_synopsis_section(out)
        .context("writing the man page")?;
    man.render_description_section(out)
        .context("writing the man page")?;
    man.render_options_section(out)
        .context("writing the man page")?;
    man.render_subcommands_section(out)
        .context("writing the man page")?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        writeln!(out, ".SH \"{}\"", format!("ebee-top {name}").to_uppercase())
            .context("writing the man page")?;
        if let Some(about) = sub.get_about() {
            writeln!(out, "{}", roff_escape(&about.to_string())).context("writing the man page")?;
        }
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let flag = match (arg.get_short(), arg.get_long()) {
                (Some(s), Some(l)) => format!("\\-{s}, \\-\\-{l}"),
                (None, Some(l)) => format!("\\-\\-{l}"),
                (Some(s), None) => format!("\\-{s}"),
                (None, None) => arg.get_id().to_string().to_uppercase(),
            };
            writeln!(out, ".TP\n\\fB{flag}\\fR").context("writing the man page")?;
            if let Some(h) = arg.get_help() {
                writeln!(out, "{}", roff_escape(&h.to_string())).context("writing the man page")?;
            }
        }
    }
    writeln!(
        out,
        ".SH \"EXIT STATUS\"\n0 success (also after SIGINT, SIGTERM or SIGHUP); 1 a runtime failure; \
         2 bad usage; 3 missing privileges to load eBPF (CAP_BPF + CAP_PERFMON, or root); 4 the \
         kernel lacks something needed; 5 a process given with \\-p does not exist; 6 a file \
         cannot be used as asked; 7 not a readable recording; 8 a recording from a newer \
         ebee\\-top; 9 \\-\\-listen cannot bind its address (a port in use, or a unix socket \
         path holding something other than a stale socket); 10 the \\-\\-web\\-config file \
         cannot be used."
    )
    .context("writing the man page")?;
    man.render_version_section(out)
        .context("writing the man page")?;
    out.flush().context("writing the man page")
}

/// Text for a roff paragraph: backslashes doubled, and a leading `.` or `'` (a request) and
/// `-` made literal.
fn roff_escape(s: &str) -> String {
    let t = s.replace('\\', "\\\\").replace('-', "\\-");
    match t.chars().next() {
        Some('.') | Some('\'') => format!("\\&{t}"),
        _ => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_man_page_documents_every_subcommand_and_flag() {
        let mut out = Vec::new();
        manpage(&mut out).unwrap();
        let man = String::from_utf8(out).unwrap();
        assert!(
            man.starts_with(".ie") || man.starts_with(".TH"),
            "{}",
            &man[..80]
        );
        for s in [
            "EBEE-TOP SERVE",
            "EBEE-TOP REPLAY",
            "EBEE-TOP EXPORT",
            "\\-\\-listen",
            "\\-\\-metrics\\-top",
            "EXIT STATUS",
        ] {
            assert!(man.contains(s), "no {s} in the man page");
        }
        assert!(!man.contains("EBEE-TOP MANPAGE"));
    }

    #[test]
    fn completions_name_the_subcommands() {
        let mut out = Vec::new();
        completions(clap_complete::Shell::Bash, &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("serve") && s.contains("--listen"));
    }

    #[test]
    fn roff_requests_are_escaped() {
        assert_eq!(roff_escape(".x a-b \\"), "\\&.x a\\-b \\\\");
    }
}
