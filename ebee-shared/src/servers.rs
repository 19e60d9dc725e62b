//! The servers pipeline's kernel/userspace contract: every process that answers requests on
//! TCP, found and measured without a pin, from the socket layer's own tracepoints.
//!
//! `sock_recv_length` and `sock_send_length` fire inside `sock_recvmsg`/`sock_sendmsg` (every
//! read, recv, write, send, sendfile and splice on a socket, io_uring's too), in the context of
//! the task doing the I/O, so no other syscall pays anything. Each event charges its bytes to
//! the process in a per-CPU network sketch ([`NetSketch`]). A TCP socket whose local port is
//! one a process listens on ([`PORT_WORDS`] bitmap, seeded from /proc and kept by
//! `inet_sock_set_state`) is a server connection; on it the request model of the pinned mode
//! runs, keyed by socket ([`SrvConn`]): a request starts at the first receive with data after
//! the previous response and ends at the first send with data. Each request is counted in a
//! per-CPU HashPipe sketch by request count ([`SrvSketch`]), so when there are more servers
//! than slots the busiest win, and its latency goes to a log-linear histogram ([`SrvHist`]) if
//! userspace gave the process one of [`HIST_SLOTS`] histogram slots (it gives them to the
//! busiest servers, by the sketch, each interval).
//!
//! Interval data is written under the CPU pipeline's per-CPU epoch and parity, so it closes
//! with the same context switch; a per-CPU busy word ([`SrvCpu`]) covers the one case where a
//! CPU is moved to the next interval by an IPI in the middle of a run.

use crate::{hashpipe, qos};

/// Stages of the server sketch.
pub const SRV_STAGES: usize = 4;
/// Slots per stage of the server sketch (a power of two).
pub const SRV_SLOTS: usize = 32;
/// Stages of the network bytes sketch.
pub const NET_STAGES: usize = 4;
/// Slots per stage of the network bytes sketch (a power of two).
pub const NET_SLOTS: usize = 64;
/// Servers with a latency histogram at once (a power of two): userspace gives them to the
/// busiest servers by request count.
pub const HIST_SLOTS: usize = 32;
/// Buckets of a server latency histogram: the pinned histogram's buckets four at a time, so a
/// power of two has 8 buckets (a bucket spans at most 1/8 of its lower bound).
pub const HIST_BUCKETS: usize = qos::BUCKETS / 4;
/// Entries of the tgid -> histogram slot table (a power of two), indexed by `tgid & (N - 1)`
/// and tagged with the tgid (two servers whose tgids share an index cannot both hold a slot;
/// the less busy one's requests are counted, not in a histogram).
pub const SLOT_INDEX: u32 = 4_096;
/// Server connections followed at once (request state per socket); a new connection that
/// finds the table full is counted in [`SrvSketch::conns_full`] and not followed.
pub const CONN_ENTRIES: u32 = 65_536;
/// Processes whose open server connections are counted at once.
pub const CONN_COUNT_ENTRIES: u32 = 4_096;
/// Words of the listening-port bitmap (one bit per TCP port), the same shape as the pinned
/// mode's.
pub use crate::qos::PORT_WORDS;

/// `SrvConn::flags`: a request was received and not yet answered.
pub const CONN_IN_REQUEST: u32 = 1;

/// `MSG_PEEK` in a receive's flags: the data stays queued and will be read again.
pub const MSG_PEEK: i32 = 2;
/// Address families and the socket type the model follows.
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;
pub const SOCK_STREAM: u16 = 1;
/// TCP states, as `inet_sock_set_state` reports them.
pub const TCP_CLOSE: i32 = 7;
pub const TCP_LISTEN: i32 = 10;

/// Histogram bucket of a latency in ns.
#[inline(always)]
pub const fn bucket(v: u64) -> usize {
    (qos::bucket(v) >> 2) & (HIST_BUCKETS - 1)
}

/// Lowest value (ns) of bucket `i`.
pub const fn bucket_low(i: usize) -> u64 {
    qos::bucket_low((i & (HIST_BUCKETS - 1)) * 4)
}

/// Width (ns) of bucket `i` (the last one is open-ended; its nominal width is returned).
pub const fn bucket_width(i: usize) -> u64 {
    qos::bucket_width((i & (HIST_BUCKETS - 1)) * 4) * 4
}

/// An entry of the tgid -> histogram slot table: `(tgid << 32) | (slot + 1)`; 0 is none.
pub const fn slot_entry(tgid: u32, slot: u32) -> u64 {
    ((tgid as u64) << 32) | (slot as u64 + 1)
}

/// The histogram slot `e` gives `tgid`, if any.
#[inline(always)]
pub const fn slot_of(e: u64, tgid: u32) -> Option<u32> {
    if (e >> 32) as u32 == tgid && e as u32 != 0 {
        Some((e as u32 - 1) & (HIST_SLOTS as u32 - 1))
    } else {
        None
    }
}

/// Request state of one server connection (`SRV_CONNS`, keyed by the `struct sock` address).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrvConn {
    /// End of the receive that opened the current request.
    pub start_ns: u64,
    /// The process that did the connection's last I/O (its open-connection count holds it).
    pub tgid: u32,
    /// [`CONN_IN_REQUEST`].
    pub flags: u32,
}

impl SrvConn {
    /// A receive with data. True when it opens a request; `now` (the clock, read only then)
    /// is its start.
    #[inline(always)]
    pub fn recv(&mut self, now: impl FnOnce() -> u64) -> bool {
        if self.flags & CONN_IN_REQUEST != 0 {
            return false;
        }
        self.flags |= CONN_IN_REQUEST;
        self.start_ns = now();
        true
    }

    /// A send with data: the latency of the request it answers, if one was open (`now` is
    /// read only then).
    #[inline(always)]
    pub fn send(&mut self, now: impl FnOnce() -> u64) -> Option<u64> {
        if self.flags & CONN_IN_REQUEST == 0 {
            return None;
        }
        self.flags &= !CONN_IN_REQUEST;
        Some(now().saturating_sub(self.start_ns))
    }
}

/// One slot of the server sketch: a process and the requests it answered in the interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrvSlot {
    /// Process id (tgid); 0 marks an empty slot.
    pub tgid: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// Requests answered.
    pub requests: u64,
    /// Sum of their latencies (ns).
    pub latency_ns: u64,
    /// The longest of them (ns).
    pub max_ns: u64,
}

impl hashpipe::Slot for SrvSlot {
    #[inline(always)]
    fn key(&self) -> u32 {
        self.tgid
    }
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.requests
    }
    #[inline(always)]
    fn merge(&mut self, other: &Self) {
        self.requests += other.requests;
        self.latency_ns += other.latency_ns;
        if other.max_ns > self.max_ns {
            self.max_ns = other.max_ns;
        }
    }
}

/// One slot of the network sketch: a process and the bytes its sockets received and sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetSlot {
    /// Process id (tgid); 0 marks an empty slot.
    pub tgid: u32,
    /// Reserved, 0.
    pub flags: u32,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

impl hashpipe::Slot for NetSlot {
    #[inline(always)]
    fn key(&self) -> u32 {
        self.tgid
    }
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.rx_bytes.saturating_add(self.tx_bytes)
    }
    #[inline(always)]
    fn merge(&mut self, other: &Self) {
        self.rx_bytes += other.rx_bytes;
        self.tx_bytes += other.tx_bytes;
    }
}

/// `u64`s that pad [`SrvSketch`] to whole cache lines.
pub const SRV_PAD: usize =
    crate::pad_words(core::mem::size_of::<[[SrvSlot; SRV_SLOTS]; SRV_STAGES]>() + 6 * 8);

/// One interval's server sketch on one CPU (an entry of a per-(CPU, parity) array: [`crate::cpu::sketch_entry`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SrvSketch {
    pub stages: [[SrvSlot; SRV_SLOTS]; SRV_STAGES],
    /// Entries carried out of the last stage, and their requests.
    pub evictions: u64,
    pub evicted_requests: u64,
    /// Requests counted in this interval.
    pub requests: u64,
    /// Requests of servers without a histogram slot (counted, latency not in a histogram).
    pub unhistogrammed: u64,
    /// New server connections not followed: the connection table was full.
    pub conns_full: u64,
    /// Processes whose connection count could not be kept (its table was full).
    pub counts_full: u64,
    /// Up to a whole number of cache lines: see [`crate::cache_lines`].
    pub pad: [u64; SRV_PAD],
}

/// `u64`s that pad [`NetSketch`] to whole cache lines.
pub const NET_PAD: usize =
    crate::pad_words(core::mem::size_of::<[[NetSlot; NET_SLOTS]; NET_STAGES]>() + 3 * 8);

/// One interval's network sketch on one CPU (an entry of a per-(CPU, parity) array: [`crate::cpu::sketch_entry`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NetSketch {
    pub stages: [[NetSlot; NET_SLOTS]; NET_STAGES],
    /// Entries carried out of the last stage, and their bytes.
    pub evictions: u64,
    pub evicted_bytes: u64,
    /// Socket receives and sends charged in this interval.
    pub updates: u64,
    /// Up to a whole number of cache lines: see [`crate::cache_lines`].
    pub pad: [u64; NET_PAD],
}

impl Default for SrvSketch {
    fn default() -> Self {
        Self {
            stages: [[SrvSlot::default(); SRV_SLOTS]; SRV_STAGES],
            evictions: 0,
            evicted_requests: 0,
            requests: 0,
            unhistogrammed: 0,
            conns_full: 0,
            counts_full: 0,
            pad: [0; SRV_PAD],
        }
    }
}

impl Default for NetSketch {
    fn default() -> Self {
        Self {
            stages: [[NetSlot::default(); NET_SLOTS]; NET_STAGES],
            evictions: 0,
            evicted_bytes: 0,
            updates: 0,
            pad: [0; NET_PAD],
        }
    }
}

impl SrvSketch {
    /// Count one answered request of `tgid` that took `latency_ns`.
    #[inline(always)]
    pub fn add(&mut self, tgid: u32, latency_ns: u64) {
        self.requests += 1;
        let slot = SrvSlot {
            tgid,
            flags: 0,
            requests: 1,
            latency_ns,
            max_ns: latency_ns,
        };
        if let Some(out) = hashpipe::update(&mut self.stages, slot) {
            self.evictions += 1;
            self.evicted_requests += out.requests;
        }
    }
}

impl NetSketch {
    /// Charge bytes received and sent by `tgid`.
    #[inline(always)]
    pub fn add(&mut self, slot: NetSlot) {
        self.updates += 1;
        if let Some(out) = hashpipe::update(&mut self.stages, slot) {
            self.evictions += 1;
            self.evicted_bytes += out.rx_bytes + out.tx_bytes;
        }
    }
}

/// Latencies of one server's requests in one interval on one CPU (`SRV_HIST`, a `PerCpuArray`
/// indexed by `parity * HIST_SLOTS + slot`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SrvHist {
    /// The process whose requests these are (written with each one; 0: none this interval).
    pub tgid: u32,
    /// Reserved, 0.
    pub flags: u32,
    pub count: u64,
    pub buckets: [u32; HIST_BUCKETS],
}

impl Default for SrvHist {
    fn default() -> Self {
        Self {
            tgid: 0,
            flags: 0,
            count: 0,
            buckets: [0; HIST_BUCKETS],
        }
    }
}

/// Per-CPU busy word of the socket programs: 1 while a run writes interval data.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrvCpu {
    pub busy: u64,
}

/// `struct sock` offsets the socket programs read (from BTF).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrvOffsets {
    /// `__sk_common.skc_family` (u16).
    pub family: u32,
    /// `__sk_common.skc_num`, the local port in host order (u16).
    pub num: u32,
    /// `sk_type` (u16).
    pub sk_type: u32,
    /// 1 when every offset above was found (the pipeline is off otherwise).
    pub valid: u32,
}

crate::counted_by!(SrvSketch, SrvSlot, SRV_SLOTS, SRV_STAGES, requests);
crate::counted_by!(NetSketch, NetSlot, NET_SLOTS, NET_STAGES, updates);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_no_padding() {
        assert_eq!(core::mem::size_of::<SrvConn>(), 16);
        assert_eq!(core::mem::size_of::<SrvSlot>(), 32);
        assert_eq!(core::mem::size_of::<NetSlot>(), 24);
        assert_eq!(core::mem::size_of::<SrvHist>(), 16 + 4 * HIST_BUCKETS);
        assert_eq!(core::mem::size_of::<SrvOffsets>(), 16);
        assert!(HIST_SLOTS.is_power_of_two() && SLOT_INDEX.is_power_of_two());
    }

    #[test]
    fn buckets_are_contiguous_and_within_an_eighth() {
        for i in 0..HIST_BUCKETS - 1 {
            assert_eq!(
                bucket_low(i) + bucket_width(i),
                bucket_low(i + 1),
                "bucket {i}"
            );
            assert_eq!(bucket(bucket_low(i)), i);
            assert_eq!(bucket(bucket_low(i + 1) - 1), i);
            if bucket_low(i) >= 64 {
                assert!(bucket_width(i) * 8 <= bucket_low(i), "bucket {i}");
            }
        }
        assert_eq!(bucket(u64::MAX), HIST_BUCKETS - 1);
        // 1 ms and 10 ms land where a reader of p50/p99 expects them.
        let ms = 1_000_000;
        assert!(bucket_low(bucket(ms)) <= ms && ms < bucket_low(bucket(ms) + 1));
    }

    #[test]
    fn the_request_model_opens_on_the_first_receive_and_closes_on_the_first_send() {
        let mut c = SrvConn::default();
        assert_eq!(
            c.send(|| 5),
            None,
            "a send with no request open is not a response"
        );
        assert!(c.recv(|| 10));
        assert!(!c.recv(|| 15), "a request read in two parts is one request");
        assert_eq!(c.send(|| 40), Some(30));
        assert_eq!(
            c.send(|| 45),
            None,
            "the rest of a response answers nothing"
        );
        assert!(c.recv(|| 50));
        assert_eq!(c.send(|| 51), Some(1));
    }

    #[test]
    fn slot_entries_are_tagged_by_tgid() {
        let e = slot_entry(4242, 7);
        assert_eq!(slot_of(e, 4242), Some(7));
        assert_eq!(slot_of(e, 4243), None);
        assert_eq!(slot_of(0, 0), None);
    }

    #[test]
    fn the_sketch_counts_requests_and_keeps_the_longest() {
        let mut s = SrvSketch::default();
        s.add(9, 100);
        s.add(9, 300);
        s.add(3, 50);
        let of = |k: u32| {
            s.stages
                .iter()
                .flatten()
                .filter(|x| x.tgid == k)
                .fold((0, 0, 0), |a, x| {
                    (a.0 + x.requests, a.1 + x.latency_ns, a.2.max(x.max_ns))
                })
        };
        assert_eq!(of(9), (2, 400, 300));
        assert_eq!(of(3), (1, 50, 50));
        assert_eq!(s.requests, 3);
    }
}
