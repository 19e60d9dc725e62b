//! ebee-top: an interactive terminal monitor for Linux whose numbers come from eBPF programs in
//! the kernel. The modules are layers that depend one way (docs/ARCHITECTURE.md has the map;
//! tests/layers.rs keeps it true): `time` and `batch` at the bottom, then `model`, `os`,
//! `probes`, `record`, `source`, `app`, `view`, and the `frontend`s on top; `cli` and `exit`
//! are the binary's flags and exit codes.

pub mod app;
pub mod batch;
pub mod cli;
pub mod exit;
pub mod frontend;
pub mod model;
pub mod os;
pub mod probes;
pub mod record;
pub mod source;
pub mod time;
pub mod view;
