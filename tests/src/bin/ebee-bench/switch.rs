//! `switch`: the cost ebee-top adds to every context switch. `ebee-load pingpong` on CPU 1
//! (wall and CPU time per switch) with no monitor, with an empty sched_switch program (the
//! floor), with ebee-top (every pipeline, draining every 50 ms from CPU 0), and with ebee-top
//! and another process pinned; rounds interleave the modes. Then one run each of the floor and
//! ebee-top with BPF statistics on, for the programs' own run time per switch.

use std::process::Stdio;
use std::time::Duration;

use ebee_shared::prog_names;
use ebee_top::os::cgroup::Want;
use ebee_top::probes::{ProbeConfig, Probes};
use serde_json::json;

use crate::common::{ebee_load, ns_per_run, run_stats, sleeper};

/// One `ebee-load pingpong` run on CPU 1: (wall ns, CPU ns) per switch. With `probes`, they
/// drain every 50 ms while it runs, as ebee-top would.
fn pingpong(mut probes: Option<&mut Probes>, round_trips: u64) -> anyhow::Result<(f64, f64)> {
    let mut child = ebee_load()?
        .args([
            "pingpong",
            "--round-trips",
            &round_trips.to_string(),
            "--cpu",
            "1",
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    while child.try_wait()?.is_none() {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(p) = probes.as_deref_mut() {
            p.drain()?;
        }
    }
    let out = child.wait_with_output()?;
    let s = String::from_utf8_lossy(&out.stdout);
    let mut it = s.split_whitespace().map(str::parse::<f64>);
    match (it.next(), it.next()) {
        (Some(Ok(w)), Some(Ok(c))) => Ok((w, c)),
        _ => anyhow::bail!("ebee-load pingpong printed {s:?}"),
    }
}

/// `sched_switch`'s run time per switch over one ping-pong run with BPF statistics on, loaded
/// with `cgroups`, the per-thread mode `threads`, and the off-CPU split and culprits off with
/// `no_culprits`.
fn switch_ns_per_run(
    cgroups: Want,
    threads: bool,
    no_culprits: bool,
    round_trips: u64,
) -> anyhow::Result<(f64, u64)> {
    let mut p = Probes::load(
        ProbeConfig {
            bpf_stats: true,
            cgroups,
            no_culprits,
            ..Default::default()
        },
        Duration::from_millis(50),
    )?;
    p.set_threads(threads)?;
    let before = p.prog_stats_of(prog_names::SCHED_SWITCH);
    pingpong(Some(&mut p), round_trips)?;
    let after = p.prog_stats_of(prog_names::SCHED_SWITCH);
    let runs = after.run_count - before.run_count;
    Ok((ns_per_run(after.run_ns - before.run_ns, runs), runs))
}

/// Program run time per switch, from the kernel's BPF statistics: the empty floor program,
/// and ebee-top's with cgroups off, on (the default) and with the per-thread mode too;
/// `reps` runs of each, interleaved, medians.
fn bpf_stats(round_trips: u64, reps: u32) -> anyhow::Result<serde_json::Value> {
    let mut floor = Vec::new();
    let mut runs = (0, 0);
    let (mut off, mut on, mut threads) = (Vec::new(), Vec::new(), Vec::new());
    let mut no_culprits = Vec::new();
    for _ in 0..reps {
        let f = ebee_top::probes::SwitchFloor::attach(true)?;
        pingpong(None, round_trips)?;
        let st = f.stats();
        drop(f);
        floor.push(ns_per_run(st.run_ns, st.run_count));
        runs.0 = st.run_count;
        off.push(switch_ns_per_run(Want::Off, false, false, round_trips)?.0);
        let (ns, n) = switch_ns_per_run(Want::Auto, false, false, round_trips)?;
        on.push(ns);
        runs.1 = n;
        threads.push(switch_ns_per_run(Want::Auto, true, false, round_trips)?.0);
        no_culprits.push(switch_ns_per_run(Want::Auto, false, true, round_trips)?.0);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    Ok(json!({
        "reps": reps,
        "floor_ns_per_run": median(floor),
        "floor_runs": runs.0,
        "sched_switch_ns_per_run": median(on),
        "sched_switch_runs": runs.1,
        "cgroups_off_ns_per_run": median(off),
        "threads_ns_per_run": median(threads),
        "no_culprits_ns_per_run": median(no_culprits),
    }))
}

pub fn switch_cost(round_trips: u64, rounds: u32) -> anyhow::Result<serde_json::Value> {
    // The drains run here, on CPU 0, away from the ping-pong on CPU 1.
    ebee_tests::pin_to_cpu(0);
    let sleeper = sleeper()?;
    let other = sleeper.pid();
    let modes = [
        "none",
        "floor",
        "ebee_top",
        "ebee_top_pinned_other",
        "ebee_top_stats_on",
    ];
    let mut res: Vec<Vec<(f64, f64)>> = vec![Vec::new(); modes.len()];
    for _ in 0..rounds {
        res[0].push(pingpong(None, round_trips)?);
        {
            let _f = ebee_top::probes::SwitchFloor::attach(false)?;
            res[1].push(pingpong(None, round_trips)?);
        }
        let mut p = Probes::load(ProbeConfig::default(), Duration::from_millis(50))?;
        res[2].push(pingpong(Some(&mut p), round_trips)?);
        p.set_pins(&[other])?;
        res[3].push(pingpong(Some(&mut p), round_trips)?);
        drop(p);
        // The kernel's BPF statistics on all the time (what sampling them saves).
        let mut p = Probes::load(
            ProbeConfig {
                bpf_stats: true,
                ..Default::default()
            },
            Duration::from_millis(50),
        )?;
        res[4].push(pingpong(Some(&mut p), round_trips)?);
    }
    let stats = bpf_stats(round_trips, rounds.clamp(1, 3))?;
    drop(sleeper);
    Ok(json!({
        "round_trips": round_trips,
        "rounds": rounds,
        "modes": modes.iter().zip(&res).map(|(m, v)| json!({
            "mode": m,
            "wall": run_stats(v.iter().map(|r| r.0).collect()),
            "cpu": run_stats(v.iter().map(|r| r.1).collect()),
        })).collect::<Vec<_>>(),
        "bpf_stats": stats,
    }))
}
