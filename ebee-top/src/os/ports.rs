//! The ports a process serves on, from /proc (through the procfs crate): the request model counts
//! traffic on a TCP or UDP socket as server-side when its local port is one of these. Read when
//! a process is pinned; `listen()` calls made while pinned are seen by the kernel itself.
//!
//! Nothing read here is trusted: a table procfs cannot parse counts as empty, never a panic.

use std::collections::HashSet;
use std::net::SocketAddr;

use procfs::net::{TcpState, UdpState};
use procfs::process::{FDTarget, Process};

/// Socket inodes of the process's open descriptors (read without following a link).
fn socket_inodes(p: &Process) -> HashSet<u64> {
    let Ok(fds) = p.fd() else {
        return HashSet::new();
    };
    fds.flatten()
        .filter_map(|fd| match fd.target {
            FDTarget::Socket(ino) => Some(ino),
            _ => None,
        })
        .collect()
}

/// Local ports of the sockets (`(local address, serving, inode)`) that serve and belong to
/// the process (`inodes`), without port 0.
fn serving_ports(
    sockets: impl IntoIterator<Item = (SocketAddr, bool, u64)>,
    inodes: &HashSet<u64>,
) -> Vec<u16> {
    sockets
        .into_iter()
        .filter(|(addr, serving, inode)| *serving && inodes.contains(inode) && addr.port() != 0)
        .map(|(addr, _, _)| addr.port())
        .collect()
}

/// Ports the process listens on (TCP) or receives on unconnected (UDP), IPv4 and IPv6, in the
/// process's own network namespace.
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let Ok(p) = Process::new(pid as i32) else {
        return Vec::new();
    };
    let inodes = socket_inodes(&p);
    if inodes.is_empty() {
        return Vec::new();
    }
    let tcp = |t: procfs::ProcResult<Vec<procfs::net::TcpNetEntry>>| {
        t.unwrap_or_default()
            .into_iter()
            .map(|e| (e.local_address, e.state == TcpState::Listen, e.inode))
    };
    let udp = |t: procfs::ProcResult<Vec<procfs::net::UdpNetEntry>>| {
        // An unconnected UDP socket shows the state TCP_CLOSE.
        t.unwrap_or_default()
            .into_iter()
            .map(|e| (e.local_address, e.state == UdpState::Close, e.inode))
    };
    let mut out = serving_ports(
        tcp(p.tcp())
            .chain(tcp(p.tcp6()))
            .chain(udp(p.udp()))
            .chain(udp(p.udp6())),
        &inodes,
    );
    out.sort_unstable();
    out.dedup();
    out
}

/// Local ports of every listening TCP socket (IPv4 and IPv6) in every network namespace a
/// process is in: the servers pipeline's seed. One process per namespace is read.
pub fn all_listening_tcp_ports() -> Vec<u16> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut read = |p: &Process| {
        let listening = |t: procfs::ProcResult<Vec<procfs::net::TcpNetEntry>>| {
            t.unwrap_or_default()
                .into_iter()
                .filter(|e| e.state == TcpState::Listen && e.local_address.port() != 0)
                .map(|e| e.local_address.port())
        };
        out.extend(listening(p.tcp()).chain(listening(p.tcp6())));
    };
    if let Ok(me) = Process::myself() {
        if let Ok(ns) = std::fs::read_link("/proc/self/ns/net") {
            seen.insert(ns);
        }
        read(&me);
    }
    // One listing of /proc and one readlink a process; only the first process of each
    // namespace is opened.
    for pid in super::pids() {
        // read_link does not follow: the target is the namespace's name, "net:[inode]".
        let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/net")) else {
            continue;
        };
        if seen.insert(ns) {
            if let Ok(p) = Process::new(pid as i32) {
                read(&p);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use procfs::FromReadSI as _;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   100        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:18EB 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000   100        0 4243 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 100 0 0 10 0
";

    fn table(text: &str) -> Vec<(SocketAddr, bool, u64)> {
        procfs::net::TcpNetEntries::from_read(text.as_bytes(), procfs::current_system_info())
            .map(|t| t.0)
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.local_address, e.state == TcpState::Listen, e.inode))
            .collect()
    }

    #[test]
    fn listening_sockets_of_the_process_only() {
        let inodes: HashSet<u64> = [4242, 4243].into_iter().collect();
        assert_eq!(serving_ports(table(TCP), &inodes), vec![0x18EB]);
        assert!(serving_ports(table(TCP), &HashSet::new()).is_empty());
        assert!(serving_ports(table(""), &inodes).is_empty());
        // A table that does not parse is empty, not a panic.
        assert!(serving_ports(table(&format!("{TCP}   garbage line\n")), &inodes).is_empty());
    }

    #[test]
    fn finds_a_real_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening_ports(std::process::id()).contains(&port));
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let uport = u.local_addr().unwrap().port();
        assert!(listening_ports(std::process::id()).contains(&uport));
        assert!(all_listening_tcp_ports().contains(&port));
        assert!(!all_listening_tcp_ports().contains(&uport), "TCP only");
    }
}
