//! The servers part of a `Batch`: every process that answered requests on TCP in the interval
//! (found by the kernel, no pin needed) with its request count, latency histogram and open
//! connections, and every process's socket bytes received and sent.

use serde::{Deserialize, Serialize};

/// One server's requests in the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerRow {
    pub pid: u32,
    /// Requests answered (a receive, then the first send after it, on one connection).
    pub requests: u64,
    /// Sum of their latencies (ns).
    pub latency_ns: u64,
    /// The longest of them (ns).
    pub max_ns: u64,
    /// Their latency histogram as `(bucket, count)` pairs of `ebee_shared::servers`' buckets,
    /// when the server had a histogram slot the whole interval (None otherwise: the busiest
    /// servers get one; a server new to the ranking gets one the interval after).
    pub hist: Option<Vec<(u16, u32)>>,
    /// Server connections it holds (seen since ebee-top started, not yet closed); None when
    /// its count could not be kept.
    pub conns: Option<u64>,
}

/// One process's socket traffic in the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetRow {
    pub pid: u32,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// Counters of the pipeline for one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServersStats {
    /// The socket tracepoints are attached and the kernel's `struct sock` layout is known.
    pub available: bool,
    /// Requests counted in the interval (all servers).
    pub requests: u64,
    /// Server sketch entries evicted, and the requests they held (lost for the interval).
    pub evictions: u64,
    pub evicted_requests: u64,
    /// Requests of servers without a histogram slot (counted; not in any percentile).
    pub unhistogrammed: u64,
    /// New server connections not followed: the connection table was full.
    pub conns_full: u64,
    /// Connection counts not kept: the per-process count table was full.
    pub counts_full: u64,
    /// Network sketch entries evicted, and the bytes they held.
    pub net_evictions: u64,
    pub net_evicted_bytes: u64,
}
