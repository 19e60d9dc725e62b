//! The request model of pinned processes, fed by the syscalls `sys_exit` sees. Each descriptor
//! a pinned process reads or writes is classified once: a server connection (accepted, or its
//! local port is one a pinned process listens on), another socket, or not a socket. On a
//! server connection a request runs from the first receive to the send that answers it.
//! Descriptor state lives in `QOS_FDS` (descriptors below `FD_SLOTS`) and `QOS_CONNS` (the
//! rest); a close drops it, and an epoch per pin slot voids it all after `close_range` or exec.
//! A duplicate of a server connection's descriptor (`dup`, `dup2`, `dup3`, `fcntl(F_DUPFD)`,
//! or two descriptors found sharing one `struct file`) points at the descriptor that keeps the
//! request state ([`CONN_ALIAS`]), so a request read on one and answered on the other (a
//! reader thread and a writer thread on a cloned socket) is one request.

use aya_ebpf::{
    helpers::{bpf_get_current_task, bpf_probe_read_kernel},
    programs::BtfTracePointContext,
};
use ebee_shared::qos::{
    self, CONN_ALIAS, CONN_EPOCH_SHIFT, CONN_IN_REQUEST, Conn, F_DUPFD, F_DUPFD_CLOEXEC, FD_SLOTS,
    MAX_PINS, PinStat, ROLE_MASK, ROLE_NOT_SOCKET, ROLE_OTHER, ROLE_SERVER, nr,
};

use crate::maps::{QOS_CONNS, QOS_FDS, QOS_OFFSETS, QOS_PIN_STATE, QOS_PORTS};
use crate::{atomic_add, present};

/// Pinned syscall `nr` of process `tgid` (pin slot `slot`, generation `gen_`) returned at
/// `now`: what it means to the request model, counted in `pin`.
///
/// # Safety
/// `ctx` must be the sys_exit tp_btf context.
#[inline(always)]
pub(super) unsafe fn on_exit(
    ctx: &BtfTracePointContext,
    nr: u32,
    tgid: u32,
    slot: u32,
    gen_: u32,
    now: u64,
    pin: *mut PinStat,
) -> Result<(), i64> {
    // Without the kernel's struct offsets (not found in its BTF) there is no request model.
    // SAFETY: a valid static; volatile only stops the compiler from folding the default in.
    if unsafe { core::ptr::read_volatile(&raw const QOS_OFFSETS.valid) } == 0 {
        return Ok(());
    }
    let ret: i64 = ctx.arg(1);
    match nr {
        nr::READ | nr::READV | nr::RECVFROM | nr::RECVMSG | nr::RECVMMSG if ret > 0 => {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            request_io(tgid, fd, slot, gen_, false, now, pin)
        }
        nr::WRITE | nr::WRITEV | nr::SENDTO | nr::SENDMSG | nr::SENDMMSG | nr::SENDFILE
            if ret > 0 =>
        {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            request_io(tgid, fd, slot, gen_, true, now, pin)
        }
        nr::ACCEPT | nr::ACCEPT4 if ret >= 0 => {
            // Counted first: the accept happened, whatever becomes of its descriptor's state.
            // SAFETY: this CPU's copy of a per-CPU array value.
            unsafe { (*pin).accepts += 1 };
            new_conn(tgid, ret as u32, slot, gen_, ROLE_SERVER, pin)
        }
        // 0, or -EINPROGRESS for a non-blocking connect.
        nr::CONNECT if ret == 0 || ret == -115 => {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            new_conn(tgid, fd, slot, gen_, ROLE_OTHER, pin)
        }
        nr::LISTEN if ret == 0 => {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            mark_listen(fd)
        }
        // Linux frees the descriptor even when close fails, except for -EBADF.
        nr::CLOSE if ret != -9 => {
            // SAFETY: sys_exit context.
            let fd = unsafe { arg0(ctx) } as u32;
            conn_drop(tgid, slot, fd)
        }
        nr::DUP if ret >= 0 => {
            // SAFETY: sys_exit context.
            let old = unsafe { arg0(ctx) } as u32;
            dup_conn(tgid, slot, gen_, old, ret as u32, pin)
        }
        nr::DUP2 | nr::DUP3 if ret >= 0 => {
            // SAFETY: sys_exit context.
            let old = unsafe { arg0(ctx) } as u32;
            // dup2(fd, fd) changes nothing (dup3 refuses it).
            if old == ret as u32 {
                return Ok(());
            }
            // The new descriptor replaced whatever that number held.
            conn_drop(tgid, slot, ret as u32)?;
            dup_conn(tgid, slot, gen_, old, ret as u32, pin)
        }
        nr::FCNTL if ret >= 0 => {
            // SAFETY: sys_exit context.
            let cmd = unsafe { arg1(ctx) } as u32 as u64;
            if cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC {
                return Ok(());
            }
            // SAFETY: sys_exit context.
            let old = unsafe { arg0(ctx) } as u32;
            dup_conn(tgid, slot, gen_, old, ret as u32, pin)
        }
        nr::CLOSE_RANGE | nr::EXECVE | nr::EXECVEAT if ret == 0 => {
            let st = present(QOS_PIN_STATE.get_ptr_mut(slot))?;
            // SAFETY: a valid array value.
            unsafe { atomic_add(&raw mut (*st).fd_epoch, 1) };
            Ok(())
        }
        _ => Ok(()),
    }
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

/// Second argument of the syscall (fcntl's command).
///
/// # Safety
/// As [`arg0`].
#[inline(always)]
unsafe fn arg1(ctx: &BtfTracePointContext) -> u64 {
    let regs: *const u8 = ctx.arg(0);
    // SAFETY: as in `arg0`.
    let off = unsafe { core::ptr::read_volatile(&raw const QOS_OFFSETS.regs_si) } as usize;
    // SAFETY: as in `arg0`.
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

/// The `QOS_FDS` entry of descriptor `fd` (below `FD_SLOTS`) of pin slot `slot`.
#[inline(always)]
fn fd_entry(slot: u32, fd: u32) -> Result<*mut Conn, i64> {
    present(QOS_FDS.get_ptr_mut((slot & (MAX_PINS as u32 - 1)) * FD_SLOTS + fd))
}

/// The request-model state of descriptor `fd` of the process in pin slot `slot`, if any
/// (whatever its generation and epoch: the caller checks them). Small descriptors live in the
/// slot's row of `QOS_FDS`, an inlined array lookup; the rest in the `QOS_CONNS` hash, where
/// a miss is normal.
#[inline(always)]
fn conn_get(tgid: u32, slot: u32, fd: u32) -> Result<Option<*mut Conn>, i64> {
    if fd < FD_SLOTS {
        fd_entry(slot, fd).map(Some)
    } else {
        Ok(QOS_CONNS.get_ptr_mut(conn_key(tgid, fd)))
    }
}

/// Store `c` as the state of descriptor `fd`; false when the hash had no room.
#[inline(always)]
fn conn_put(tgid: u32, slot: u32, fd: u32, c: Conn) -> Result<bool, i64> {
    if fd < FD_SLOTS {
        let p = fd_entry(slot, fd)?;
        // SAFETY: a valid array value; only threads of this process touch its row.
        unsafe { *p = c };
        Ok(true)
    } else {
        Ok(QOS_CONNS.insert(conn_key(tgid, fd), c, 0).is_ok())
    }
}

/// Forget descriptor `fd` (closed, or replaced by dup2/dup3).
#[inline(always)]
fn conn_drop(tgid: u32, slot: u32, fd: u32) -> Result<(), i64> {
    if fd < FD_SLOTS {
        let p = fd_entry(slot, fd)?;
        // SAFETY: a valid array value; generation 0 is never a pin's, so the state is
        // ignored until the descriptor is seen again.
        unsafe { (*p).gen_ = 0 };
    } else {
        // Not there (never seen, or evicted) is fine: there is nothing to forget.
        let _ = QOS_CONNS.remove(conn_key(tgid, fd));
    }
    Ok(())
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
fn classify(file: u64) -> Result<u32, i64> {
    let o = qos_offsets();
    let inode: u64 = kread(file, o.file_inode).unwrap_or(0);
    let mode: u16 = kread(inode, o.inode_mode).unwrap_or(0);
    if mode & 0o170000 != 0o140000 {
        return Ok(ROLE_NOT_SOCKET);
    }
    let sock: u64 = kread(file, o.file_private).unwrap_or(0);
    let sk: u64 = kread(sock, o.socket_sk).unwrap_or(0);
    let family: u16 = kread(sk, o.sk_family).unwrap_or(0);
    // AF_INET, AF_INET6: server side when the local port is one a pinned process listens on.
    if family == 2 || family == 10 {
        let port: u16 = kread(sk, o.sk_num).unwrap_or(0);
        let w = present(QOS_PORTS.get_ptr((port >> 6) as u32))?;
        // SAFETY: a valid array value.
        if unsafe { core::ptr::read_volatile(w) } & (1u64 << (port & 63)) != 0 {
            return Ok(ROLE_SERVER);
        }
    }
    Ok(ROLE_OTHER)
}

/// Remember the local port of a socket that started listening.
#[inline(always)]
fn mark_listen(fd: u32) -> Result<(), i64> {
    let o = qos_offsets();
    let file = fd_file(fd);
    let sock: u64 = kread(file, o.file_private).unwrap_or(0);
    let sk: u64 = kread(sock, o.socket_sk).unwrap_or(0);
    let port: u16 = kread(sk, o.sk_num).unwrap_or(0);
    if port == 0 {
        return Ok(());
    }
    let w = present(QOS_PORTS.get_ptr_mut((port >> 6) as u32))?;
    // SAFETY: a valid array value. A plain read-modify-write: two listen() calls racing on
    // ports of the same word may lose one bit until userspace's next refresh.
    unsafe { *w |= 1u64 << (port & 63) };
    Ok(())
}

/// Start following a descriptor with a known role (accept, connect).
#[inline(always)]
fn new_conn(
    tgid: u32,
    fd: u32,
    slot: u32,
    gen_: u32,
    role: u32,
    pin: *mut PinStat,
) -> Result<(), i64> {
    let file = fd_file(fd);
    if file == 0 {
        return Ok(());
    }
    let c = Conn {
        file,
        start_ns: 0,
        gen_,
        flags: role | epoch_bits(slot)?,
    };
    if !conn_put(tgid, slot, fd, c)? {
        // SAFETY: this CPU's copy of a per-CPU array value.
        unsafe { (*pin).conn_full += 1 };
    }
    Ok(())
}

/// The descriptor epoch of pin slot `slot`, placed where [`Conn::flags`] keeps it.
#[inline(always)]
fn epoch_bits(slot: u32) -> Result<u32, i64> {
    let st = present(QOS_PIN_STATE.get_ptr(slot))?;
    // SAFETY: a valid array value; a torn read only costs one extra table walk.
    let e = unsafe { core::ptr::read_volatile(&raw const (*st).fd_epoch) } as u32;
    Ok(e << CONN_EPOCH_SHIFT)
}

/// Whether state `c` was made by this pin (generation `gen_`) under the slot's current
/// descriptor epoch `epoch` (already shifted, as [`epoch_bits`] gives it).
#[inline(always)]
fn current(c: &Conn, gen_: u32, epoch: u32) -> bool {
    c.gen_ == gen_ && (c.flags >> CONN_EPOCH_SHIFT) << CONN_EPOCH_SHIFT == epoch
}

/// Descriptor `new` is a duplicate of `old` (dup, dup2, dup3, fcntl): when `old` is a known
/// server connection, `new` points at the descriptor that keeps its request state. Nothing
/// when `old` is not known yet: both are then first seen by a receive or send, and find each
/// other through the file's owner entry ([`share_file`]).
#[inline(always)]
fn dup_conn(
    tgid: u32,
    slot: u32,
    gen_: u32,
    old: u32,
    new: u32,
    pin: *mut PinStat,
) -> Result<(), i64> {
    let epoch = epoch_bits(slot)?;
    let Some(c) = conn_get(tgid, slot, old)? else {
        return Ok(());
    };
    // SAFETY: a valid map value, copied.
    let c = unsafe { *c };
    if !current(&c, gen_, epoch) || c.flags & ROLE_MASK != ROLE_SERVER {
        return Ok(());
    }
    // Always the owner itself, never a chain of duplicates.
    let owner = if c.flags & CONN_ALIAS != 0 {
        c.start_ns
    } else {
        old as u64
    };
    let d = Conn {
        file: c.file,
        start_ns: owner,
        gen_,
        flags: ROLE_SERVER | CONN_ALIAS | epoch,
    };
    if !conn_put(tgid, slot, new, d)? {
        // SAFETY: this CPU's copy of a per-CPU array value.
        unsafe { (*pin).conn_full += 1 };
    }
    Ok(())
}

/// A server connection's descriptor `fd` seen for the first time (`c`, its fresh state): if
/// another descriptor of this process keeps the state of the same open file, `fd` becomes its
/// duplicate; otherwise `fd` is entered as the file's owner. One hash lookup and one update,
/// once per descriptor first seen this way (open before the pin, or after an exec or
/// `close_range`), not per call.
#[inline(always)]
fn share_file(tgid: u32, slot: u32, gen_: u32, fd: u32, epoch: u32, c: Conn) -> Result<Conn, i64> {
    if !qos::is_file_key(c.file) {
        return Ok(c);
    }
    if let Some(e) = QOS_CONNS.get_ptr(c.file) {
        // SAFETY: a valid hash value, copied.
        let e = unsafe { *e };
        let owner = e.start_ns as u32;
        if e.gen_ == gen_ && e.flags == slot && owner != fd {
            if let Some(o) = conn_get(tgid, slot, owner)? {
                // SAFETY: a valid map value, copied.
                let o = unsafe { *o };
                if current(&o, gen_, epoch) && o.file == c.file && o.flags & CONN_ALIAS == 0 {
                    return Ok(Conn {
                        start_ns: owner as u64,
                        flags: c.flags | CONN_ALIAS,
                        ..c
                    });
                }
            }
        }
    }
    // Full (LRU: it evicts) or not: the descriptor keeps its own state either way.
    let _ = QOS_CONNS.insert(c.file, qos::file_owner(c.file, fd, slot, gen_), 0);
    Ok(c)
}

/// The state a duplicate's requests go to: its owner's, while the owner is still the same
/// open file under this pin and epoch. Otherwise (the owner was closed) the duplicate keeps
/// its own state from now on.
#[inline(always)]
fn owner_of(tgid: u32, slot: u32, gen_: u32, epoch: u32, c: *mut Conn) -> Result<*mut Conn, i64> {
    // SAFETY: a valid map value.
    let (file, owner) = unsafe { ((*c).file, (*c).start_ns as u32) };
    if let Some(o) = conn_get(tgid, slot, owner)? {
        // SAFETY: a valid map value.
        let ok = unsafe { current(&*o, gen_, epoch) && (*o).file == file }
            // SAFETY: as above.
            && unsafe { (*o).flags } & CONN_ALIAS == 0;
        if ok {
            return Ok(o);
        }
    }
    // SAFETY: a valid map value; only threads of this process touch it.
    unsafe {
        (*c).flags &= !(CONN_ALIAS | CONN_IN_REQUEST);
        (*c).start_ns = 0;
    }
    Ok(c)
}

/// A receive (`send == false`) or send that moved data on `fd`: the request model.
///
/// The state of a known descriptor is trusted without walking the descriptor table: it is
/// dropped when the descriptor is closed, and an epoch catches closes the programs do not see
/// one by one. Only a descriptor seen for the first time (or after such a close) pays for the
/// walk and the socket classification.
#[inline(always)]
fn request_io(
    tgid: u32,
    fd: u32,
    slot: u32,
    gen_: u32,
    send: bool,
    now: u64,
    pin: *mut PinStat,
) -> Result<(), i64> {
    let epoch = epoch_bits(slot)?;
    let c = match conn_get(tgid, slot, fd)? {
        // SAFETY: a valid map value; only threads of this process touch its keys.
        Some(c) if current(unsafe { &*c }, gen_, epoch) => c,
        _ => {
            let file = fd_file(fd);
            if file == 0 {
                return Ok(());
            }
            // First sight of this descriptor (or of what it holds since a close).
            let role = classify(file)?;
            let mut fresh = Conn {
                file,
                start_ns: 0,
                gen_,
                flags: role | epoch,
            };
            if role == ROLE_SERVER {
                fresh = share_file(tgid, slot, gen_, fd, epoch, fresh)?;
            }
            if !conn_put(tgid, slot, fd, fresh)? {
                // SAFETY: this CPU's copy of a per-CPU array value.
                unsafe { (*pin).conn_full += 1 };
                return Ok(());
            }
            // Another CPU's insert may have evicted it from the LRU hash already.
            match conn_get(tgid, slot, fd)? {
                Some(c) => c,
                None => return Ok(()),
            }
        }
    };
    // A duplicate's requests are its owner's (one bit test for every other descriptor).
    // SAFETY: a valid map value (see above).
    let c = if unsafe { (*c).flags } & CONN_ALIAS != 0 {
        owner_of(tgid, slot, gen_, epoch, c)?
    } else {
        c
    };
    // SAFETY: a valid map value (see above).
    let c = unsafe { &mut *c };
    match c.flags & ROLE_MASK {
        ROLE_SERVER => {}
        ROLE_OTHER => {
            // SAFETY: this CPU's copy of a per-CPU array value.
            unsafe { (*pin).other_sock_io += 1 };
            return Ok(());
        }
        _ => return Ok(()),
    }
    if !send {
        // SAFETY: this CPU's copy of a per-CPU array value.
        unsafe { (*pin).recvs += 1 };
        if c.flags & CONN_IN_REQUEST == 0 {
            c.start_ns = now;
            c.flags |= CONN_IN_REQUEST;
        }
        return Ok(());
    }
    if c.flags & CONN_IN_REQUEST == 0 {
        // SAFETY: this CPU's copy of a per-CPU array value.
        unsafe { (*pin).sends_idle += 1 };
        return Ok(());
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
    Ok(())
}
