//! Draining the QoS pipeline: waiting out `sys_exit` runs still in flight, then reading each
//! busy slot's closed interval, summing its per-CPU copies, and clearing it for reuse.

use std::time::{Duration, Instant};

use ebee_shared::qos::{BUCKETS, MAX_PINS, NR_SLOTS, PinStat, RunqStat, SYS_HISTS, SysStat};

use super::super::{ProbeError, classify};
use super::{QosProbes, QosRaw};

/// Give up waiting for a CPU's in-flight `sys_exit` after this long (counted).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(20);

impl QosProbes {
    /// A flip at `end_ns` has closed the interval of parity `old_parity`: read it for every
    /// pinned (and draining) process and clear it for reuse.
    pub(in crate::probes) fn drain(
        &mut self,
        old_parity: u32,
        end_ns: u64,
    ) -> Result<Vec<QosRaw>, ProbeError> {
        let reads = self.slots.drain(end_ns);
        if reads.is_empty() {
            return Ok(Vec::new());
        }
        self.wait_cpus().map_err(classify("QoS handshake"))?;
        let mut out = Vec::with_capacity(reads.len());
        for r in reads {
            let k = old_parity * MAX_PINS as u32 + r.slot as u32;
            let m = &mut self.maps;
            let mut sys = vec![SysStat::default(); NR_SLOTS * m.sys.copies()];
            let mut hists = vec![0u32; SYS_HISTS * BUCKETS];
            let mut pin = vec![PinStat::default(); m.pin.copies()];
            let mut hist_idx = vec![0u64; NR_SLOTS];
            m.sys
                .read(k, &mut sys)
                .map_err(classify("reading QOS_SYS"))?;
            m.hist
                .read(k, &mut hists)
                .map_err(classify("reading QOS_HIST"))?;
            m.pin
                .read(k, &mut pin)
                .map_err(classify("reading QOS_PIN"))?;
            m.hist_idx
                .read(r.slot as u32, &mut hist_idx)
                .map_err(classify("reading QOS_HIST_IDX"))?;
            m.sys
                .write(k, &vec![SysStat::default(); NR_SLOTS * m.sys.copies()])
                .map_err(classify("clearing QOS_SYS"))?;
            m.hist
                .write(k, &vec![0u32; SYS_HISTS * BUCKETS])
                .map_err(classify("clearing QOS_HIST"))?;
            m.pin
                .write(k, &vec![PinStat::default(); m.pin.copies()])
                .map_err(classify("clearing QOS_PIN"))?;
            let mut runq = [RunqStat::default()];
            m.runq
                .read(k, &mut runq)
                .map_err(classify("reading QOS_RUNQ"))?;
            m.runq
                .write(k, &[RunqStat::default()])
                .map_err(classify("clearing QOS_RUNQ"))?;
            out.push(QosRaw {
                pid: r.pid,
                sys: fold_sys(&sys),
                hist_idx,
                hists,
                pin: Box::new(fold_pin(&pin)),
                runq: Box::new(runq[0]),
                last: r.last,
                exited: r.exited,
            });
            if r.last {
                // Both buffers of the slot are now read or empty; the slots have freed it.
                m.clear_slot(r.slot)?;
            }
        }
        Ok(out)
    }

    /// Wait until no CPU is inside a `sys_exit` run that started before now (one that may
    /// have read the pin table as it was before the last write).
    pub(super) fn wait_cpus(&mut self) -> Result<(), aya::maps::MapError> {
        let cpu = &self.maps.cpu;
        let start: Vec<u64> = cpu.get(&0, 0)?.iter().map(|c| c.seq).collect();
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let mut busy: Vec<(usize, u64)> = start
            .iter()
            .enumerate()
            .filter(|(_, s)| *s % 2 == 1)
            .map(|(i, s)| (i, *s))
            .collect();
        while !busy.is_empty() {
            if Instant::now() > deadline {
                self.handshake_timeouts += busy.len() as u64;
                break;
            }
            std::thread::yield_now();
            let now: Vec<u64> = cpu.get(&0, 0)?.iter().map(|c| c.seq).collect();
            // A CPU whose mark moved has finished the run we waited for.
            busy.retain(|(i, s)| now.get(*i) == Some(s));
        }
        Ok(())
    }
}

/// One pinned process's per-syscall statistics, summed over the per-CPU copies (`NR_SLOTS`
/// entries per CPU, back to back).
fn fold_sys(per_cpu: &[SysStat]) -> Vec<SysStat> {
    let mut out = vec![SysStat::default(); NR_SLOTS];
    for cpu in per_cpu.chunks_exact(NR_SLOTS) {
        for (o, s) in out.iter_mut().zip(cpu) {
            o.count += s.count;
            o.total_ns += s.total_ns;
            o.max_ns = o.max_ns.max(s.max_ns);
        }
    }
    out
}

/// One pinned process's request-model counters, summed over the per-CPU copies.
fn fold_pin(per_cpu: &[PinStat]) -> PinStat {
    let mut o = PinStat::default();
    for p in per_cpu {
        o.requests += p.requests;
        o.req_total_ns += p.req_total_ns;
        o.req_max_ns = o.req_max_ns.max(p.req_max_ns);
        o.recvs += p.recvs;
        o.sends_idle += p.sends_idle;
        o.other_sock_io += p.other_sock_io;
        o.accepts += p.accepts;
        o.unmatched += p.unmatched;
        o.hist_full += p.hist_full;
        o.conn_full += p.conn_full;
        for (b, v) in o.req_hist.buckets.iter_mut().zip(&p.req_hist.buckets) {
            *b += v;
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_cpu_copies_sum_and_maxima_take_the_largest() {
        let mut per_cpu = vec![SysStat::default(); 2 * NR_SLOTS];
        per_cpu[3] = SysStat {
            count: 2,
            total_ns: 10,
            max_ns: 7,
        };
        per_cpu[NR_SLOTS + 3] = SysStat {
            count: 1,
            total_ns: 9,
            max_ns: 9,
        };
        let s = fold_sys(&per_cpu);
        assert_eq!(s.len(), NR_SLOTS);
        assert_eq!((s[3].count, s[3].total_ns, s[3].max_ns), (3, 19, 9));
        let a = PinStat {
            requests: 1,
            req_max_ns: 5,
            ..Default::default()
        };
        let b = PinStat {
            requests: 2,
            req_max_ns: 3,
            ..Default::default()
        };
        let p = fold_pin(&[a, b]);
        assert_eq!((p.requests, p.req_max_ns), (3, 5));
    }
}
