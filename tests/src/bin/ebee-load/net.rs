//! Socket workloads for the servers pipeline's tests and benchmark: a TCP server that answers
//! each request after an injected delay (thread per connection, or a reader and an answerer
//! thread per connection), an epoll client that keeps many keep-alive connections busy and
//! prints how many requests it completed, and a process that sends and receives a known number
//! of bytes over TCP or a Unix socket.

use std::collections::BinaryHeap;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd as _, FromRawFd as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::die;

/// Raise the soft descriptor limit to the hard one (1,000 connections need more than 1024).
pub fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// A listener on 127.0.0.1:`port` with a backlog of 4096 (std's is 128, too few for a
/// thousand clients connecting at once).
fn listen(port: u16) -> TcpListener {
    // SAFETY: a fresh socket set up with plain calls on valid arguments; on success its
    // descriptor is owned by the returned listener.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            die(&std::io::Error::last_os_error());
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        if libc::bind(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
            || libc::listen(fd, 4096) != 0
        {
            die(&format!(
                "listening on 127.0.0.1:{port}: {}",
                std::io::Error::last_os_error()
            ));
        }
        TcpListener::from_raw_fd(fd)
    }
}

/// Wait until `t`: sleeping until `spin` before it, then spinning (a sleep overshoots its
/// deadline by tens of µs on a busy VM; the spin makes the answer leave within a few µs).
fn sleep_until(t: Instant, spin: Duration) {
    if let Some(d) = t.checked_duration_since(Instant::now() + spin) {
        std::thread::sleep(d);
    }
    while Instant::now() < t {
        std::hint::spin_loop();
    }
}

/// The delay of request `i` of a connection: every `slow_every`-th is slow.
fn delay_of(i: u64, slow_every: u64, fast: Duration, slow: Duration) -> Duration {
    if slow_every > 0 && i % slow_every == slow_every - 1 {
        slow
    } else {
        fast
    }
}

/// Serve 4-byte requests on 127.0.0.1:`port`, answering each with 4 bytes `fast_us` after it
/// was read (`slow_us` for every `slow_every`-th request of a connection), sleeping until
/// `spin_us` before the deadline and spinning the rest. `split`: each connection has a thread
/// that reads requests and another that answers them. `fifo`: run at real-time priority. A
/// connection that sends [`OWN_LATENCIES`] first gets the latencies the server measured itself.
pub fn delay_server(
    port: u16,
    fast_us: u64,
    slow_us: u64,
    slow_every: u64,
    spin_us: u64,
    split: bool,
    fifo: bool,
) {
    let spin = Duration::from_micros(spin_us);
    if fifo {
        // Real-time priority 1 (inherited by every thread spawned later): the other load of
        // a shared machine does not delay the answers, so they leave when they are due.
        let p = libc::sched_param { sched_priority: 1 };
        // SAFETY: sched_setscheduler on ourselves with a valid parameter.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
            die(&format!("SCHED_FIFO: {}", std::io::Error::last_os_error()));
        }
    }
    raise_nofile();
    // Sleeps end as close to their deadline as the timer allows (default slack is 50 µs).
    // SAFETY: prctl on ourselves with a plain value.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let (fast, slow) = (
        Duration::from_micros(fast_us),
        Duration::from_micros(slow_us),
    );
    let l = listen(port);
    println!("ready");
    let _ = std::io::stdout().flush();
    // What the server itself measured: from each request's read returning to its answer's
    // write returning, in ns. A connection whose first request is `pct?` is sent them all.
    let own: Arc<Mutex<Vec<u64>>> = Arc::default();
    let spawn = |f: Box<dyn FnOnce() + Send>| {
        let _ = std::thread::Builder::new().stack_size(128 << 10).spawn(f);
    };
    for c in l.incoming() {
        let Ok(mut c) = c else { continue };
        let _ = c.set_nodelay(true);
        let own = Arc::clone(&own);
        if !split {
            spawn(Box::new(move || {
                let mut req = [0u8; 4];
                let mut i = 0u64;
                while c.read_exact(&mut req).is_ok() {
                    if i == 0 && &req == OWN_LATENCIES {
                        send_own(&mut c, &own);
                        return;
                    }
                    let read = Instant::now();
                    sleep_until(read + delay_of(i, slow_every, fast, slow), spin);
                    if c.write_all(&req).is_err() {
                        return;
                    }
                    note(&own, read);
                    i += 1;
                }
            }));
            continue;
        }
        let Ok(mut w) = c.try_clone() else { continue };
        let (tx, rx) = std::sync::mpsc::channel::<([u8; 4], Instant, Instant)>();
        let own_r = Arc::clone(&own);
        spawn(Box::new(move || {
            let mut req = [0u8; 4];
            let mut i = 0u64;
            while c.read_exact(&mut req).is_ok() {
                if i == 0 && &req == OWN_LATENCIES {
                    send_own(&mut c, &own_r);
                    return;
                }
                let read = Instant::now();
                let due = read + delay_of(i, slow_every, fast, slow);
                if tx.send((req, read, due)).is_err() {
                    return;
                }
                i += 1;
            }
        }));
        spawn(Box::new(move || {
            for (req, read, due) in rx {
                sleep_until(due, spin);
                if w.write_all(&req).is_err() {
                    return;
                }
                note(&own, read);
            }
        }));
    }
}

/// The request that asks a delay server for its own latencies instead of being answered.
pub const OWN_LATENCIES: &[u8; 4] = b"pct?";

/// Keep one answered request's latency as the server measured it.
fn note(own: &Mutex<Vec<u64>>, read: Instant) {
    let ns = u64::try_from(read.elapsed().as_nanos()).unwrap_or(u64::MAX);
    own.lock().unwrap_or_else(|e| e.into_inner()).push(ns);
}

/// Write every latency the server measured so far, in ns, one per line, and close.
fn send_own(c: &mut TcpStream, own: &Mutex<Vec<u64>>) {
    let text: String = own
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|ns| format!("{ns}\n"))
        .collect();
    let _ = c.write_all(text.as_bytes());
}

/// One client connection of [`delay_client`].
struct Conn {
    s: TcpStream,
    /// Bytes of the current answer read so far.
    got: usize,
    waiting: bool,
}

/// Keep `conns` keep-alive connections to 127.0.0.1:`port`, each sending a 4-byte request,
/// waiting for its 4-byte answer, then `think_ms` (0: at once) before the next, for
/// `seconds`; then wait for the answers still due and print the requests completed.
pub fn delay_client(port: u16, conns: u32, think_ms: u64, seconds: f64) {
    raise_nofile();
    let think = Duration::from_millis(think_ms);
    let mut cs: Vec<Conn> = Vec::new();
    for _ in 0..conns {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| die(&e));
        let _ = s.set_nodelay(true);
        s.set_nonblocking(true).unwrap_or_else(|e| die(&e));
        cs.push(Conn {
            s,
            got: 0,
            waiting: false,
        });
    }
    // SAFETY: epoll_create1 has no pointer arguments.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        die(&std::io::Error::last_os_error());
    }
    for (i, c) in cs.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        // SAFETY: a valid epoll descriptor, socket and event.
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, c.s.as_raw_fd(), &mut ev) } != 0 {
            die(&std::io::Error::last_os_error());
        }
    }
    // Sends due, earliest first (spread over the first think time so they do not march in
    // step).
    let start = Instant::now();
    let mut due: BinaryHeap<std::cmp::Reverse<(Instant, usize)>> = (0..cs.len())
        .map(|i| {
            let off = think.mul_f64(i as f64 / cs.len().max(1) as f64);
            std::cmp::Reverse((start + off, i))
        })
        .collect();
    let stop = start + Duration::from_secs_f64(seconds);
    let mut completed = 0u64;
    let mut outstanding = 0usize;
    let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    loop {
        let now = Instant::now();
        if now >= stop && outstanding == 0 {
            break;
        }
        if now >= stop + Duration::from_secs(5) {
            die(&format!("{outstanding} answers never came"));
        }
        while let Some(std::cmp::Reverse((t, i))) = due.peek().copied() {
            if t > now || now >= stop {
                break;
            }
            due.pop();
            let c = &mut cs[i];
            match c.s.write(b"req!") {
                Ok(4) => {
                    c.waiting = true;
                    c.got = 0;
                    outstanding += 1;
                }
                other => die(&format!("send: {other:?}")),
            }
        }
        let wait_ms = match due.peek() {
            Some(std::cmp::Reverse((t, _))) if now < stop => {
                t.saturating_duration_since(now).as_millis().min(50) as i32
            }
            _ => 50,
        };
        // SAFETY: a valid epoll descriptor and a buffer of `evs.len()` events.
        let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), evs.len() as i32, wait_ms) };
        for ev in evs.iter().take(n.max(0) as usize) {
            let i = ev.u64 as usize;
            let c = &mut cs[i];
            let mut buf = [0u8; 64];
            loop {
                match c.s.read(&mut buf) {
                    Ok(0) => die(&"the server closed a connection"),
                    Ok(k) => c.got += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => die(&e),
                }
            }
            if c.waiting && c.got >= 4 {
                c.waiting = false;
                completed += 1;
                outstanding -= 1;
                due.push(std::cmp::Reverse((Instant::now() + think, i)));
            }
        }
    }
    println!("{completed}");
}

/// Connect to `to` (`tcp:HOST:PORT` or `unix:PATH`), send `send` bytes, then read `recv`
/// bytes, and exit.
pub fn bytes(to: &str, send: u64, recv: u64) {
    fn run(mut s: impl std::io::Read + std::io::Write, send: u64, recv: u64) {
        let chunk = [0x5au8; 16 << 10];
        let mut left = send;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            s.write_all(&chunk[..n]).unwrap_or_else(|e| die(&e));
            left -= n as u64;
        }
        let mut buf = vec![0u8; 64 << 10];
        let mut left = recv;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            match s.read(&mut buf[..n]) {
                Ok(0) => die(&format!("the peer closed with {left} bytes still due")),
                Ok(k) => left -= k as u64,
                Err(e) => die(&e),
            }
        }
    }
    if let Some(addr) = to.strip_prefix("tcp:") {
        run(
            TcpStream::connect(addr).unwrap_or_else(|e| die(&e)),
            send,
            recv,
        );
    } else if let Some(path) = to.strip_prefix("unix:") {
        run(
            std::os::unix::net::UnixStream::connect(path).unwrap_or_else(|e| die(&e)),
            send,
            recv,
        );
    } else {
        die(&format!("--to {to:?}: tcp:HOST:PORT or unix:PATH"));
    }
}
