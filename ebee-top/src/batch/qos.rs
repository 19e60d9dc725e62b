//! The QoS part of a `Batch`: one interval of syscall and request data for each pinned
//! process, as the kernel counted it (histograms as their non-empty buckets).

use serde::{Deserialize, Serialize};

/// Non-empty histogram buckets as `(bucket, count)`, ascending; the buckets are
/// `ebee_shared::qos::bucket` (log-linear, 32 per power of two, ns).
pub type SparseHist = Vec<(u16, u32)>;

/// Every pinned process's interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QosBatch {
    /// One entry per pinned process, plus a last one for a process whose pin ended (unpinned
    /// or exited) during the interval.
    pub procs: Vec<QosSample>,
    /// CPUs whose in-flight `sys_exit` could not be waited for when the interval was closed
    /// (their update may land in the next interval).
    pub handshake_timeouts: u64,
    /// False when the kernel's BTF lacked a struct member the request model reads: syscall
    /// latencies are measured, requests are not.
    pub request_model: bool,
}

/// One pinned process in one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QosSample {
    pub pid: u32,
    pub comm: String,
    /// The pin ended with this interval (unpinned, or the process exited).
    pub last: bool,
    /// The process exited in this interval: these are its final numbers.
    pub exited: bool,
    /// Syscalls completed in the interval, by number (only numbers with a count).
    pub syscalls: Vec<SyscallSample>,
    /// Latencies of syscalls without a histogram of their own (the process used more distinct
    /// syscalls than `ebee_shared::qos::SYS_HISTS - 1`).
    pub other_hist: SparseHist,
    pub requests: RequestSample,
    pub lost: QosLost,
    /// Its threads' run-queue waits: one for each time a thread got a CPU.
    pub runq: RunqSample,
}

/// Run-queue waits of one pinned process in one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunqSample {
    /// Waits recorded (times one of its threads got a CPU after a switch-out seen before).
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Their histogram (the kernel's log-linear buckets).
    pub hist: SparseHist,
}

/// One syscall number of one process in one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyscallSample {
    pub nr: u32,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Latency histogram; None when this syscall has no histogram of its own (its latencies
    /// are in `QosSample::other_hist`).
    pub hist: Option<SparseHist>,
}

/// The request model of one process in one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestSample {
    /// Requests answered: a send that closed an open request on a server-side socket.
    pub requests: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Latency histogram of the answered requests.
    pub hist: SparseHist,
    /// Receives with data on server-side sockets.
    pub recvs: u64,
    /// Sends on server-side sockets with no request open (streamed or pushed data).
    pub sends_idle: u64,
    /// Receives and sends with data on other sockets (client side, or role unknown).
    pub other_sock_io: u64,
    /// Connections accepted.
    pub accepts: u64,
}

/// What the QoS pipeline could not count for one process in one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QosLost {
    /// Syscall exits without a usable start: begun before the pin, or the thread's start slot
    /// was taken by another thread with the same `tid % 32768`.
    pub unmatched: u64,
    /// Syscalls whose latency went to `other_hist` because every histogram was taken.
    pub hist_full: u64,
    /// Request-model updates lost because the connection table was full.
    pub conn_full: u64,
}

/// Non-empty buckets of a dense histogram.
pub fn sparse(dense: &[u32]) -> SparseHist {
    dense
        .iter()
        .enumerate()
        .filter(|(_, c)| **c != 0)
        .map(|(i, c)| (i as u16, *c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_keeps_only_counts() {
        assert_eq!(sparse(&[0, 3, 0, 0, 7]), vec![(1, 3), (4, 7)]);
        assert!(sparse(&[0; 8]).is_empty());
    }

    #[test]
    fn old_recordings_without_qos_still_read() {
        let q: QosBatch = serde_json::from_str("{}").unwrap();
        assert!(q.procs.is_empty());
        let s: QosSample = serde_json::from_str(r#"{"pid": 5}"#).unwrap();
        assert_eq!(s.pid, 5);
    }
}
