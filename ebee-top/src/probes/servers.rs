//! Draining the servers pipeline. The socket programs write under the CPU pipeline's per-CPU
//! epoch and parity, so once the CPU drain has seen every CPU move past an interval (and no
//! CPU is still inside a socket program run, the busy word) its sketches and histograms are
//! quiescent: read them, merge across stages and CPUs, clear them. Then hand the histogram
//! slots to the busiest servers. The listening ports are read from /proc once, at load (the
//! kernel marks every later listener itself); nothing on the drain reads /proc.

use std::time::{Duration, Instant};

use aya::{
    Ebpf,
    maps::{Array, HashMap as BpfHashMap, MapData},
};
use ebee_shared::hashpipe::Counted as _;
use ebee_shared::map_names;
use ebee_shared::servers::{
    HIST_BUCKETS, HIST_SLOTS, NetSketch, PORT_WORDS, SLOT_INDEX, SrvCpu, SrvHist, SrvOffsets,
    SrvSketch, slot_entry,
};
// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::{HashMap, HashMapExt as _, HashSet};

use super::btf::Btf;
use super::mmap_array::SketchArray;
use super::raw_array::PerCpuValue;
use super::{ProbeError, classify, take_map, take_sketch};

/// `struct sock` offsets, from BTF; `valid` 0 when one is missing.
pub fn offsets(btf: &Btf) -> SrvOffsets {
    let get = |s: &str, m: &str| btf.member_offset(s, m).ok();
    let found = (|| {
        let common = get("sock", "__sk_common")?;
        Some(SrvOffsets {
            family: common + get("sock_common", "skc_family")?,
            num: common + get("sock_common", "skc_num")?,
            sk_type: get("sock", "sk_type")?,
            valid: 1,
        })
    })();
    found.unwrap_or_default()
}

/// One server's requests in one interval (all CPUs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SrvCharge {
    pub tgid: u32,
    pub requests: u64,
    pub latency_ns: u64,
    pub max_ns: u64,
    /// Its latency histogram (`HIST_BUCKETS` counts) when it held a slot all interval.
    pub hist: Option<Vec<u32>>,
    /// Open server connections it holds (None: not counted).
    pub conns: Option<u64>,
}

/// One process's socket bytes in one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetCharge {
    pub tgid: u32,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// The servers part of one closed interval.
#[derive(Clone, Debug, Default)]
pub struct ServersRaw {
    /// Servers by requests, busiest first.
    pub servers: Vec<SrvCharge>,
    /// Processes by socket bytes, heaviest first.
    pub net: Vec<NetCharge>,
    pub requests: u64,
    pub evictions: u64,
    pub evicted_requests: u64,
    pub unhistogrammed: u64,
    pub conns_full: u64,
    pub counts_full: u64,
    pub net_evictions: u64,
    pub net_evicted_bytes: u64,
    /// Socket receives and sends charged.
    pub net_updates: u64,
}

/// Merge per-CPU server sketches into one row per process, busiest first.
pub fn merge_servers<'a>(sketches: impl IntoIterator<Item = &'a SrvSketch>) -> Vec<SrvCharge> {
    let mut by: HashMap<u32, SrvCharge> = HashMap::new();
    for sk in sketches {
        for s in sk.slots().filter(|s| s.tgid != 0) {
            let e = by.entry(s.tgid).or_insert_with(|| SrvCharge {
                tgid: s.tgid,
                ..Default::default()
            });
            e.requests += s.requests;
            e.latency_ns += s.latency_ns;
            e.max_ns = e.max_ns.max(s.max_ns);
        }
    }
    let mut v: Vec<SrvCharge> = by.into_values().collect();
    v.sort_by(|a, b| b.requests.cmp(&a.requests).then(a.tgid.cmp(&b.tgid)));
    v
}

/// Merge per-CPU network sketches into one row per process, heaviest first.
pub fn merge_net<'a>(sketches: impl IntoIterator<Item = &'a NetSketch>) -> Vec<NetCharge> {
    let mut by: HashMap<u32, (u64, u64)> = HashMap::new();
    for sk in sketches {
        for s in sk.slots().filter(|s| s.tgid != 0) {
            let e = by.entry(s.tgid).or_default();
            e.0 += s.rx_bytes;
            e.1 += s.tx_bytes;
        }
    }
    let mut v: Vec<NetCharge> = by
        .into_iter()
        .map(|(tgid, (rx_bytes, tx_bytes))| NetCharge {
            tgid,
            rx_bytes,
            tx_bytes,
        })
        .collect();
    let w = |c: &NetCharge| c.rx_bytes + c.tx_bytes;
    v.sort_by(|a, b| w(b).cmp(&w(a)).then(a.tgid.cmp(&b.tgid)));
    v
}

/// Who holds each histogram slot. Pure: the drain feeds it each interval's busiest servers
/// and writes back the changes it returns.
#[derive(Clone, Debug, Default)]
pub struct HistSlots {
    /// Owner of each slot.
    owner: [Option<u32>; HIST_SLOTS],
    /// Requests per interval of each known server, smoothed (half-life of a few intervals).
    score: HashMap<u32, u64>,
    /// Slots given to a new owner in the interval being written: its histogram still holds
    /// some of the old owner's requests, so it is read and dropped once.
    settling: [bool; HIST_SLOTS],
}

/// A change of the tgid -> slot table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotChange {
    Give { tgid: u32, slot: u32 },
    Take { tgid: u32 },
}

impl HistSlots {
    /// The owner of `slot`, unless it changed hands in the interval just closed.
    pub fn owner_for_read(&self, slot: usize) -> Option<u32> {
        if self.settling[slot] {
            None
        } else {
            self.owner[slot]
        }
    }

    /// Slots whose histograms hold data to read and clear.
    pub fn used(&self) -> impl Iterator<Item = usize> + '_ {
        (0..HIST_SLOTS).filter(|&s| self.owner[s].is_some() || self.settling[s])
    }

    /// Fold one interval's request counts (`(tgid, requests)`) and the processes that exited;
    /// return the table changes. A server with no slot takes a free one, or the slot of the
    /// least busy owner when it is more than twice as busy (so two alike do not swap every
    /// interval).
    pub fn update(&mut self, counts: &[(u32, u64)], exited: &HashSet<u32>) -> Vec<SlotChange> {
        self.settling = [false; HIST_SLOTS];
        let mut changes = Vec::new();
        for s in self.score.values_mut() {
            *s = *s * 3 / 4;
        }
        for &(tgid, n) in counts {
            *self.score.entry(tgid).or_default() += n * 4;
        }
        for slot in 0..HIST_SLOTS {
            if let Some(t) = self.owner[slot]
                && (exited.contains(&t) || self.score.get(&t).is_none_or(|&s| s == 0))
            {
                self.owner[slot] = None;
                changes.push(SlotChange::Take { tgid: t });
            }
        }
        self.score.retain(|t, s| *s > 0 && !exited.contains(t));
        let held: HashSet<u32> = self.owner.iter().flatten().copied().collect();
        // Slot table indices taken (two tgids with the same index cannot both hold a slot).
        let mut index: HashSet<u32> = held.iter().map(|t| t & (SLOT_INDEX - 1)).collect();
        let mut want: Vec<(u32, u64)> = self
            .score
            .iter()
            .filter(|(t, _)| !held.contains(t))
            .map(|(&t, &s)| (t, s))
            .collect();
        want.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (tgid, score) in want {
            if index.contains(&(tgid & (SLOT_INDEX - 1))) {
                continue;
            }
            let slot = match self.owner.iter().position(Option::is_none) {
                Some(free) => free,
                None => {
                    let (slot, low) = self
                        .owner
                        .iter()
                        .enumerate()
                        .filter_map(|(i, o)| o.map(|t| (i, self.score.get(&t).copied())))
                        .map(|(i, s)| (i, s.unwrap_or(0)))
                        .min_by_key(|&(_, s)| s)
                        .unwrap_or((0, u64::MAX));
                    if score <= low.saturating_mul(2) {
                        break;
                    }
                    if let Some(t) = self.owner[slot] {
                        index.remove(&(t & (SLOT_INDEX - 1)));
                        changes.push(SlotChange::Take { tgid: t });
                    }
                    slot
                }
            };
            self.owner[slot] = Some(tgid);
            self.settling[slot] = true;
            index.insert(tgid & (SLOT_INDEX - 1));
            changes.push(SlotChange::Give {
                tgid,
                slot: slot as u32,
            });
        }
        changes
    }
}

/// The pipeline's maps.
pub(super) struct ServerMaps {
    srv: SketchArray<SrvSketch>,
    net: SketchArray<NetSketch>,
    hist: PerCpuValue<SrvHist>,
    slot_of: Array<MapData, u64>,
    conn_count: BpfHashMap<MapData, u32, i64>,
    ports: Array<MapData, u64>,
    cpu: PerCpuValue<SrvCpu>,
}

impl ServerMaps {
    pub(super) fn take(ebpf: &mut Ebpf, ncpus: usize) -> Result<Self, ProbeError> {
        Ok(Self {
            srv: take_sketch(ebpf, map_names::SRV_SKETCH, ncpus)?,
            net: take_sketch(ebpf, map_names::NET_SKETCH, ncpus)?,
            hist: take_map(ebpf, map_names::SRV_HIST, |m| {
                PerCpuValue::new(m, map_names::SRV_HIST, ncpus)
            })?,
            slot_of: take_map(ebpf, map_names::SRV_SLOT_OF, Array::try_from)?,
            conn_count: take_map(ebpf, map_names::SRV_CONN_COUNT, BpfHashMap::try_from)?,
            ports: take_map(ebpf, map_names::SRV_PORTS, Array::try_from)?,
            cpu: take_map(ebpf, map_names::SRV_CPU, |m| {
                PerCpuValue::new(m, map_names::SRV_CPU, ncpus)
            })?,
        })
    }
}

/// How long the open-connection counts read from the kernel are used before they are read
/// again (a gauge shown per second: no need for a map read per server per interval).
const CONNS_TTL: Duration = Duration::from_secs(1);

/// Userspace state of the pipeline between drains.
pub(super) struct ServerDrain {
    maps: ServerMaps,
    slots: HistSlots,
    /// Open connections per server as last read, and when.
    conns: HashMap<u32, u64>,
    conns_read: Option<Instant>,
}

impl ServerDrain {
    pub(super) fn new(maps: ServerMaps) -> Result<Self, ProbeError> {
        let mut d = Self {
            maps,
            slots: HistSlots::default(),
            conns: HashMap::new(),
            conns_read: None,
        };
        d.seed_ports()?;
        Ok(d)
    }

    /// Mark every TCP port something listens on now, in every network namespace; from here
    /// on `sock_state` marks each new listener itself. Bits are never cleared: a port that
    /// stops being listened on stays marked (only a client whose own local port is that
    /// number would then be taken for a server).
    fn seed_ports(&mut self) -> Result<(), ProbeError> {
        let mut words = [0u64; PORT_WORDS as usize];
        for port in crate::os::ports::all_listening_tcp_ports() {
            words[usize::from(port >> 6)] |= 1u64 << (port & 63);
        }
        for (w, bits) in words.iter().enumerate().filter(|(_, b)| **b != 0) {
            // Or in what the kernel may have set since the programs were attached.
            let cur = self.maps.ports.get(&(w as u32), 0).unwrap_or(0);
            self.maps
                .ports
                .set(w as u32, cur | bits, 0)
                .map_err(classify("writing SRV_PORTS"))?;
        }
        Ok(())
    }

    /// Wait (briefly) until no CPU is inside a socket program run: a CPU moved to the next
    /// interval by IPI may have been interrupted in one that writes the closed interval.
    fn quiesce(&mut self) -> Result<(), ProbeError> {
        for _ in 0..1000 {
            let v = self.maps.cpu.read().map_err(classify("reading SRV_CPU"))?;
            if v.iter().all(|c| c.busy == 0) {
                return Ok(());
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Read and clear the interval of parity `old_parity` (after the CPU drain has seen every
    /// CPU move past it); `exited` are the processes that ended in it; `ipi_moved`, some CPU
    /// was moved to the next interval by IPI (and may have been inside a socket program).
    pub(super) fn drain(
        &mut self,
        old_parity: u32,
        exited: &HashSet<u32>,
        ipi_moved: bool,
    ) -> Result<ServersRaw, ProbeError> {
        let p = old_parity & 1;
        if ipi_moved {
            self.quiesce()?;
        }
        let m = &mut self.maps;
        // SAFETY: the socket programs write the parity of their CPU's epoch, and every CPU has
        // moved past `p` (the CPU drain) and left any run an IPI interrupted (`quiesce`); none
        // writes `p` before the flip after next (the same for each `closed` and `clear` below).
        let srv = unsafe { m.srv.closed(p) };
        let mut raw = ServersRaw {
            servers: merge_servers(srv),
            ..Default::default()
        };
        for s in srv {
            raw.requests += s.requests;
            raw.evictions += s.evictions;
            raw.evicted_requests += s.evicted_requests;
            raw.unhistogrammed += s.unhistogrammed;
            raw.conns_full += s.conns_full;
            raw.counts_full += s.counts_full;
        }
        // SAFETY: as above.
        unsafe { m.srv.clear(p) };
        // SAFETY: as above.
        let net = unsafe { m.net.closed(p) };
        raw.net = merge_net(net);
        for s in net {
            raw.net_evictions += s.evictions;
            raw.net_evicted_bytes += s.evicted_bytes;
            raw.net_updates += s.updates;
        }
        // SAFETY: as above.
        unsafe { m.net.clear(p) };
        // Histograms of the slots in use: attributed to their owner unless the slot changed
        // hands while the interval was open. A slot holds latencies only of requests the
        // sketch counted, so an owner with no row has an empty one (unless the sketch evicted
        // it: then every slot is read).
        let mut hists: HashMap<u32, Vec<u32>> = HashMap::new();
        let answered: HashSet<u32> = raw.servers.iter().map(|s| s.tgid).collect();
        let used: Vec<usize> = self
            .slots
            .used()
            .filter(|&s| {
                raw.evictions > 0
                    || self
                        .slots
                        .owner_for_read(s)
                        .is_none_or(|t| answered.contains(&t))
            })
            .collect();
        for slot in used {
            let idx = p * HIST_SLOTS as u32 + slot as u32;
            let per_cpu = m.hist.read_at(idx).map_err(classify("reading SRV_HIST"))?;
            let mut sum = vec![0u32; HIST_BUCKETS];
            let mut any = false;
            for h in per_cpu {
                if h.count == 0 {
                    continue;
                }
                any = true;
                for (a, b) in sum.iter_mut().zip(h.buckets.iter()) {
                    *a = a.saturating_add(*b);
                }
            }
            if any {
                m.hist
                    .clear_at(idx)
                    .map_err(classify("clearing SRV_HIST"))?;
            }
            match self.slots.owner_for_read(slot) {
                Some(t) => {
                    hists.insert(t, sum);
                }
                None => {
                    raw.unhistogrammed += sum.iter().map(|&c| u64::from(c)).sum::<u64>();
                }
            }
        }
        if self.conns_read.is_none_or(|t| t.elapsed() >= CONNS_TTL) {
            self.conns.clear();
            self.conns_read = Some(Instant::now());
        }
        for s in &mut raw.servers {
            s.hist = hists.remove(&s.tgid);
            s.conns = match self.conns.get(&s.tgid) {
                Some(&n) => Some(n),
                None => match m.conn_count.get(&s.tgid, 0) {
                    Ok(n) => {
                        let n = n.max(0) as u64;
                        self.conns.insert(s.tgid, n);
                        Some(n)
                    }
                    Err(_) => None,
                },
            };
        }
        // Counts of processes that ended are theirs no more.
        for t in exited {
            let _ = m.conn_count.remove(t);
            self.conns.remove(t);
        }
        let counts: Vec<(u32, u64)> = raw.servers.iter().map(|s| (s.tgid, s.requests)).collect();
        for c in self.slots.update(&counts, exited) {
            match c {
                SlotChange::Give { tgid, slot } => m
                    .slot_of
                    .set(tgid & (SLOT_INDEX - 1), slot_entry(tgid, slot), 0)
                    .map_err(classify("writing SRV_SLOT_OF"))?,
                SlotChange::Take { tgid } => m
                    .slot_of
                    .set(tgid & (SLOT_INDEX - 1), 0, 0)
                    .map_err(classify("writing SRV_SLOT_OF"))?,
            }
        }
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebee_shared::servers::{NetSlot, SrvSlot};

    #[test]
    fn a_server_in_several_stages_and_cpus_is_summed() {
        let mut a = SrvSketch::default();
        let mut b = SrvSketch::default();
        a.stages[0][1] = SrvSlot {
            tgid: 5,
            flags: 0,
            requests: 10,
            latency_ns: 100,
            max_ns: 30,
        };
        b.stages[2][7] = SrvSlot {
            tgid: 5,
            flags: 0,
            requests: 5,
            latency_ns: 50,
            max_ns: 40,
        };
        b.stages[0][0] = SrvSlot {
            tgid: 6,
            flags: 0,
            requests: 12,
            latency_ns: 1,
            max_ns: 1,
        };
        // What `add` would have counted: the merge reads only sketches with inserts.
        (a.requests, b.requests) = (10, 17);
        let rows = merge_servers([&a, &b]);
        assert_eq!(rows[0].tgid, 5);
        assert_eq!(
            (rows[0].requests, rows[0].latency_ns, rows[0].max_ns),
            (15, 150, 40)
        );
        assert_eq!(rows[1].tgid, 6);
        let mut n = NetSketch::default();
        n.stages[0][0] = NetSlot {
            tgid: 3,
            flags: 0,
            rx_bytes: 1,
            tx_bytes: 1,
        };
        n.stages[1][0] = NetSlot {
            tgid: 4,
            flags: 0,
            rx_bytes: 100,
            tx_bytes: 0,
        };
        n.updates = 2;
        assert_eq!(merge_net([&n])[0].tgid, 4, "heaviest first");
    }

    #[test]
    fn the_busiest_servers_hold_the_slots_and_a_new_owner_settles_first() {
        let mut s = HistSlots::default();
        let none = HashSet::default();
        let counts: Vec<(u32, u64)> = (1..=HIST_SLOTS as u32 + 8)
            .map(|t| (t, u64::from(t) * 10))
            .collect();
        let ch = s.update(&counts, &none);
        assert_eq!(ch.len(), HIST_SLOTS);
        // The busiest got them; the 8 least busy did not.
        for t in 1..=8 {
            assert!(!s.owner.contains(&Some(t)), "{t} should have no slot");
        }
        // Each new slot is dropped once (it may hold an earlier owner's requests).
        assert!((0..HIST_SLOTS).all(|i| s.owner_for_read(i).is_none()));
        let ch = s.update(&counts, &none);
        assert!(ch.is_empty(), "a steady ranking changes nothing: {ch:?}");
        assert!((0..HIST_SLOTS).all(|i| s.owner_for_read(i).is_some()));
        // A much busier newcomer takes the least busy owner's slot.
        let mut more = counts.clone();
        more.push((1000, 100_000));
        let ch = s.update(&more, &none);
        assert!(ch.contains(&SlotChange::Take { tgid: 9 }), "{ch:?}");
        assert!(
            ch.iter()
                .any(|c| matches!(c, SlotChange::Give { tgid: 1000, .. }))
        );
        // An exited owner frees its slot.
        let gone: HashSet<u32> = HashSet::from_iter([1000]);
        let ch = s.update(&more, &gone);
        assert!(ch.contains(&SlotChange::Take { tgid: 1000 }), "{ch:?}");
    }
}
