//! `--print-maps`: load the programs, print every eBPF map with the bytes the kernel charges
//! for it (`memlock`), the memory pipeline's share, and which pipelines are on (with why one
//! is off).

use std::io::Write as _;

use crate::cli::Cli;
use crate::source::Live;

pub fn run(cli: &Cli) -> anyhow::Result<()> {
    let live = Live::start(super::probe_config(cli), cli.delay)?;
    let maps = live.probes().map_report()?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<14} {:<20} {:>5} {:>7} {:>8} {:>10}",
        "MAP", "TYPE", "KEY", "VALUE", "ENTRIES", "BYTES"
    )?;
    let mut total = 0;
    for m in &maps {
        total += m.memlock;
        writeln!(
            out,
            "{:<14} {:<20} {:>5} {:>7} {:>8} {:>10}",
            m.name, m.kind, m.key_size, m.value_size, m.max_entries, m.memlock
        )?;
    }
    writeln!(out, "{:<14} {:>54}", "total", total)?;
    // The memory pipeline's own share (its maps are the ones named MEM_*).
    let mem: u64 = maps
        .iter()
        .filter(|m| m.name.starts_with("MEM_"))
        .map(|m| m.memlock)
        .sum();
    writeln!(out, "{:<14} {:>54}", "of it MEM_*", mem)?;
    writeln!(
        out,
        "({} possible CPUs; per-CPU maps are charged once per CPU)",
        live.probes().ncpus()
    )?;
    // Which pipelines loaded, and why one did not: a kernel that lacks what one needs, or
    // refuses one of its programs, loses that pipeline only.
    writeln!(out)?;
    writeln!(out, "{:<14} STATUS", "PIPELINE")?;
    let off = live.probes().pipelines_off();
    for name in crate::probes::pipelines::NAMES {
        match off.iter().find(|o| o.name == name) {
            Some(o) => writeln!(out, "{name:<14} off: {}", o.reason)?,
            None => writeln!(out, "{name:<14} on")?,
        }
    }
    Ok(())
}
