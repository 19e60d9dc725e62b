//! Which pipelines are on, and why one is off: each optional pipeline (memory, servers,
//! syscalls, waits, disk I/O, cgroups) is loaded on its own, so a kernel that lacks what one
//! needs, or whose verifier refuses one program, loses that pipeline only. The reason is one
//! line, shown by `--print-maps`, on stderr in batch mode and on the screen's status line.

use aya::programs::ProgramError;

/// A pipeline that is off in this run, and why (one line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineOff {
    /// The pipeline's name as the README's kernel table spells it: `memory`, `servers`,
    /// `syscalls`, `waits`, `io`, `cgroups`.
    pub name: &'static str,
    pub reason: String,
}

impl std::fmt::Display for PipelineOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} pipeline off: {}", self.name, self.reason)
    }
}

/// Every pipeline name, in the order they are reported.
pub const NAMES: [&str; 7] = [
    "cpu", "memory", "servers", "syscalls", "waits", "io", "cgroups",
];

/// One line saying why the kernel refused program `prog`: the verifier's own verdict when it
/// wrote a log (the last line that is not its statistics), else the error.
pub(super) fn refused(prog: &str, e: &ProgramError) -> String {
    let detail = match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            match verdict(&log) {
                Some(v) => format!("{v} ({io_error})"),
                None => io_error.to_string(),
            }
        }
        other => {
            let mut msg = other.to_string();
            let mut src = std::error::Error::source(other);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            msg
        }
    };
    // One line, whatever the kernel wrote.
    let detail = detail.replace(['\n', '\r'], " ");
    format!("the kernel refused program {prog}: {detail}")
}

/// The verifier's verdict in its log: the last line that is not one of the statistics it
/// prints after it (instructions processed, time, stack depth).
fn verdict(log: &str) -> Option<&str> {
    log.lines().map(str::trim).rev().find(|l| {
        !l.is_empty()
            && !l.starts_with("processed ")
            && !l.starts_with("verification time")
            && !l.starts_with("stack depth")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_is_the_last_line_before_the_statistics() {
        let log = "0: R1=ctx() R10=fp0\n; let mm = ...\n12: (79) r2 = *(u64 *)(r1 +8)\n\
                   invalid bpf_context access off=8 size=8\n\
                   processed 13 insns (limit 1000000) max_states_per_insn 0 total_states 1\n\
                   verification time 27 usec\nstack depth 0\n";
        assert_eq!(
            verdict(log),
            Some("invalid bpf_context access off=8 size=8")
        );
        assert_eq!(verdict("\n\n"), None);
    }

    #[test]
    fn a_refusal_is_one_line_naming_the_program() {
        let e = ProgramError::IOError(std::io::Error::from_raw_os_error(libc::EINVAL));
        let r = refused("rss_stat", &e);
        assert!(
            r.starts_with("the kernel refused program rss_stat: "),
            "{r}"
        );
        assert!(!r.contains('\n'));
        let off = PipelineOff {
            name: "memory",
            reason: r,
        };
        assert!(off.to_string().starts_with("memory pipeline off: "));
    }
}
