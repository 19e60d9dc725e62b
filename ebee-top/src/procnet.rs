//! The ports a process serves on, from /proc: the request model counts traffic on a TCP or UDP
//! socket as server-side when its local port is one of these. Read when a process is pinned;
//! `listen()` calls made while pinned are seen by the kernel itself.
//!
//! Everything read here is untrusted text: malformed lines are skipped, never a panic.

use std::collections::HashSet;

/// TCP state LISTEN in /proc/net/tcp.
const TCP_LISTEN: &str = "0A";
/// UDP "state" of an unconnected socket (TCP_CLOSE) in /proc/net/udp.
const UDP_UNCONNECTED: &str = "07";

/// Socket inodes of the process's open descriptors.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let mut out = HashSet::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for e in dir.flatten() {
        // read_link does not follow the link; the target is text like "socket:[12345]".
        if let Ok(t) = std::fs::read_link(e.path()) {
            if let Some(ino) = t
                .to_str()
                .and_then(|s| s.strip_prefix("socket:["))
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse().ok())
            {
                out.insert(ino);
            }
        }
    }
    out
}

/// Local ports of the sockets in one /proc/net table whose state is `state` and whose inode is
/// in `inodes`. The table format: `sl local_address rem_address st ... uid timeout inode`.
pub fn ports_in_table(text: &str, state: &str, inodes: &HashSet<u64>) -> Vec<u16> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(st), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
            continue;
        };
        if *st != state {
            continue;
        }
        let Ok(inode) = inode.parse::<u64>() else {
            continue;
        };
        if !inodes.contains(&inode) {
            continue;
        }
        if let Some(port) = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        {
            if port != 0 {
                out.push(port);
            }
        }
    }
    out
}

/// Ports the process listens on (TCP) or receives on unconnected (UDP), IPv4 and IPv6.
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes = socket_inodes(pid);
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (table, state) in [
        ("tcp", TCP_LISTEN),
        ("tcp6", TCP_LISTEN),
        ("udp", UDP_UNCONNECTED),
        ("udp6", UDP_UNCONNECTED),
    ] {
        // The process's own network namespace.
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) {
            out.extend(ports_in_table(&text, state, &inodes));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   100        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:18EB 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000   100        0 4243 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 100 0 0 10 0
   garbage line
";

    #[test]
    fn listening_sockets_of_the_process_only() {
        let inodes: HashSet<u64> = [4242, 4243].into_iter().collect();
        assert_eq!(ports_in_table(TCP, TCP_LISTEN, &inodes), vec![0x18EB]);
        assert!(ports_in_table(TCP, TCP_LISTEN, &HashSet::new()).is_empty());
        assert!(ports_in_table("", TCP_LISTEN, &inodes).is_empty());
    }

    #[test]
    fn finds_a_real_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening_ports(std::process::id()).contains(&port));
    }
}
