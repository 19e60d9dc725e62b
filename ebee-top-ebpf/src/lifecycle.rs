//! Process lifecycle: exec and exit events, so names of short-lived processes survive and a
//! reused pid never inherits the metadata of a dead process.

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use ebee_shared::lifecycle::{EVENT_EXEC, EVENT_EXIT, LifecycleEvent};

use crate::maps::{EXIT_HAS_GROUP_DEAD, LIFECYCLE, count_drop, global};

#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    crate::exit_code(try_sched_process_exit(&ctx))
}

/// Nothing here can fail: a full ring buffer is a loss, counted as one.
#[inline(always)]
fn try_sched_process_exit(ctx: &BtfTracePointContext) -> Result<u32, i64> {
    if crate::qos::forget_stack(ctx.arg(0)).is_err() {
        count_drop(ebee_shared::drops::PROG_ERRORS);
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, pid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    let last = if global(&EXIT_HAS_GROUP_DEAD) != 0 {
        // (task, group_dead): the whole thread group is gone.
        let group_dead: u64 = ctx.arg(1);
        group_dead & 0xff != 0
    } else {
        // Older kernels: the leader's exit stands for the process.
        pid == tgid
    };
    if last {
        emit(EVENT_EXIT, tgid, pid);
    }
    Ok(0)
}

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(_ctx: BtfTracePointContext) -> i32 {
    crate::exit_code(try_sched_process_exec())
}

/// As [`try_sched_process_exit`].
#[inline(always)]
fn try_sched_process_exec() -> Result<u32, i64> {
    let pid_tgid = bpf_get_current_pid_tgid();
    emit(EVENT_EXEC, (pid_tgid >> 32) as u32, pid_tgid as u32);
    Ok(0)
}

#[inline(always)]
fn emit(kind: u32, tgid: u32, pid: u32) {
    let ev = LifecycleEvent {
        kind,
        tgid,
        pid,
        flags: 0,
        ts: crate::now_ns(),
        comm: bpf_get_current_comm().unwrap_or_default(),
    };
    if LIFECYCLE.output::<LifecycleEvent>(&ev, 0).is_err() {
        count_drop(ebee_shared::drops::LIFECYCLE_LOST);
    }
}
