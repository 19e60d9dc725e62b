//! `cargo xtask bench overhead`: what the syscall hooks add to every process. `ebee-bench
//! overhead` times tight syscall loops (getppid, and request/response over loopback TCP) with
//! no monitor, ebee-top loaded, empty hooks, another process pinned and the loop pinned, each
//! mode once per round; the table gives medians and what each adds per syscall.

use std::fmt::Write as _;

use anyhow::Result;

use super::{ebee_bench, header, load_avg, num, publish, table_head};

pub fn run(calls: u64, rounds: u32) -> Result<()> {
    let mut body = String::new();
    header(
        &mut body,
        "Syscall overhead of the QoS hooks",
        &format!("cargo xtask bench overhead --calls {calls} --rounds {rounds}"),
        "",
    )?;
    writeln!(
        body,
        "Load average when it started: {} (the machine is shared; every mode runs once per \
         round, in turn, so noise hits them alike).\n",
        load_avg()
    )?;
    writeln!(
        body,
        "A tight loop in `ebee-load syscalls` timed by its own thread CPU clock. Modes: \
         **none** no eBPF loaded; **loaded** ebee-top's programs loaded and nothing pinned (no \
         syscall hook attached); **empty hooks** empty tp_btf programs on sys_enter and sys_exit \
         (the floor of any enter/exit design); **pinned other** ebee-top's hooks attached because \
         another process is pinned (what every unpinned process pays); **pinned self** the loop \
         itself pinned. No drain runs during a loop; BPF run-time statistics are off (ebee-top \
         turns them off while anything is pinned).\n"
    )?;
    for (kind, calls, what) in [
        ("getppid", calls, "one getppid per iteration"),
        (
            "tcp",
            calls / 10,
            "a request/response over loopback TCP per iteration (4 syscalls: write, read, \
             write, read on a connected pair; the server side counts as a request)",
        ),
    ] {
        let v = ebee_bench(&[
            "overhead",
            "--calls",
            &calls.to_string(),
            "--rounds",
            &rounds.to_string(),
            "--kind",
            kind,
        ])?;
        writeln!(body, "### `{kind}`: {what}, {calls} iterations per run\n")?;
        table_head(
            &mut body,
            &[
                "mode",
                "median ns/iteration",
                "min",
                "added (median)",
                "added per syscall",
            ],
        )?;
        let modes = v["modes"].as_array().cloned().unwrap_or_default();
        let base = modes
            .first()
            .map(|m| num(&m["stats"]["median_ns"]))
            .unwrap_or(f64::NAN);
        let per = if kind == "tcp" { 4.0 } else { 1.0 };
        for m in &modes {
            let med = num(&m["stats"]["median_ns"]);
            writeln!(
                body,
                "| {} | {:.1} | {:.1} | {:+.1} | {:+.1} |",
                m["mode"].as_str().unwrap_or("?"),
                med,
                num(&m["stats"]["min_ns"]),
                med - base,
                (med - base) / per
            )?;
        }
        writeln!(body)?;
    }
    publish("overhead", &body)
}
