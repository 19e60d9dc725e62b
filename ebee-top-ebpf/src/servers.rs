//! The servers pipeline: every socket receive and send (`sock_recv_length`,
//! `sock_send_length`, tp_btf) charges its bytes to the process in the network sketch, and on
//! a server connection (TCP, local port one a process listens on) runs the request model keyed
//! by socket, counting each answered request in the server sketch and its latency in the
//! server's histogram. `inet_sock_set_state` keeps the listening-port bitmap and forgets
//! closed connections. Sockets that are not server connections cost one sketch update and a
//! few loads, no clock read and no hash lookup.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::btf_tracepoint, programs::BtfTracePointContext,
};
use ebee_shared::{
    ctl,
    servers::{
        AF_INET, AF_INET6, HIST_SLOTS, MSG_PEEK, NetSlot, PORT_WORDS, SLOT_INDEX, SOCK_STREAM,
        SrvConn, SrvOffsets, TCP_CLOSE, TCP_LISTEN, bucket, slot_of,
    },
};

use crate::maps::{
    CPU_STATE, NET_SKETCH, SRV_CONN_COUNT, SRV_CONNS, SRV_CPU, SRV_HIST, SRV_OFFSETS, SRV_PORTS,
    SRV_SKETCH, SRV_SLOT_OF,
};
use crate::{atomic_add, atomic_cmpxchg, present};

#[inline(always)]
fn offsets() -> SrvOffsets {
    // SAFETY: a valid static; volatile only stops the compiler from folding the defaults in.
    unsafe { core::ptr::read_volatile(&raw const SRV_OFFSETS) }
}

/// An empty asm block without `nomem`: a compiler barrier (the BPF backend cannot lower
/// `compiler_fence`).
#[inline(always)]
fn barrier() {
    // SAFETY: no instructions.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
}

#[btf_tracepoint(function = "sock_recv_length")]
pub fn sock_recv(ctx: BtfTracePointContext) -> i32 {
    // SAFETY: called by the kernel with the sock_recv_length arguments (sk, ret, flags).
    crate::exit_code(unsafe { try_sock_io(&ctx, false) })
}

#[btf_tracepoint(function = "sock_send_length")]
pub fn sock_send(ctx: BtfTracePointContext) -> i32 {
    // SAFETY: called by the kernel with the sock_send_length arguments (sk, ret, flags).
    crate::exit_code(unsafe { try_sock_io(&ctx, true) })
}

/// # Safety
/// `ctx` must be the sock_recv_length or sock_send_length tp_btf context.
#[inline(always)]
unsafe fn try_sock_io(ctx: &BtfTracePointContext, send: bool) -> Result<u32, i64> {
    let ret: i64 = ctx.arg(1);
    let ret = ret as i32;
    if ret <= 0 {
        return Ok(0);
    }
    if !send {
        let flags: i64 = ctx.arg(2);
        if flags as i32 & MSG_PEEK != 0 {
            return Ok(0);
        }
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if tgid == 0 {
        return Ok(0);
    }
    let busy = present(SRV_CPU.get_ptr_mut(0))?;
    let st = present(CPU_STATE.get_ptr(0))?;
    // Mark this CPU busy before reading its epoch: if an IPI moves the CPU to the next
    // interval while this run writes the old one, userspace waits for the mark to clear.
    // SAFETY: this CPU's value of a per-CPU array; the program does not nest on one CPU.
    unsafe { core::ptr::write_volatile(&raw mut (*busy).busy, 1) };
    barrier();
    // SAFETY: this CPU's value; `sched_switch` (with interrupts off) and `cpu_flip` write it.
    let epoch = unsafe { core::ptr::read_volatile(&raw const (*st).epoch) };
    let parity = ctl::parity(epoch) & 1;
    // This CPU's entry of `parity` in the sketch arrays (written once, before attaching).
    // SAFETY: as above.
    let entry = unsafe { core::ptr::read_volatile(&raw const (*st).entry[parity as usize]) };
    // SAFETY: the caller's guarantee.
    let r = unsafe { io_body(ctx, send, tgid, ret as u64, parity, entry) };
    barrier();
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(&raw mut (*busy).busy, 0) };
    r.map(|()| 0)
}

/// # Safety
/// As [`try_sock_io`].
#[inline(always)]
unsafe fn io_body(
    ctx: &BtfTracePointContext,
    send: bool,
    tgid: u32,
    bytes: u64,
    parity: u32,
    entry: u32,
) -> Result<(), i64> {
    let net = present(NET_SKETCH.get_ptr_mut(entry))?;
    let (rx_bytes, tx_bytes) = if send { (0, bytes) } else { (bytes, 0) };
    // SAFETY: this CPU's entry of the parity, written only by this CPU's runs of the socket
    // programs (which do not nest) while its interval is open.
    unsafe {
        (*net).add(NetSlot {
            tgid,
            flags: 0,
            rx_bytes,
            tx_bytes,
        })
    };
    let o = offsets();
    if o.valid == 0 {
        return Ok(());
    }
    let sk: *const u8 = ctx.arg(0);
    // Direct loads through the BTF-typed `struct sock` pointer at offsets from the kernel's
    // BTF, checked by the verifier: no helper call.
    // SAFETY: `sk` is the tracepoint's socket.
    let (family, ty, port) = unsafe {
        (
            core::ptr::read_volatile(sk.add(o.family as usize) as *const u16),
            core::ptr::read_volatile(sk.add(o.sk_type as usize) as *const u16),
            core::ptr::read_volatile(sk.add(o.num as usize) as *const u16) as u32,
        )
    };
    if (family != AF_INET && family != AF_INET6) || ty != SOCK_STREAM {
        return Ok(());
    }
    let w = present(SRV_PORTS.get_ptr((port >> 6) & (PORT_WORDS - 1)))?;
    // SAFETY: a valid array value; userspace and `sock_state` rewrite it while programs run.
    if unsafe { core::ptr::read_volatile(w) } & (1u64 << (port & 63)) == 0 {
        return Ok(());
    }
    let key = sk as u64;
    let Some(c) = SRV_CONNS.get_ptr_mut(key) else {
        // First sight of this connection (new, or open before ebee-top started). A receive
        // opens a request; a send first (a greeting) answers nothing.
        let mut c = SrvConn {
            start_ns: 0,
            tgid,
            flags: 0,
        };
        if !send {
            c.recv(crate::now_ns);
        }
        let sketch = present(SRV_SKETCH.get_ptr_mut(entry))?;
        if SRV_CONNS.insert(key, c, 0).is_err() {
            // SAFETY: this CPU's value, as above.
            unsafe { (*sketch).conns_full += 1 };
        } else {
            count_conn(tgid, 1, sketch);
        }
        return Ok(());
    };
    // SAFETY: a valid hash value (freed only after every program that may hold it is done).
    let c = unsafe { &mut *c };
    if c.tgid != tgid {
        // Handed to another process (descriptor passing, a fork): it holds the connection now.
        let sketch = present(SRV_SKETCH.get_ptr_mut(entry))?;
        count_conn(c.tgid, -1, sketch);
        count_conn(tgid, 1, sketch);
        c.tgid = tgid;
    }
    if !send {
        c.recv(crate::now_ns);
        return Ok(());
    }
    let Some(lat) = c.send(crate::now_ns) else {
        return Ok(());
    };
    let sketch = present(SRV_SKETCH.get_ptr_mut(entry))?;
    // SAFETY: this CPU's value, as above.
    unsafe { (*sketch).add(tgid, lat) };
    let e = present(SRV_SLOT_OF.get_ptr(tgid & (SLOT_INDEX - 1)))?;
    // SAFETY: a valid array value, rewritten by userspace as a whole word.
    match slot_of(unsafe { core::ptr::read_volatile(e) }, tgid) {
        Some(slot) => {
            let h = present(SRV_HIST.get_ptr_mut(parity * HIST_SLOTS as u32 + slot))?;
            // SAFETY: this CPU's value of a per-CPU array; `bucket` is below HIST_BUCKETS.
            unsafe {
                (*h).tgid = tgid;
                (*h).count += 1;
                (*h).buckets[bucket(lat)] += 1;
            }
        }
        // SAFETY: this CPU's value, as above.
        None => unsafe { (*sketch).unhistogrammed += 1 },
    }
    Ok(())
}

/// Add `d` to the open-connection count of `tgid`.
#[inline(always)]
fn count_conn(tgid: u32, d: i64, sketch: *mut ebee_shared::servers::SrvSketch) {
    match SRV_CONN_COUNT.get_ptr_mut(tgid) {
        // SAFETY: a valid hash value; other CPUs add to it too, so the add is atomic.
        Some(n) => unsafe { atomic_add(n.cast::<u64>(), d as u64) },
        None => {
            if SRV_CONN_COUNT.insert(tgid, d, 0).is_err() {
                // SAFETY: this CPU's entry of the parity, as above.
                unsafe { (*sketch).counts_full += 1 };
            }
        }
    }
}

#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn sock_state(ctx: BtfTracePointContext) -> i32 {
    // SAFETY: called by the kernel with the inet_sock_set_state arguments.
    crate::exit_code(unsafe { try_sock_state(&ctx) })
}

/// A TCP socket changes state (often in softirq context, so nothing per-CPU of the interval
/// is written here): a new listener's port is marked, a closed connection forgotten.
///
/// # Safety
/// `ctx` must be the inet_sock_set_state tp_btf context (sk, oldstate, newstate).
#[inline(always)]
unsafe fn try_sock_state(ctx: &BtfTracePointContext) -> Result<u32, i64> {
    let o = offsets();
    if o.valid == 0 {
        return Ok(0);
    }
    let sk: *const u8 = ctx.arg(0);
    let old: i64 = ctx.arg(1);
    let new: i64 = ctx.arg(2);
    let (old, new) = (old as i32, new as i32);
    if new == TCP_LISTEN {
        // SAFETY: `sk` is the tracepoint's socket, offsets from BTF.
        let port = unsafe { core::ptr::read_volatile(sk.add(o.num as usize) as *const u16) };
        let port = port as u32;
        let w = present(SRV_PORTS.get_ptr_mut((port >> 6) & (PORT_WORDS - 1)))?;
        let bit = 1u64 << (port & 63);
        // An atomic OR by compare-and-swap, with a constant bound as the verifier wants: a try
        // fails only when another listener's bit in the same word landed in between, so eight
        // tries are more than two CPUs can ever need.
        let mut i = 0;
        while i < 8 {
            // SAFETY: a valid array value.
            let cur = unsafe { core::ptr::read_volatile(w) };
            if cur & bit != 0 {
                break;
            }
            // SAFETY: as above.
            if unsafe { atomic_cmpxchg(w, cur, cur | bit) } == cur {
                break;
            }
            i += 1;
        }
        return Ok(0);
    }
    if new != TCP_CLOSE || old == TCP_LISTEN {
        // A listener that closes keeps its bit: another socket may listen on the same port
        // (SO_REUSEPORT), and a stale bit only matters to a client on that very port.
        return Ok(0);
    }
    let key = sk as u64;
    let Some(c) = SRV_CONNS.get_ptr(key) else {
        return Ok(0);
    };
    // SAFETY: a valid hash value.
    let tgid = unsafe { (*c).tgid };
    if SRV_CONNS.remove(key).is_ok()
        && let Some(n) = SRV_CONN_COUNT.get_ptr_mut(tgid)
    {
        // SAFETY: a valid hash value, added to atomically from every CPU.
        unsafe { atomic_add(n.cast::<u64>(), u64::MAX) };
    }
    Ok(0)
}
