//! The machine as /proc and /etc show it: the host's totals, what is known of a process (names,
//! command lines, owners, details), the ports a process serves on. Readers only: they run on
//! the threads that produce Batches or messages, never on the render path, and trust nothing
//! they read (a missing or malformed file is an empty answer, never a panic). `act` is the
//! one writer: the signals and nice values the operator asks for.

pub mod act;
pub mod cgroup;
pub mod details;
pub mod group;
pub mod host;
pub mod ports;
pub mod procinfo;
pub mod procstat;
pub mod residency;
pub mod rss;
