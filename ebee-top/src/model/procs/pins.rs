//! Pins: processes the user follows for QoS, kept listed whatever their rank and after they
//! exit. A pin given by pid alone (`-p`) becomes a pin of the process once it is known.

use std::collections::BTreeSet;

use super::{ProcKey, ProcTable};

impl ProcTable {
    /// Pins given by pid alone become pins of the process with that pid, once it is known.
    pub(super) fn resolve_pid_pins(&mut self) {
        let by_pid: Vec<ProcKey> = self
            .pins
            .iter()
            .filter(|k| k.start_ticks == 0)
            .copied()
            .collect();
        for k in by_pid {
            if let Some(cur) = self.current.get(&k.pid)
                && cur.start_ticks != 0
            {
                self.pins.remove(&k);
                self.pins.insert(*cur);
            }
        }
    }

    /// Pin or unpin a process; returns whether it is pinned now.
    pub fn toggle_pin(&mut self, key: ProcKey) -> bool {
        if self.pins.remove(&key) {
            false
        } else {
            self.pins.insert(key);
            true
        }
    }

    /// Pin a process by pid (from `-p` on the command line); false when unknown yet, in which
    /// case the pid is pinned with an unknown start time.
    pub fn pin_pid(&mut self, pid: u32) {
        let key = self.current.get(&pid).copied().unwrap_or(ProcKey {
            pid,
            start_ticks: 0,
        });
        self.pins.insert(key);
    }

    pub fn is_pinned(&self, key: &ProcKey) -> bool {
        self.pins.contains(key)
    }

    /// Pids of the pinned processes that still run (what the kernel should follow).
    pub fn live_pins(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .pins
            .iter()
            .filter(|k| self.entries.get(k).is_none_or(|e| !e.exited()))
            .map(|k| k.pid)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub fn pins(&self) -> &BTreeSet<ProcKey> {
        &self.pins
    }
}
