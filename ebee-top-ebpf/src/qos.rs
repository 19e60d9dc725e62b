//! The QoS pipeline: `sys_enter` and `sys_exit` (tp_btf, one program per hook) follow the
//! syscalls of pinned processes only. Userspace attaches them when the first process is pinned
//! and detaches them when the last pin goes, so with nothing pinned no syscall pays anything.
//!
//! Every other process pays the pin check. At `sys_enter`: one helper call for the tgid and
//! one bit of a bitmap indexed by tgid (an inlined array lookup); only a set bit goes on to
//! the pin table (eight compares in one cache line) for the slot and generation. At
//! `sys_exit`: one byte chosen by the thread's `pt_regs` address (its kernel stack), set by
//! the `sys_enter` of pinned threads, and no helper call when it is 0.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use ebee_shared::{
    ctl,
    qos::{
        self, CONN_EPOCH_SHIFT, CONN_IN_REQUEST, Conn, FD_SLOTS, MAX_PINS, NR_OTHER, NR_SLOTS,
        OPEN_SLOTS, PIN_BIT_WORDS, PinStat, ROLE_MASK, ROLE_NOT_SOCKET, ROLE_OTHER, ROLE_SERVER,
        SYS_HISTS, THREAD_SLOTS, nr, pin_entry,
    },
};

use crate::maps::{
    CTL, QOS_CONNS, QOS_CPU, QOS_FDS, QOS_HIST, QOS_HIST_IDX, QOS_OFFSETS, QOS_OPEN, QOS_PIN,
    QOS_PIN_BITS, QOS_PIN_STATE, QOS_PINS, QOS_PORTS, QOS_SYS, QOS_THREADS,
};
use crate::{atomic_add, atomic_add32, atomic_cmpxchg, atomic_fetch_add, store_release_x86};

/// The pin slot and generation of `tgid`, if it is pinned.
#[inline(always)]
fn pinned(tgid: u32) -> Option<(u32, u32)> {
    // The bitmap first: every syscall of every process comes here, and for all but the
    // pinned ones one word and one bit settle it. A bit set for a pin being removed only
    // sends the call on to the table, which is the truth.
    let w = QOS_PIN_BITS.get_ptr((tgid >> 6) & (PIN_BIT_WORDS - 1))?;
    // SAFETY: a valid array value; userspace rewrites it while programs run.
    if unsafe { core::ptr::read_volatile(w) } & (1u64 << (tgid & 63)) == 0 {
        return None;
    }
    let t = QOS_PINS.get_ptr(0)?;
    let mut i = 0;
    while i < MAX_PINS {
        // SAFETY: `t` is the array's one value; `i` is below the array length. A volatile read
        // of each word: userspace rewrites the table while programs run.
        let e = unsafe { core::ptr::read_volatile(&raw const (*t).pins[i]) };
        if e as u32 == tgid {
            return Some((i as u32, (e >> 32) as u32));
        }
        i += 1;
    }
    None
}

/// The open-syscall filter byte of the thread whose `struct pt_regs` is at `regs`.
#[inline(always)]
fn open_byte(regs: u64) -> Option<*mut u8> {
    let t = QOS_OPEN.get_ptr_mut(0)?;
    // The verifier forbids shifts and masks on a pointer but, for a privileged program, turns
    // the difference of two pointers into a plain number: `regs` minus the (fixed) address
    // of this map value names the stack just as well. The subtraction is written out so the
    // compiler cannot fold it into the shifts.
    let mut d = regs;
    // SAFETY: register arithmetic only.
    unsafe {
        core::arch::asm!(
            "{d} -= {t}",
            d = inout(reg) d,
            t = in(reg) t as u64,
            options(pure, nomem, nostack),
        )
    };
    // SAFETY: `t` is the array's one value; the index is masked below OPEN_SLOTS.
    Some(unsafe {
        (&raw mut (*t).b)
            .cast::<u8>()
            .add(qos::open_slot(d) & (OPEN_SLOTS - 1))
    })
}

/// The pin table entry of `slot`, read again.
#[inline(always)]
fn pinned_at(slot: u32) -> Option<u64> {
    let t = QOS_PINS.get_ptr(0)?;
    // SAFETY: `t` is the array's one value; the index is masked below MAX_PINS.
    Some(unsafe { core::ptr::read_volatile(&raw const (*t).pins[slot as usize & (MAX_PINS - 1)]) })
}

#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> i32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some((_, gen_)) = pinned((pid_tgid >> 32) as u32) else {
        return 0;
    };
    let tid = pid_tgid as u32;
    let id: i64 = ctx.arg(1);
    let regs: u64 = ctx.arg(0);
    if let Some(o) = open_byte(regs) {
        // SAFETY: a valid array value. Written once per stack, so the line stays shared.
        unsafe {
            if core::ptr::read_volatile(o) == 0 {
                core::ptr::write_volatile(o, 1);
            }
        }
    }
    let Some(ts) = QOS_THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1)) else {
        return 0;
    };
    // exit and exit_group never return: leave no open syscall behind for a later thread that
    // gets the same slot.
    let tag = if id < 0 || id as u32 == nr::EXIT || id as u32 == nr::EXIT_GROUP {
        0
    } else {
        qos::thread_tag(gen_, id as u32)
    };
    // SAFETY: a valid array value; only this thread's syscalls write its slot (a thread
    // sharing the slot overwrites it, which the exit side detects by `tid`).
    unsafe {
        (*ts).start_ns = crate::now_ns();
        (*ts).tid = tid;
        (*ts).tag = tag;
    }
    0
}

#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(ctx: BtfTracePointContext) -> i32 {
    // A thread whose stack never had a pinned syscall returns here, before any helper call:
    // the sys_enter of every pinned syscall set this byte (the same thread has the same
    // `regs` at both ends). A syscall begun before the pin is not seen at all.
    let regs: u64 = ctx.arg(0);
    match open_byte(regs) {
        // SAFETY: a valid array value.
        Some(o) if unsafe { core::ptr::read_volatile(o) } != 0 => {}
        _ => return 0,
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let Some((slot, gen_)) = pinned(tgid) else {
        return 0;
    };
    let Some(cpu) = QOS_CPU.get_ptr_mut(0) else {
        return 0;
    };
    // Mark this CPU busy before reading the epoch (a full barrier), as the CPU pipeline does:
    // userspace waits for the mark to clear before it reads the interval it just closed.
    // SAFETY: this CPU's value of a per-CPU array; the program does not nest on one CPU.
    let seq = unsafe { atomic_fetch_add(&raw mut (*cpu).seq, 1) };
    // Check the pin again now that this CPU is marked: userspace clears a slot's data only
    // after removing the pin and waiting for every marked CPU, so a run that passed the first
    // check just before the removal must not write into the slot's next owner.
    if pinned_at(slot) == Some(pin_entry(tgid, gen_)) {
        // SAFETY: called by the kernel with the sys_exit arguments (regs, ret).
        unsafe { exit_body(&ctx, pid_tgid, tgid, slot, gen_) };
    }
    // Clear the mark. Only this CPU writes it (the kernel does not run a program again on a
    // CPU where it is running), so a plain store after the body's writes suffices on x86-64,
    // whose stores are seen in order: no second locked instruction. (QoS is x86-64 only:
    // userspace refuses to pin on other architectures.)
    // SAFETY: as above.
    unsafe { store_release_x86(&raw mut (*cpu).seq, seq.wrapping_add(2)) };
    0
}

/// # Safety
/// `ctx` must be the sys_exit tp_btf context.
#[inline(always)]
unsafe fn exit_body(ctx: &BtfTracePointContext, pid_tgid: u64, tgid: u32, slot: u32, gen_: u32) {
    let now = crate::now_ns();
    let Some(c) = CTL.get_ptr(0) else { return };
    // SAFETY: a valid map value; the epoch word is read with one 8-byte load.
    let epoch = unsafe { core::ptr::read_volatile(&raw const (*c).epoch) };
    let parity = ctl::parity(epoch);
    let base = parity * MAX_PINS as u32 + slot;
    let Some(pin) = QOS_PIN.get_ptr_mut(base) else {
        return;
    };
    let tid = pid_tgid as u32;
    let Some(ts) = QOS_THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1)) else {
        return;
    };
    // SAFETY: a valid array value (see sys_enter).
    let (start, stid, tag) = unsafe { ((*ts).start_ns, (*ts).tid, (*ts).tag) };
    if stid != tid || tag == 0 || qos::tag_gen(tag) != gen_ & 0xffff || start > now {
        // SAFETY: this CPU's copy of a per-CPU array value: plain adds.
        unsafe { (*pin).unmatched += 1 };
        return;
    }
    // SAFETY: as above; the syscall is closed.
    unsafe { (*ts).tag = 0 };
    let nr = qos::tag_nr(tag);
    let lat = now - start;
    let nrs = if (nr as usize) < NR_SLOTS {
        nr as usize
    } else {
        NR_OTHER
    } & (NR_SLOTS - 1);
    if let Some(t) = QOS_SYS.get_ptr_mut(base) {
        // SAFETY: this CPU's copy of a per-CPU array value (no other CPU writes it and the
        // program does not nest on one CPU, so plain adds: no locked instruction); `nrs` is
        // below NR_SLOTS.
        unsafe {
            let s = &raw mut (*t).nr[nrs];
            (*s).count += 1;
            (*s).total_ns += lat;
            if lat > (*s).max_ns {
                (*s).max_ns = lat;
            }
        }
    }
    let h = hist_of(slot, nrs, pin);
    if let Some(t) = QOS_HIST.get_ptr_mut(base) {
        let b = qos::bucket(lat);
        // SAFETY: a valid array value; `h` is below SYS_HISTS and `b` below BUCKETS by
        // construction.
        unsafe { atomic_add32(&raw mut (*t).h[h].buckets[b], 1) };
    }
    // SAFETY: a valid static; volatile only stops the compiler from folding the default in.
    if unsafe { core::ptr::read_volatile(&raw const QOS_OFFSETS.valid) } == 0 {
        return;
    }
    let ret: i64 = ctx.arg(1);
    match nr {
        nr::READ | nr::READV | nr::RECVFROM | nr::RECVMSG | nr::RECVMMSG if ret > 0 => {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            request_io(tgid, fd, slot, gen_, false, now, pin);
        }
        nr::WRITE | nr::WRITEV | nr::SENDTO | nr::SENDMSG | nr::SENDMMSG | nr::SENDFILE
            if ret > 0 =>
        {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            request_io(tgid, fd, slot, gen_, true, now, pin);
        }
        nr::ACCEPT | nr::ACCEPT4 if ret >= 0 => {
            new_conn(tgid, ret as u32, slot, gen_, ROLE_SERVER, pin);
            // SAFETY: this CPU's copy of a per-CPU array value.
            unsafe { (*pin).accepts += 1 };
        }
        // 0, or -EINPROGRESS for a non-blocking connect.
        nr::CONNECT if ret == 0 || ret == -115 => {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            new_conn(tgid, fd, slot, gen_, ROLE_OTHER, pin);
        }
        nr::LISTEN if ret == 0 => {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            mark_listen(fd);
        }
        // Linux frees the descriptor even when close fails, except for -EBADF.
        nr::CLOSE if ret != -9 => {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            conn_drop(tgid, slot, fd);
        }
        // The new descriptor replaced whatever that number held.
        nr::DUP2 | nr::DUP3 if ret >= 0 => conn_drop(tgid, slot, ret as u32),
        nr::CLOSE_RANGE | nr::EXECVE | nr::EXECVEAT if ret == 0 => {
            if let Some(st) = QOS_PIN_STATE.get_ptr_mut(slot) {
                // SAFETY: a valid array value.
                unsafe { atomic_add(&raw mut (*st).fd_epoch, 1) };
            }
        }
        _ => {}
    }
}

/// The histogram of syscall `nrs` of pin slot `slot`, handed out on first use.
#[inline(always)]
fn hist_of(slot: u32, nrs: usize, pin: *mut PinStat) -> usize {
    let Some(t) = QOS_HIST_IDX.get_ptr_mut(slot) else {
        return 0;
    };
    // SAFETY: a valid array value; `nrs` is below NR_SLOTS.
    let idx = unsafe { &raw mut (*t).idx[nrs & (NR_SLOTS - 1)] };
    // SAFETY: as above.
    let h = unsafe { core::ptr::read_volatile(idx) };
    if h != 0 {
        return h as usize & (SYS_HISTS - 1);
    }
    let Some(st) = QOS_PIN_STATE.get_ptr_mut(slot) else {
        return 0;
    };
    // SAFETY: a valid array value; the counter only grows until userspace resets the slot.
    let n = unsafe { atomic_fetch_add(&raw mut (*st).next_hist, 1) } + 1;
    if n >= SYS_HISTS as u64 {
        // SAFETY: this CPU's copy of a per-CPU array value.
        unsafe { (*pin).hist_full += 1 };
        return 0;
    }
    // Another CPU may have handed one out for the same syscall meanwhile: keep the first.
    // SAFETY: a valid array value; `idx` is 8-byte aligned.
    let old = unsafe { atomic_cmpxchg(idx, 0, n) };
    let h = if old == 0 { n } else { old };
    h as usize & (SYS_HISTS - 1)
}

/// First argument of the syscall (the file descriptor of every call the model follows).
///
/// # Safety
/// `ctx` must be the sys_exit (or sys_enter) tp_btf context.
#[inline(always)]
unsafe fn arg0(ctx: &BtfTracePointContext) -> u64 {
    let regs: *const u8 = ctx.arg(0);
    // SAFETY: a valid static; volatile only stops constant folding (the verifier knows the
    // value: `.rodata` is frozen before load).
    let off = unsafe { core::ptr::read_volatile(&raw const QOS_OFFSETS.regs_di) } as usize;
    // SAFETY: `regs` is the BTF-typed `struct pt_regs *` of the tracepoint and the offset of
    // `di` comes from the kernel's BTF, so this is a direct load the verifier checks (no
    // helper call, which costs more on every socket call of a pinned process).
    unsafe { core::ptr::read_volatile(regs.add(off) as *const u64) }
}

#[inline(always)]
fn qos_offsets() -> ebee_shared::qos::Offsets {
    // SAFETY: a valid static; volatile only stops the compiler from folding the defaults in.
    unsafe { core::ptr::read_volatile(&raw const QOS_OFFSETS) }
}

#[inline(always)]
fn conn_key(tgid: u32, fd: u32) -> u64 {
    ((tgid as u64) << 32) | fd as u64
}

/// The request-model state of descriptor `fd` of the process in pin slot `slot`, if any
/// (whatever its generation and epoch: the caller checks them). Small descriptors live in the
/// slot's row of `QOS_FDS`, an inlined array lookup; the rest in the `QOS_CONNS` hash.
#[inline(always)]
fn conn_get(tgid: u32, slot: u32, fd: u32) -> Option<*mut Conn> {
    if fd < FD_SLOTS {
        QOS_FDS.get_ptr_mut((slot & (MAX_PINS as u32 - 1)) * FD_SLOTS + fd)
    } else {
        QOS_CONNS.get_ptr_mut(conn_key(tgid, fd))
    }
}

/// Store `c` as the state of descriptor `fd`; false when the hash had no room.
#[inline(always)]
fn conn_put(tgid: u32, slot: u32, fd: u32, c: Conn) -> bool {
    if fd < FD_SLOTS {
        let Some(p) = conn_get(tgid, slot, fd) else {
            return false;
        };
        // SAFETY: a valid array value; only threads of this process touch its row.
        unsafe { *p = c };
        true
    } else {
        QOS_CONNS.insert(conn_key(tgid, fd), c, 0).is_ok()
    }
}

/// Forget descriptor `fd` (closed, or replaced by dup2/dup3).
#[inline(always)]
fn conn_drop(tgid: u32, slot: u32, fd: u32) {
    if fd < FD_SLOTS {
        if let Some(p) = conn_get(tgid, slot, fd) {
            // SAFETY: a valid array value; generation 0 is never a pin's, so the state is
            // ignored until the descriptor is seen again.
            unsafe { (*p).gen_ = 0 };
        }
    } else {
        let _ = QOS_CONNS.remove(conn_key(tgid, fd));
    }
}

/// Read a kernel value of type `T` at `base + off`; None for a null base or a fault.
#[inline(always)]
fn kread<T>(base: u64, off: u32) -> Option<T> {
    if base == 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }.ok()
}

/// The `struct file` behind descriptor `fd` of the current task (0 if none).
#[inline(always)]
fn fd_file(fd: u32) -> u64 {
    let o = qos_offsets();
    // SAFETY: a plain helper call.
    let task = unsafe { bpf_get_current_task() };
    let files: u64 = kread(task, o.task_files).unwrap_or(0);
    let fdt: u64 = kread(files, o.files_fdt).unwrap_or(0);
    let max: u32 = kread(fdt, o.fdt_max_fds).unwrap_or(0);
    if fd >= max {
        return 0;
    }
    let arr: u64 = kread(fdt, o.fdt_fd).unwrap_or(0);
    if arr == 0 {
        return 0;
    }
    kread(arr, fd * 8).unwrap_or(0)
}

/// Role of an open file for the request model.
#[inline(always)]
fn classify(file: u64) -> u32 {
    let o = qos_offsets();
    let inode: u64 = kread(file, o.file_inode).unwrap_or(0);
    let mode: u16 = kread(inode, o.inode_mode).unwrap_or(0);
    if mode & 0o170000 != 0o140000 {
        return ROLE_NOT_SOCKET;
    }
    let sock: u64 = kread(file, o.file_private).unwrap_or(0);
    let sk: u64 = kread(sock, o.socket_sk).unwrap_or(0);
    let family: u16 = kread(sk, o.sk_family).unwrap_or(0);
    // AF_INET, AF_INET6: server side when the local port is one a pinned process listens on.
    if family == 2 || family == 10 {
        let port: u16 = kread(sk, o.sk_num).unwrap_or(0);
        if let Some(w) = QOS_PORTS.get_ptr((port >> 6) as u32) {
            // SAFETY: a valid array value.
            if unsafe { core::ptr::read_volatile(w) } & (1u64 << (port & 63)) != 0 {
                return ROLE_SERVER;
            }
        }
    }
    ROLE_OTHER
}

/// Remember the local port of a socket that started listening.
#[inline(always)]
fn mark_listen(fd: u32) {
    let o = qos_offsets();
    let file = fd_file(fd);
    let sock: u64 = kread(file, o.file_private).unwrap_or(0);
    let sk: u64 = kread(sock, o.socket_sk).unwrap_or(0);
    let port: u16 = kread(sk, o.sk_num).unwrap_or(0);
    if port == 0 {
        return;
    }
    if let Some(w) = QOS_PORTS.get_ptr_mut((port >> 6) as u32) {
        // SAFETY: a valid array value. A plain read-modify-write: two listen() calls racing
        // on ports of the same word may lose one bit until userspace's next refresh.
        unsafe { *w |= 1u64 << (port & 63) };
    }
}

/// Start following a descriptor with a known role (accept, connect).
#[inline(always)]
fn new_conn(tgid: u32, fd: u32, slot: u32, gen_: u32, role: u32, pin: *mut PinStat) {
    let file = fd_file(fd);
    if file == 0 {
        return;
    }
    let c = Conn {
        file,
        start_ns: 0,
        gen_,
        flags: role | epoch_bits(slot),
    };
    if !conn_put(tgid, slot, fd, c) {
        // SAFETY: this CPU's copy of a per-CPU array value.
        unsafe { (*pin).conn_full += 1 };
    }
}

/// The descriptor epoch of pin slot `slot`, placed where [`Conn::flags`] keeps it.
#[inline(always)]
fn epoch_bits(slot: u32) -> u32 {
    match QOS_PIN_STATE.get_ptr(slot) {
        // SAFETY: a valid array value; a torn read only costs one extra table walk.
        Some(st) => {
            (unsafe { core::ptr::read_volatile(&raw const (*st).fd_epoch) } as u32)
                << CONN_EPOCH_SHIFT
        }
        None => 0,
    }
}

/// A receive (`send == false`) or send that moved data on `fd`: the request model.
///
/// The state of a known descriptor is trusted without walking the descriptor table: it is
/// dropped when the descriptor is closed, and an epoch catches closes the programs do not see
/// one by one. Only a descriptor seen for the first time (or after such a close) pays for the
/// walk and the socket classification.
#[inline(always)]
fn request_io(tgid: u32, fd: u32, slot: u32, gen_: u32, send: bool, now: u64, pin: *mut PinStat) {
    let epoch = epoch_bits(slot);
    let c = match conn_get(tgid, slot, fd) {
        // SAFETY: a valid map value; only threads of this process touch its keys.
        Some(c)
            if unsafe {
                (*c).gen_ == gen_ && ((*c).flags >> CONN_EPOCH_SHIFT) << CONN_EPOCH_SHIFT == epoch
            } =>
        {
            c
        }
        _ => {
            let file = fd_file(fd);
            if file == 0 {
                return;
            }
            // First sight of this descriptor (or of what it holds since a close).
            let fresh = Conn {
                file,
                start_ns: 0,
                gen_,
                flags: classify(file) | epoch,
            };
            if !conn_put(tgid, slot, fd, fresh) {
                // SAFETY: this CPU's copy of a per-CPU array value.
                unsafe { (*pin).conn_full += 1 };
                return;
            }
            match conn_get(tgid, slot, fd) {
                Some(c) => c,
                None => return,
            }
        }
    };
    // SAFETY: a valid hash value (see above).
    let c = unsafe { &mut *c };
    match c.flags & ROLE_MASK {
        ROLE_SERVER => {}
        ROLE_OTHER => {
            // SAFETY: this CPU's copy of a per-CPU array value.
            unsafe { (*pin).other_sock_io += 1 };
            return;
        }
        _ => return,
    }
    if !send {
        // SAFETY: this CPU's copy of a per-CPU array value.
        unsafe { (*pin).recvs += 1 };
        if c.flags & CONN_IN_REQUEST == 0 {
            c.start_ns = now;
            c.flags |= CONN_IN_REQUEST;
        }
        return;
    }
    if c.flags & CONN_IN_REQUEST == 0 {
        // SAFETY: this CPU's copy of a per-CPU array value.
        unsafe { (*pin).sends_idle += 1 };
        return;
    }
    c.flags &= !CONN_IN_REQUEST;
    let lat = now.saturating_sub(c.start_ns);
    let b = qos::bucket(lat);
    // SAFETY: this CPU's copy of a per-CPU array value; `b` is below BUCKETS by
    // construction.
    unsafe {
        (*pin).requests += 1;
        (*pin).req_total_ns += lat;
        if lat > (*pin).req_max_ns {
            (*pin).req_max_ns = lat;
        }
        (*pin).req_hist.buckets[b] += 1;
    }
}
