//! An `EbpfLoader` that has not parsed the kernel's BTF.
//!
//! aya 0.14's `EbpfLoader::new()` always parses all of /sys/kernel/btf/vmlinux (about 19 MB
//! of heap at its height for a 5.5 MB file) as the target of CO-RE relocations, and offers no
//! constructor without it; `.btf(None)` afterwards only drops the result. Our object has no
//! CO-RE relocations (aya-ebpf emits none; a test below checks the object), so that parse
//! was the largest part of ebee-top's peak memory for nothing. [`new`] makes the loader on a
//! short-lived thread on which opening any file fails (a seccomp filter on that thread alone,
//! which ends with it), so the parse never starts and the loader comes back with no BTF.
//! Should the filter not install, the loader is made the ordinary way (more memory, same
//! result).

use aya::EbpfLoader;

/// A loader with no target BTF.
pub(super) fn new() -> EbpfLoader<'static> {
    let made = std::thread::Builder::new()
        .name("ebee-loader".into())
        .spawn(|| {
            // A failure leaves this thread as it was: the loader then parses, as before.
            let _ = deny_open_on_this_thread();
            EbpfLoader::new()
        })
        .ok()
        .and_then(|t| t.join().ok());
    let mut loader = made.unwrap_or_else(EbpfLoader::new);
    loader.btf(None);
    loader
}

/// Make every open(2), openat(2) and openat2(2) of the calling thread fail with ENOENT.
fn deny_open_on_this_thread() -> std::io::Result<()> {
    const fn stmt(code: u32, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        }
    }
    const fn jeq(k: u32, jt: u8) -> libc::sock_filter {
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt,
            jf: 0,
            k,
        }
    }
    // The syscall number is at offset 0 of `struct seccomp_data`. No check of the
    // architecture word: this thread runs only native code, and a mismatch could at worst
    // let an open through (the loader then parses, as without the filter).
    #[cfg(target_arch = "x86_64")]
    let filter = [
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        jeq(libc::SYS_openat as u32, 3),
        jeq(libc::SYS_openat2 as u32, 2),
        jeq(libc::SYS_open as u32, 1),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOENT as u32,
        ),
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let filter = [
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        jeq(libc::SYS_openat as u32, 2),
        jeq(libc::SYS_openat2 as u32, 1),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOENT as u32,
        ),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with integer arguments; no_new_privs applies to this thread (and children
    // it would start, none) and is required to install a filter without CAP_SYS_ADMIN.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `prog` points at `filter`, both alive for the call; without TSYNC the filter
    // applies to the calling thread only.
    if unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &raw const prog,
            0,
            0,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The size of the CO-RE relocation part of the object's `.BTF.ext` section, if it has one.
    fn core_relo_len(elf: &[u8]) -> Option<u32> {
        let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
        let (shoff, shentsize) = (u64_at(0x28), usize::from(u16_at(0x3a)));
        let (shnum, shstrndx) = (usize::from(u16_at(0x3c)), usize::from(u16_at(0x3e)));
        let sec = |i: usize| shoff + i * shentsize;
        let names = u64_at(sec(shstrndx) + 0x18);
        (0..shnum).find_map(|i| {
            let name = names + u32_at(sec(i)) as usize;
            let end = name + elf[name..].iter().position(|b| *b == 0)?;
            (&elf[name..end] == b".BTF.ext").then(|| {
                let off = u64_at(sec(i) + 0x18);
                // btf_ext_header: magic, version, flags, hdr_len, then offset and length of
                // func_info, line_info and (when hdr_len allows) core_relo.
                if u32_at(off + 4) >= 32 {
                    u32_at(off + 28)
                } else {
                    0
                }
            })
        })
    }

    #[test]
    fn the_object_needs_no_target_btf() {
        if super::super::OBJECT.is_empty() {
            eprintln!("SKIPPED: built without the eBPF object (AYA_BUILD_SKIP)");
            return;
        }
        assert_eq!(
            core_relo_len(super::super::OBJECT),
            Some(0),
            "the object has CO-RE relocations: aya must be given the kernel's BTF again"
        );
    }

    #[test]
    fn the_loader_thread_cannot_open_files() {
        let opened = std::thread::spawn(|| {
            super::deny_open_on_this_thread().map(|()| std::fs::read("/proc/self/stat").is_ok())
        })
        .join()
        .unwrap();
        match opened {
            Ok(opened) => assert!(!opened, "the filter let an open through"),
            Err(e) => eprintln!("SKIPPED: no seccomp filter here: {e}"),
        }
        // Other threads are untouched.
        assert!(std::fs::read("/proc/self/stat").is_ok());
    }
}
