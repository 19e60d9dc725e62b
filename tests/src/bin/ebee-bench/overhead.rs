//! `overhead`: the cost ebee-top adds to every syscall. Tight syscall loops (`ebee-load
//! syscalls`, timed by the loop's own thread CPU clock) with no monitor, with ebee-top loaded
//! and nothing pinned, with empty sys_enter/sys_exit hooks (the floor), with another process
//! pinned, and pinned themselves; rounds interleave the modes so machine noise hits them alike.

use std::io::Write as _;
use std::process::Stdio;
use std::time::Duration;

use ebee_top::probes::{ProbeConfig, Probes};
use serde_json::json;

use crate::common::{ebee_load, run_stats, sleeper};

/// One run of `ebee-load syscalls`, optionally pinned (with `others`) before it starts.
fn loop_run(
    probes: Option<&mut Probes>,
    others: &[u32],
    pin_self: bool,
    calls: u64,
    kind: &str,
) -> anyhow::Result<f64> {
    let mut child = ebee_load()?
        .args(["syscalls", "--calls", &calls.to_string(), "--kind", kind])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    // Let the child set up (the tcp kind connects before waiting).
    std::thread::sleep(Duration::from_millis(100));
    if let Some(p) = probes {
        let mut pins = others.to_vec();
        if pin_self {
            pins.push(child.id());
        }
        p.set_pins(&pins)?;
    }
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?
        .write_all(b"g")?;
    let out = child.wait_with_output()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("ebee-load printed {s:?}"))
}

pub fn overhead(calls: u64, rounds: u32, kind: &str) -> anyhow::Result<serde_json::Value> {
    let sleeper = sleeper()?;
    let other = sleeper.pid();
    let modes = [
        "none",
        "loaded",
        "empty_hooks",
        "pinned_other",
        "pinned_self",
    ];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for _ in 0..rounds {
        res[0].push(loop_run(None, &[], false, calls, kind)?);
        let mut p = Probes::load(ProbeConfig::default(), Duration::from_millis(50))?;
        res[1].push(loop_run(Some(&mut p), &[], false, calls, kind)?);
        p.set_syscall_floor(true)?;
        res[2].push(loop_run(Some(&mut p), &[], false, calls, kind)?);
        p.set_syscall_floor(false)?;
        res[3].push(loop_run(Some(&mut p), &[other], false, calls, kind)?);
        res[4].push(loop_run(Some(&mut p), &[other], true, calls, kind)?);
    }
    drop(sleeper);
    Ok(json!({
        "kind": kind,
        "calls": calls,
        "rounds": rounds,
        "modes": modes.iter().zip(&res).map(|(m, v)| json!({"mode": m, "stats": run_stats(v.clone())})).collect::<Vec<_>>(),
    }))
}
