//! `syscalls`: a tight loop of one kind of syscall (getppid, or socket calls over TCP or UDP),
//! timed by the thread's own CPU clock, for the overhead benchmarks.

use super::{die, thread_cpu_ns};

/// The sockets of a `syscalls` loop, made before the start byte.
enum Loop {
    Getppid,
    /// A client and the connection a listener accepted: a request/response per iteration.
    Tcp(std::net::TcpStream, std::net::TcpStream),
    /// A TCP socket connected to itself (no listener anywhere): a byte out and back in per
    /// iteration, on a TCP socket that is not a server connection.
    TcpSelf(std::net::TcpStream),
    /// Two connected UDP sockets: a datagram out of one and into the other per iteration.
    Udp(std::net::UdpSocket, std::net::UdpSocket),
}

/// A TCP socket on 127.0.0.1 connected to its own address (TCP simultaneous open).
fn tcp_self() -> std::net::TcpStream {
    use std::os::fd::FromRawFd as _;
    // SAFETY: a fresh socket set up with plain calls on valid arguments; on success its
    // descriptor is owned by the returned stream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        let mut addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let p = (&mut addr as *mut libc::sockaddr_in).cast::<libc::sockaddr>();
        if fd < 0
            || libc::bind(fd, p, len) != 0
            || libc::getsockname(fd, p, &mut len) != 0
            || libc::connect(fd, p, len) != 0
        {
            die(&format!(
                "self-connected TCP socket: {}",
                std::io::Error::last_os_error()
            ));
        }
        std::net::TcpStream::from_raw_fd(fd)
    }
}

pub fn syscalls(calls: u64, kind: &str) {
    use std::io::{Read, Write};
    // The listener stays open for the run (its port is a listening port, as a server's is).
    let mut _listener = None;
    let lp = match kind {
        "getppid" => Loop::Getppid,
        "tcp" => {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| die(&e));
            let addr = l.local_addr().unwrap_or_else(|e| die(&e));
            let c = std::net::TcpStream::connect(addr).unwrap_or_else(|e| die(&e));
            let (s, _) = l.accept().unwrap_or_else(|e| die(&e));
            let _ = c.set_nodelay(true);
            let _ = s.set_nodelay(true);
            _listener = Some(l);
            Loop::Tcp(c, s)
        }
        "tcp-self" => {
            let c = tcp_self();
            let _ = c.set_nodelay(true);
            Loop::TcpSelf(c)
        }
        "udp" => {
            let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| die(&e));
            let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| die(&e));
            let (aa, ba) = (
                a.local_addr().unwrap_or_else(|e| die(&e)),
                b.local_addr().unwrap_or_else(|e| die(&e)),
            );
            a.connect(ba).unwrap_or_else(|e| die(&e));
            b.connect(aa).unwrap_or_else(|e| die(&e));
            Loop::Udp(a, b)
        }
        other => die(&format!("--kind {other}: getppid, tcp, tcp-self or udp")),
    };
    let mut go = [0u8; 1];
    if std::io::stdin().read_exact(&mut go).is_err() {
        return;
    }
    // CPU time of this thread, not wall time: the machine is shared, and time spent waiting
    // for a CPU is not a cost of the syscalls.
    let t0 = thread_cpu_ns();
    let mut b = [0u8; 1];
    match lp {
        Loop::Tcp(mut c, mut s) => {
            for _ in 0..calls {
                let ok = c.write_all(b"x").is_ok()
                    && s.read_exact(&mut b).is_ok()
                    && s.write_all(b"y").is_ok()
                    && c.read_exact(&mut b).is_ok();
                if !ok {
                    die(&"tcp ping-pong failed");
                }
            }
        }
        Loop::TcpSelf(mut c) => {
            for _ in 0..calls {
                if c.write_all(b"x").is_err() || c.read_exact(&mut b).is_err() {
                    die(&"tcp-self loop failed");
                }
            }
        }
        Loop::Udp(a, s) => {
            for _ in 0..calls {
                if a.send(b"x").is_err() || s.recv(&mut b).is_err() {
                    die(&"udp loop failed");
                }
            }
        }
        Loop::Getppid => {
            for _ in 0..calls {
                // SAFETY: getppid has no arguments and no side effects.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
        }
    }
    let ns = thread_cpu_ns().saturating_sub(t0) as f64 / calls.max(1) as f64;
    println!("{ns:.2}");
}
