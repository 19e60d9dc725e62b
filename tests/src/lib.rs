//! Helpers for ebee-top's privileged integration tests: finding the binaries, deciding whether
//! eBPF can be loaded here, child processes that are killed on drop, and /proc ground truth.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Path of a binary built in the same profile as this test (target/<profile>/<name>).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test-binary>
    let dir = exe
        .parent()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    dir.join(name)
}

/// True when this process may load eBPF. Under `CI=true` a test that cannot is a failure,
/// never a silent skip; elsewhere it says loudly that it skipped.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: CI is set but this test is not running as root: privileged tests must run"
    );
    eprintln!("SKIPPED {test}: needs root to load eBPF (run `cargo xtask test`)");
    false
}

/// Pin the calling thread to `cpu` (best effort: the benchmarks and loads that use it still
/// run, only less steadily, where the CPU is not ours).
pub fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET and sched_setaffinity get a valid
    // pointer and its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// `ebee-load ARGS` pinned to `cpu` (taskset) at niceness `nice`; panics when it cannot start
/// (a test helper: a failed start is a failed test).
#[allow(clippy::expect_used)]
pub fn ebee_load_on(cpu: usize, nice: i32, args: &[&str]) -> Proc {
    let c = Command::new("taskset")
        .args(["-c", &cpu.to_string(), "nice", "-n", &nice.to_string()])
        .arg(bin("ebee-load"))
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .expect("taskset and nice (util-linux, coreutils)");
    Proc(c)
}

/// A child process killed and reaped when dropped.
pub struct Proc(pub Child);

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `cmd` as a child that is killed and reaped when the returned guard is dropped, and
/// killed by the kernel (`PR_SET_PDEATHSIG`) if the thread that started it ends first (a test
/// that panics, or a test binary that is killed, leaves no load generator spinning).
pub fn spawn_guarded(cmd: &mut Command) -> std::io::Result<Proc> {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs in the child between fork and exec and only calls prctl, which
    // is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().map(Proc)
}

/// Start `ebee-load` with arguments.
pub fn load(args: &[&str]) -> Proc {
    let c = Command::new(bin("ebee-load"))
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting ebee-load {args:?}: {e}"));
    Proc(c)
}

/// On-CPU ns of a whole process: the sum of /proc/PID/task/*/schedstat (field 1), the
/// scheduler's own accounting and our ground truth.
pub fn schedstat_ns(pid: u32) -> Option<u64> {
    let mut total = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let t = t.ok()?;
        let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
        total += s.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// Run-queue wait of a whole process: the sum of /proc/PID/task/*/schedstat field 2
/// (`run_delay`), the counter the waits pipeline charges from.
pub fn schedstat_wait_ns(pid: u32) -> Option<u64> {
    let mut total = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let t = t.ok()?;
        let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
        total += s.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// Times a whole process's threads got a CPU: the sum of /proc/PID/task/*/schedstat field 3
/// (`pcount`, timeslices run), one per run-queue wait the kernel counted.
pub fn schedstat_runs(pid: u32) -> Option<u64> {
    let mut total = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let t = t.ok()?;
        let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
        total += s.split_whitespace().nth(2)?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// `read_bytes` and `write_bytes` of /proc/PID/io: the bytes the process (all its threads,
/// dead ones included) had the block layer read and write.
pub fn proc_io(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("read_bytes:")?, field("write_bytes:")?))
}

/// Run ebee-top with arguments; returns (exit code, stdout, stderr).
pub fn ebee_top(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(bin("ebee-top"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running ebee-top {args:?}: {e}"));
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Ids of the eBPF programs and maps a process holds open (from /proc/PID/fdinfo), so a test
/// can check exactly those are gone later, whatever else runs on the machine.
pub fn bpf_ids_of(pid: u32) -> (Vec<u32>, Vec<u32>) {
    let (mut progs, mut maps) = (Vec::new(), Vec::new());
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return (progs, maps);
    };
    for e in dir.flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for l in text.lines() {
            if let Some(v) = l.strip_prefix("prog_id:") {
                progs.extend(v.trim().parse::<u32>().ok());
            } else if let Some(v) = l.strip_prefix("map_id:") {
                maps.extend(v.trim().parse::<u32>().ok());
            }
        }
    }
    progs.sort_unstable();
    progs.dedup();
    maps.sort_unstable();
    maps.dedup();
    (progs, maps)
}

/// Ids of every eBPF program loaded on the machine.
pub fn loaded_program_ids() -> Vec<u32> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|p| p.id())
        .collect()
}

/// Ids of every eBPF map on the machine.
pub fn loaded_map_ids() -> Vec<u32> {
    aya::maps::loaded_maps()
        .filter_map(Result::ok)
        .map(|m| m.id())
        .collect()
}

/// A free TCP port on 127.0.0.1 (bound and released: another process could take it in
/// between, which on a test machine does not happen in practice).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("finding a free port: {e}"))
}

/// One HTTP/1.1 GET over a fresh connection (`Connection: close`), with extra header lines;
/// returns (status, head, body). Enough for the metrics endpoint and Prometheus' API.
pub fn http_get(
    addr: &str,
    path: &str,
    headers: &[&str],
) -> std::io::Result<(u16, String, String)> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // Prometheus answers its API chunked: undo it.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok((status, head.to_owned(), body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `ebee-top serve` on a free loopback port, stopped with SIGTERM when dropped.
pub struct Serve {
    pub child: Child,
    /// `127.0.0.1:PORT`, as it reported it.
    pub addr: String,
}

impl Serve {
    /// Start it with extra arguments and wait for its "serving" line.
    pub fn start(args: &[&str]) -> Serve {
        use std::io::BufRead as _;
        let mut child = Command::new(bin("ebee-top"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting ebee-top serve: {e}"));
        let mut err =
            std::io::BufReader::new(child.stderr.take().unwrap_or_else(|| panic!("stderr")));
        let mut line = String::new();
        let _ = err.read_line(&mut line);
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap_or_else(|| panic!("ebee-top serve said: {line:?}"))
            .to_owned();
        // Keep draining stderr so the child never blocks on it.
        std::thread::spawn(move || {
            let mut rest = String::new();
            while err.read_line(&mut rest).is_ok_and(|n| n > 0) {
                eprint!("ebee-top serve: {rest}");
                rest.clear();
            }
        });
        Serve { child, addr }
    }

    /// SIGTERM, then the exit code.
    pub fn stop(mut self) -> Option<i32> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().ok().and_then(|s| s.code())
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }
}
