//! Checks made before anything is loaded or the terminal is touched, so a missing privilege or
//! kernel feature gets one actionable line instead of a loader error.

use super::ProbeError;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capabilities of this process (CapEff in /proc/self/status).
fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// True when `caps` allow loading and attaching tracing programs.
pub fn caps_suffice(caps: u64) -> bool {
    let has = |c: u32| caps & (1u64 << c) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// Everything the live source needs, checked up front.
pub fn check_live() -> Result<(), ProbeError> {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(ProbeError::Unsupported(
            "no kernel BTF at /sys/kernel/btf/vmlinux (needs CONFIG_DEBUG_INFO_BTF=y)".into(),
        ));
    }
    match effective_caps() {
        Some(caps) if !caps_suffice(caps) => Err(ProbeError::Permission),
        // Unknown: let the loader decide and classify its error.
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_rules() {
        assert!(!caps_suffice(0));
        assert!(!caps_suffice(1 << CAP_BPF));
        assert!(!caps_suffice(1 << CAP_PERFMON));
        assert!(caps_suffice((1 << CAP_BPF) | (1 << CAP_PERFMON)));
        assert!(caps_suffice(1 << CAP_SYS_ADMIN));
        assert!(caps_suffice(u64::MAX));
    }
}
