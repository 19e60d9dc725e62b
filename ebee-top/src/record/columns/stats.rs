//! Where the encoder's bytes go: a developer's measure, off unless `track_stats(true)`.

pub(super) static TRACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
thread_local! {
    static STATS: std::cell::RefCell<std::collections::BTreeMap<String, f64>> =
        const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
}

/// Start (or stop) measuring where the encoder's bytes go, on this thread.
pub fn track_stats(on: bool) {
    TRACK.store(on, std::sync::atomic::Ordering::Relaxed);
}

pub(super) fn tracking() -> bool {
    TRACK.load(std::sync::atomic::Ordering::Relaxed)
}

/// Add `bytes` to the measure `what`.
pub(crate) fn stat(what: impl FnOnce() -> String, bytes: f64) {
    if tracking() {
        STATS.with(|s| *s.borrow_mut().entry(what()).or_default() += bytes);
    }
}

/// The measures so far, bytes summed over every payload encoded on this thread.
pub fn stats() -> Vec<(String, f64)> {
    STATS.with(|s| s.borrow().iter().map(|(k, v)| (k.clone(), *v)).collect())
}
