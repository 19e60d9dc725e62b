//! ebee-top: an interactive terminal monitor for Linux whose numbers come from eBPF programs in
//! the kernel. See the README for usage and ../DESIGN.md for how the pieces fit.

pub mod app;
pub mod batch;
pub mod batch_qos;
pub mod cli;
pub mod exit;
pub mod export;
pub mod host;
pub mod latency;
pub mod model;
pub mod output;
pub mod preflight;
pub mod probes;
pub mod procinfo;
pub mod procnet;
pub mod record;
pub mod replay;
pub mod run;
pub mod source;
pub mod syscalls;
pub mod tui;
pub mod view;
