//! The indexes that let a Batch touch only the entries it concerns: when each entry's history
//! must next be trimmed, and when it is to be forgotten (idle for a minute, exited a while ago),
//! so ebee-top's own cost does not grow with the number of processes it has seen.

use std::collections::hash_map;

use super::{EXITED_KEEP_NS, IDLE_FORGET_NS, ProcEntry, ProcKey, ProcTable};

/// When an unpinned entry is forgotten: a while after its exit, or a minute after it was last
/// charged (at once, for one never charged).
fn due_ns(e: &ProcEntry) -> u64 {
    match e.exited_ns {
        Some(t) => t.saturating_add(EXITED_KEEP_NS),
        None => e.last_charged_ns.max(1).saturating_add(IDLE_FORGET_NS),
    }
}

impl ProcTable {
    /// Drop every history cell before `first_kept`, visiting only the entries that have one.
    pub(super) fn trim_history(&mut self, first_kept: u64) {
        while let Some(&(c, k)) = self.oldest.first()
            && c < first_kept
        {
            self.oldest.pop_first();
            self.indexed.remove(&k);
            if let Some(e) = self.entries.get_mut(&k) {
                e.trim(first_kept);
                if let Some(c) = e.first_cell() {
                    self.oldest.insert((c, k));
                    self.indexed.insert(k, c);
                }
            }
        }
    }

    /// File `key` in `oldest` under its oldest cell now (after a charge added history).
    pub(super) fn reindex(&mut self, key: ProcKey) {
        let Some(c) = self.entries.get(&key).and_then(ProcEntry::first_cell) else {
            return;
        };
        match self.indexed.insert(key, c) {
            Some(old) if old == c => {}
            Some(old) => {
                self.oldest.remove(&(old, key));
                self.oldest.insert((c, key));
            }
            None => {
                self.oldest.insert((c, key));
            }
        }
    }

    /// (Re)place `key` in the queue of entries to forget, by its state now.
    pub(super) fn schedule(&mut self, key: ProcKey) {
        let Some(e) = self.entries.get(&key) else {
            return;
        };
        let at = due_ns(e);
        if let Some(old) = self.due_of.insert(key, at) {
            if old == at {
                return;
            }
            self.due.remove(&(old, key));
        }
        self.due.insert((at, key));
    }

    /// Forget the entries whose time has come, unless a pin keeps them.
    pub(super) fn forget_due(&mut self) {
        let now = self.now_ns;
        let mut check: Vec<ProcKey> = std::mem::take(&mut self.parked).into_iter().collect();
        // The fresh ones still never charged nor exited (the others are queued in `due`).
        // Every Batch brings dozens (the memory rows' processes), so the common case, one
        // forgotten at once, is done here with one lookup: it has no history, is not warm
        // and not queued.
        for k in std::mem::take(&mut self.fresh) {
            let hash_map::Entry::Occupied(o) = self.entries.entry(k) else {
                continue;
            };
            let e = o.get();
            if e.last_charged_ns != 0 || e.exited_ns.is_some() {
                continue;
            }
            if now < due_ns(e) || e.kernel_pinned || self.pins.contains(&k) {
                check.push(k);
                continue;
            }
            o.remove();
            if let hash_map::Entry::Occupied(c) = self.current.entry(k.pid)
                && *c.get() == k
            {
                c.remove();
            }
        }
        while let Some(&(at, k)) = self.due.first()
            && at <= now
        {
            self.due.pop_first();
            self.due_of.remove(&k);
            check.push(k);
        }
        for k in check {
            let Some(e) = self.entries.get(&k) else {
                continue;
            };
            if now < due_ns(e) {
                // Charged since it was queued (or parked), or fresh early after boot: back in
                // the queue at its time now.
                self.schedule(k);
                continue;
            }
            if self.pins.contains(&k)
                || e.exited_ns.is_none() && e.last_charged_ns == 0 && e.kernel_pinned
            {
                self.parked.insert(k);
                continue;
            }
            self.entries.remove(&k);
            if let Some(c) = self.indexed.remove(&k) {
                self.oldest.remove(&(c, k));
            }
            self.warm.remove(&k);
            if let Some(at) = self.due_of.remove(&k) {
                self.due.remove(&(at, k));
            }
            if self.current.get(&k.pid) == Some(&k) {
                self.current.remove(&k.pid);
            }
        }
    }
}
