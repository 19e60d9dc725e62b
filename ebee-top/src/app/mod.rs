//! The interactive screen's state. Every input, interval and signal arrives as a [`Msg`]; the
//! UI loop owns the one `App`, folds each message in with `update` (update.rs) and draws it
//! when the returned [`Effect`] says something changed. Replay control is replay.rs. Pure: no
//! terminal, no I/O, no clock; the views read it, the front-end runs it.

mod msg;
mod replay;
pub mod settings;
mod setup;
#[cfg(test)]
mod tests;
mod update;

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use crate::model::Model;
use crate::model::cgroups::CgroupView;
use crate::model::procs::{Order, ProcEntry, ProcKey};
use crate::model::servers::{ServerSort, ServerView};
use crate::model::tree::{self, Measures, Parents, TreeRow};
use crate::os::details::Details;
use crate::os::host::HostInfo;

pub use msg::{Effect, Msg, Pointer};
pub use replay::{KEYS as REPLAY_KEYS, ReplayControl};
pub use settings::{ColorMode, Column, Settings};
pub use setup::{SETUP_KEYS, SetupRow};

/// How the process table is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    Cpu,
    Mem,
    /// Run-queue wait (`W`).
    Wait,
    /// Disk I/O (`I`).
    Io,
    /// Blocked on I/O, IOW% (`D`).
    Iow,
    /// Run-queue wait caused others, HOLD% (`B`).
    Hold,
    /// Network bytes received and sent (`N`).
    Net,
}

/// What the main area shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MainView {
    Processes,
    /// The SERVERS table (`S`).
    Servers,
    /// The cgroups table (`C`).
    Cgroups,
}

/// The pane that takes Up/Down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Focus {
    Table,
    Qos,
}

/// What is drawn over the panes.
#[derive(Clone, Debug, PartialEq)]
pub enum Overlay {
    Help,
    /// The details popup; None while /proc is being read.
    Details(ProcKey, Option<Box<Details>>),
    /// The setup screen (F2), its cursor on this row of [`App::setup_rows`].
    Setup(usize),
    /// The signal menu (F9).
    Signal(SignalMenu),
    /// The user picker (`u`), its cursor on this row of [`App::user_choices`].
    Users(usize),
}

/// The signal menu: the processes it acts on (the tagged ones, else the selected one), the
/// signal under the cursor, and whether the operator is being asked to confirm.
#[derive(Clone, Debug, PartialEq)]
pub struct SignalMenu {
    /// Each target and its command line as it was chosen.
    pub targets: Vec<(ProcKey, String)>,
    /// Index in `os::act::SIGNALS`.
    pub cursor: usize,
    pub confirm: bool,
    /// Digits typed to pick a signal by number.
    pub typed: String,
}

/// The most processes the kernel follows for QoS.
pub const MAX_PINS: usize = 8;

pub struct App {
    pub model: Model,
    pub k: usize,
    /// Row of the selection in the table as drawn, and the process on it (the selection
    /// follows the process when the ranking changes).
    pub selected: usize,
    pub selected_key: Option<ProcKey>,
    pub paused: bool,
    pub interval: Duration,
    /// The Model as it was when the screen was paused (collection goes on underneath).
    pub frozen: Option<Box<Model>>,
    pub sort: SortBy,
    pub filter: String,
    /// The filter line is being typed.
    pub filter_editing: bool,
    pub focus: Focus,
    /// Index among the QoS processes, when the QoS pane has the focus.
    pub qos_selected: usize,
    pub overlay: Option<Overlay>,
    /// One line for the user (cleared by the next key).
    pub status: Option<String>,
    pub host: Option<HostInfo>,
    /// User names by uid (read once at start, so drawing never reads /etc/passwd).
    pub users: std::collections::HashMap<u32, String>,
    /// Terminal size (columns, rows), from resize events.
    pub screen: (u16, u16),
    pub error: Option<String>,
    /// Set when replaying a recording (replay.rs).
    pub replay: Option<ReplayControl>,
    /// Set when recording (record/recorder.rs).
    pub recording: Option<crate::record::RecStatus>,
    /// The process table or the SERVERS table in the main area.
    pub main: MainView,
    /// How the SERVERS table is ordered, and its selected row.
    pub srv_sort: ServerSort,
    pub srv_selected: usize,
    /// The selected row of the cgroups table.
    pub cg_selected: usize,
    /// Threads instead of processes in the process table (`H`, `-H`), once Batches carry
    /// them.
    pub threads: bool,
    /// The process table as a tree (`t`, F5).
    pub tree: bool,
    /// Processes whose subtree is folded into their row in the tree.
    pub collapsed: HashSet<ProcKey>,
    /// Processes tagged for a signal or a renice (`T`).
    pub tagged: BTreeSet<ProcKey>,
    /// Only this user's processes (`-u`, `u`).
    pub user: Option<u32>,
    /// What config.toml says, as the setup screen (F2) changes it; the front-end saves it.
    pub settings: Settings,
    /// Where the settings are saved, or why not (the setup screen's first line).
    pub settings_note: String,
    /// The process table's columns in order; None: the automatic layout (settings.rs).
    pub columns: Option<Vec<Column>>,
    /// The colours in use (`--color`, or the settings); the front-end builds the theme.
    pub color: ColorMode,
    /// Whether the process table opens as a tree (`tree` in config.toml, F2). Read once by
    /// whoever sets up the tree view when the screen starts.
    pub tree_default: bool,
    /// NI, PRI, STATE, THREADS and PPID of the rows on screen, from /proc/PID/stat about once
    /// a second (live only: a recording has none, so they show `-`).
    pub stats: std::collections::HashMap<ProcKey, crate::os::procstat::ProcStat>,
    /// When they were last asked for (a Batch's end, ns).
    pub stats_asked_ns: u64,
    /// Boot time (Unix seconds) and clock ticks per second of the machine shown, for START.
    pub boot_clock: Option<(u64, u64)>,
    /// The settings' default sort was checked against the first interval's data.
    pub sort_checked: bool,
}

pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(10);
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(10);

/// What `M` says when the Batches carry no memory data (a kernel without rss_stat, an old
/// recording).
pub const NO_MEMORY: &str = "memory pipeline not loaded: sorting by CPU";
pub const SORTED_MEM: &str = "sorted by resident memory (RES)";
pub const SORTED_CPU: &str = "sorted by CPU";
pub const SORTED_WAIT: &str = "sorted by run-queue wait (WAIT%)";
pub const SORTED_IO: &str = "sorted by disk I/O (read + written per second)";
/// What `W` and `I` say when the Batches carry no waits or disk I/O (a kernel without
/// `sched_info` or task I/O accounting, or an older recording).
pub const NO_WAIT: &str = "no run-queue waits from this kernel or recording: sorting by CPU";
pub const NO_IO: &str = "no per-process disk I/O from this kernel or recording: sorting by CPU";
pub const SORTED_IOW: &str = "sorted by time blocked on I/O (IOW%)";
/// What `D` says when the Batches carry no off-CPU split (`--no-culprits`, a kernel without
/// `in_iowait`, or an older recording).
pub const NO_IOW: &str =
    "no off-CPU split from this kernel, recording or run (--no-culprits): sorting by CPU";
pub const SORTED_HOLD: &str = "sorted by run-queue wait caused others (HOLD%)";
/// What `B` says when the Batches carry no culprits of waits (as `D`).
pub const NO_HOLD: &str =
    "no culprits of waits from this kernel, recording or run (--no-culprits): sorting by CPU";
pub const SORTED_NET: &str = "sorted by network bytes (received + sent per second)";
pub const NO_NET: &str =
    "no network bytes from this kernel, recording or --no-servers: sorting by CPU";
pub const NO_SERVERS: &str = "no servers pipeline in this kernel, recording or run (--no-servers)";
pub const NO_CGROUPS: &str =
    "no cgroups from this machine, recording or run (--cgroups off, or no cgroup filesystem)";
pub const THREADS_ON: &str = "threads: one row per thread (from the next interval on)";
pub const THREADS_OFF: &str = "processes: one row per process";
pub const NO_THREADS: &str = "this recording has no threads (record with -H to have them)";
pub const TREE_ON: &str = "tree: processes under their parents (Left/Right: collapse/expand)";
pub const TREE_OFF: &str = "flat: the heaviest processes first";
/// What F7, F8 and F9 say in a replay.
pub const NO_ACT: &str = "a recording cannot be acted on: signals and nice values are live only";
pub const SORTED_RPS: &str = "servers sorted by requests per second";
pub const SORTED_P99: &str = "servers sorted by p99 latency";

impl App {
    pub fn new(k: usize, interval: Duration) -> Self {
        Self {
            model: Model::new(),
            k,
            selected: 0,
            selected_key: None,
            paused: false,
            interval,
            frozen: None,
            sort: SortBy::Cpu,
            filter: String::new(),
            filter_editing: false,
            focus: Focus::Table,
            qos_selected: 0,
            overlay: None,
            status: None,
            host: None,
            users: Default::default(),
            screen: (0, 0),
            error: None,
            replay: None,
            recording: None,
            main: MainView::Processes,
            srv_sort: ServerSort::Rps,
            srv_selected: 0,
            cg_selected: 0,
            threads: false,
            tree: false,
            collapsed: HashSet::new(),
            tagged: BTreeSet::new(),
            user: None,
            settings: Settings::default(),
            settings_note: "not saved: no settings file".into(),
            columns: None,
            color: ColorMode::Auto,
            tree_default: false,
            stats: Default::default(),
            stats_asked_ns: 0,
            boot_clock: None,
            sort_checked: false,
        }
    }

    /// Take the settings read from config.toml: the columns, the sort and the tree default.
    /// The interval and colours are the front-end's to merge with the flags, which win.
    pub fn apply_settings(&mut self, s: Settings) {
        self.columns = s.columns.clone();
        if let Some(b) = s.sort {
            self.sort = b;
        }
        self.tree_default = s.tree.unwrap_or(false);
        self.settings = s;
    }

    /// The Model the screen shows: live, or as it was when paused.
    pub fn shown(&self) -> &Model {
        self.frozen.as_deref().unwrap_or(&self.model)
    }

    /// Whether the process table shows threads: asked for, and the Batches carry them.
    pub fn showing_threads(&self) -> bool {
        self.threads && self.shown().threads_on
    }

    /// The table rows to draw, in order: at least `k`, more when the screen has room (in the
    /// tree, every row the tree has).
    pub fn table_rows(&self) -> Vec<&ProcEntry> {
        if self.tree {
            return self.tree_rows().into_iter().map(|r| r.entry).collect();
        }
        self.flat_rows(usize::from(self.screen.1).saturating_sub(6))
    }

    /// The process table as a tree: every process the flat table could list (filtered, in its
    /// order), under its parent, with the ancestors that lead to them.
    pub fn tree_rows(&self) -> Vec<TreeRow<'_>> {
        let m = self.shown();
        let listed = self.flat_rows(usize::MAX);
        let rss = |e: &ProcEntry| {
            if e.exited() {
                None
            } else {
                m.mem.sketch.rss_of(e.tgid)
            }
        };
        let threads = self.showing_threads();
        let net = |e: &ProcEntry| {
            if threads {
                None
            } else {
                m.servers.net_rate(e.key.pid)
            }
        };
        let measures = Measures { rss, net };
        if threads {
            let p = ThreadParents { m };
            tree::build(&listed, &p, &self.collapsed, &measures)
        } else {
            let p = ProcParents { m };
            tree::build(&listed, &p, &self.collapsed, &measures)
        }
    }

    /// The flat table's rows: pinned first, then the `fit` (at least `k`) heaviest.
    fn flat_rows(&self, fit: usize) -> Vec<&ProcEntry> {
        let m = self.shown();
        if self.showing_threads() {
            // A thread's RES is its process's.
            let rss = |tid| {
                m.threads
                    .by_pid(tid)
                    .and_then(|e| m.mem.sketch.rss_of(e.tgid))
            };
            let order = match self.sort {
                SortBy::Mem => Order::Rss(rss),
                SortBy::Wait => Order::Wait,
                SortBy::Io => Order::Io,
                SortBy::Cpu | SortBy::Net | SortBy::Iow | SortBy::Hold => Order::Cpu,
            };
            return m.threads.ranked_for(
                self.k.max(fit),
                &self.filter,
                |e| self.user.is_none() || e.uid == self.user,
                order,
                |_| None,
            );
        }
        let rss = |pid| m.mem.sketch.rss_of(pid);
        let order = match self.sort {
            SortBy::Cpu => Order::Cpu,
            SortBy::Mem => Order::Rss(rss),
            SortBy::Wait => Order::Wait,
            SortBy::Io => Order::Io,
            SortBy::Iow => Order::Iow,
            SortBy::Hold => Order::Hold,
            SortBy::Net => Order::Net,
        };
        let net = |pid| m.servers.net_rate(pid).map(|(rx, tx)| rx + tx);
        match self.user {
            None => m.table.ranked_by(self.k.max(fit), &self.filter, order, net),
            Some(uid) => m.table.ranked_for(
                self.k.max(fit),
                &self.filter,
                |e| e.uid == Some(uid),
                order,
                net,
            ),
        }
    }

    /// The users the picker offers: everyone (None) first, then each owner of a process the
    /// table knows, by name.
    pub fn user_choices(&self) -> Vec<(Option<u32>, String)> {
        let mut uids: Vec<u32> = self.shown().table.entries().filter_map(|e| e.uid).collect();
        uids.extend(self.user);
        uids.sort_unstable();
        uids.dedup();
        let mut named: Vec<(Option<u32>, String)> = uids
            .into_iter()
            .map(|u| {
                let name = self.users.get(&u).cloned().unwrap_or_else(|| u.to_string());
                (Some(u), name)
            })
            .collect();
        named.sort_by(|a, b| a.1.cmp(&b.1));
        named.insert(0, (None, "all users".into()));
        named
    }

    /// The processes an action applies to: the tagged ones still listed, else the selected
    /// process.
    pub fn targets(&self) -> Vec<&ProcEntry> {
        if !self.tagged.is_empty() {
            let m = self.shown();
            let t: Vec<&ProcEntry> = self.tagged.iter().filter_map(|k| m.table.get(k)).collect();
            if !t.is_empty() {
                return t;
            }
        }
        self.selected_process().into_iter().collect()
    }

    /// The SERVERS table's rows, in order, filtered like the process table.
    pub fn server_rows(&self) -> Vec<ServerView> {
        let f = self.filter.to_lowercase();
        self.shown()
            .servers
            .view(self.srv_sort)
            .into_iter()
            .filter(|s| {
                f.is_empty() || s.pid.to_string() == f || s.comm.to_lowercase().contains(&f)
            })
            .collect()
    }

    /// The cgroups table's rows, in order, filtered by path (a `cg:` filter is the
    /// process table's and leaves them all).
    pub fn cgroup_rows(&self) -> Vec<CgroupView> {
        let cg = self.filter.starts_with(crate::model::procs::CGROUP_FILTER);
        let f = self.filter.to_lowercase();
        self.shown()
            .cgroups
            .view()
            .into_iter()
            .filter(|g| cg || f.is_empty() || g.path.to_lowercase().contains(&f))
            .collect()
    }

    /// The process under the selection: in the process table (a thread's process in the
    /// thread table), or the server selected in the SERVERS table.
    pub fn selected_process(&self) -> Option<&ProcEntry> {
        match self.main {
            MainView::Processes if self.showing_threads() => {
                let tgid = self.selected_entry()?.tgid;
                self.shown().table.by_pid(tgid)
            }
            MainView::Processes | MainView::Cgroups => self.selected_entry(),
            MainView::Servers => {
                let pid = self.server_rows().get(self.srv_selected)?.pid;
                self.shown().table.by_pid(pid)
            }
        }
    }

    /// The rows of the plain CPU ranking (batch output's view), for compatibility.
    pub fn rows(&self) -> Vec<crate::model::CpuEntry> {
        self.shown().top_cpu(self.k)
    }

    /// The process under the selection.
    pub fn selected_entry(&self) -> Option<&ProcEntry> {
        self.table_rows().get(self.selected).copied()
    }

    /// The process the QoS pane shows: with the focus on it, the one chosen there; else the
    /// selected process if it has QoS data, else the first pinned one.
    pub fn qos_pid(&self) -> Option<u32> {
        let procs = self.shown().qos.procs();
        if procs.is_empty() {
            return None;
        }
        if self.focus == Focus::Qos {
            return procs.get(self.qos_selected.min(procs.len() - 1)).copied();
        }
        match self.selected_process() {
            Some(e) if procs.contains(&e.key.pid) => Some(e.key.pid),
            _ => procs.first().copied(),
        }
    }
}

/// Parents in the process table: from the lineage the Batches carry.
struct ProcParents<'a> {
    m: &'a Model,
}

impl<'a> Parents<'a> for ProcParents<'a> {
    fn parent_of(&self, e: &ProcEntry) -> Option<u32> {
        self.m.lineage.ppid(e.key.pid)
    }

    fn row_for(&self, pid: u32) -> Option<&'a ProcEntry> {
        self.m
            .table
            .by_pid(pid)
            .or_else(|| self.m.lineage.entry(pid))
    }
}

/// Parents in the thread table: a thread under its process's main thread, a main thread under
/// its process's parent.
struct ThreadParents<'a> {
    m: &'a Model,
}

impl<'a> Parents<'a> for ThreadParents<'a> {
    fn parent_of(&self, e: &ProcEntry) -> Option<u32> {
        if e.tgid != 0 && e.key.pid != e.tgid {
            return Some(e.tgid);
        }
        self.m.lineage.ppid(e.key.pid)
    }

    fn row_for(&self, pid: u32) -> Option<&'a ProcEntry> {
        self.m
            .threads
            .by_pid(pid)
            .or_else(|| self.m.lineage.entry(pid))
    }
}
