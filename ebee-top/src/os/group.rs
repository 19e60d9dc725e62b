//! Group names to gids, for `--listen-group`: through the C library (getgrnam_r), so groups
//! from NSS (LDAP, systemd's dynamic users) are found as `chgrp` finds them, not only those
//! in /etc/group.

/// The gid of `group`: a group name first (as chgrp takes it), else a number (any gid).
pub fn gid_of(group: &str) -> Option<u32> {
    by_name(group).or_else(|| group.parse().ok())
}

/// Look a group name up; `None` when there is no such group or the lookup failed.
fn by_name(name: &str) -> Option<u32> {
    let cname = std::ffi::CString::new(name).ok()?;
    // A group with thousands of members needs a larger buffer: grow it on ERANGE, up to 1 MiB.
    let mut buf = vec![0 as libc::c_char; 4096];
    loop {
        // SAFETY: a zeroed `group` is a valid value for getgrnam_r to fill in.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: a NUL-terminated name, the struct and
        // the buffer (with its true length) outlive it, and `found` is written by it.
        let rc = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &raw mut grp,
                buf.as_mut_ptr(),
                buf.len(),
                &raw mut found,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        return (rc == 0 && !found.is_null()).then_some(grp.gr_gid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        // Every Linux system has group 0, named "root".
        assert_eq!(gid_of("root"), Some(0));
        assert_eq!(gid_of("4242"), Some(4242));
        assert_eq!(gid_of("no-such-group-here"), None);
        assert_eq!(gid_of(""), None);
        assert_eq!(gid_of("a\0b"), None);
        assert_eq!(gid_of("-1"), None);
    }
}
