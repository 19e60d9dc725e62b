//! The screen's settings as the F2 setup screen edits them and `config.toml` holds them: the
//! process table's columns, the default sort, the interval, the colours and the tree default.
//! Pure: parsing and writing the text is here, reading and writing the file is the front-end's
//! (`frontend/config.rs`). Every field is optional, so a file written by an older version loads,
//! and keys this version does not know are kept and written back.

use std::time::Duration;

use serde::Deserialize;

use super::{MAX_INTERVAL, MIN_INTERVAL, SortBy};

/// The `version` key written today (a file without one, or an older one, still loads).
pub const SETTINGS_VERSION: i64 = 1;

/// A column of the process table the user can choose (the flag column `P`/`X` always comes
/// first and is not one of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Column {
    Pid,
    User,
    Cpu,
    Wait,
    /// Blocked on disk I/O (the off-CPU split), shown where the width allows.
    Iow,
    /// Run-queue wait it caused others (the culprits of waits); chosen in F2 or by sorting.
    Hold,
    Time,
    Res,
    /// Disk I/O: one column (read + written) or READ/s and WRIT/s, by width.
    Io,
    /// Network bytes: one column or RX/s and TX/s, by width.
    Net,
    Cgroup,
    Burst,
    Command,
    /// Nice value (/proc/PID/stat, about once a second).
    Nice,
    /// Kernel priority (/proc/PID/stat).
    Pri,
    /// Scheduler state letter (/proc/PID/stat).
    State,
    /// Number of threads (/proc/PID/stat).
    Threads,
    /// Parent pid (/proc/PID/stat).
    Ppid,
    /// Start time, from the process's key (boot time + start ticks).
    Start,
}

/// Every column, in the order the setup screen lists the ones not shown.
pub const ALL_COLUMNS: [Column; 19] = [
    Column::Pid,
    Column::User,
    Column::Cpu,
    Column::Wait,
    Column::Iow,
    Column::Time,
    Column::Res,
    Column::Io,
    Column::Net,
    Column::Cgroup,
    Column::Burst,
    Column::Command,
    Column::Nice,
    Column::Pri,
    Column::State,
    Column::Threads,
    Column::Ppid,
    Column::Start,
    Column::Hold,
];

/// The automatic layout's columns (IO, NET and CGROUP only where the width allows), what the
/// table shows while no columns are chosen.
pub const AUTO_COLUMNS: [Column; 12] = [
    Column::Pid,
    Column::User,
    Column::Cpu,
    Column::Wait,
    Column::Iow,
    Column::Time,
    Column::Res,
    Column::Io,
    Column::Net,
    Column::Cgroup,
    Column::Burst,
    Column::Command,
];

impl Column {
    /// Its name in `config.toml`.
    pub fn key(self) -> &'static str {
        match self {
            Column::Pid => "pid",
            Column::User => "user",
            Column::Cpu => "cpu",
            Column::Wait => "wait",
            Column::Iow => "iow",
            Column::Hold => "hold",
            Column::Time => "time",
            Column::Res => "res",
            Column::Io => "io",
            Column::Net => "net",
            Column::Cgroup => "cgroup",
            Column::Burst => "burst",
            Column::Command => "command",
            Column::Nice => "ni",
            Column::Pri => "pri",
            Column::State => "state",
            Column::Threads => "threads",
            Column::Ppid => "ppid",
            Column::Start => "start",
        }
    }

    pub fn from_key(s: &str) -> Option<Self> {
        ALL_COLUMNS.into_iter().find(|c| c.key() == s)
    }

    /// Its name and what it shows, for the setup screen.
    pub fn describe(self) -> (&'static str, &'static str) {
        match self {
            Column::Pid => ("PID", "process (or thread) id"),
            Column::User => ("USER", "owner"),
            Column::Cpu => ("%CPU", "on-CPU over the last second"),
            Column::Wait => ("WAIT%", "runnable but waiting for a CPU"),
            Column::Iow => ("IOW%", "blocked on disk I/O (uninterruptible, in_iowait)"),
            Column::Hold => (
                "HOLD%",
                "run-queue wait it caused others (ran while they waited)",
            ),
            Column::Time => ("TIME", "on-CPU since ebee-top saw it"),
            Column::Res => ("RES", "resident memory"),
            Column::Io => ("IO", "disk bytes per second (READ/WRIT when wide)"),
            Column::Net => ("NET", "socket bytes per second (RX/TX when wide)"),
            Column::Cgroup => ("CGROUP", "the cgroup followed"),
            Column::Burst => ("BURST", "10 ms on-CPU sparkline"),
            Column::Command => ("COMMAND", "command line"),
            Column::Nice => ("NI", "nice value (/proc, once a second)"),
            Column::Pri => ("PRI", "kernel priority (/proc, once a second)"),
            Column::State => ("STATE", "R running, S sleeping, D disk... (/proc)"),
            Column::Threads => ("THREADS", "number of threads (/proc, once a second)"),
            Column::Ppid => ("PPID", "parent process (/proc, once a second)"),
            Column::Start => ("START", "when it started (UTC)"),
        }
    }

    /// The order a click on its header sorts by, where there is one.
    pub fn sort(self) -> Option<SortBy> {
        match self {
            Column::Cpu => Some(SortBy::Cpu),
            Column::Res => Some(SortBy::Mem),
            Column::Wait => Some(SortBy::Wait),
            Column::Iow => Some(SortBy::Iow),
            Column::Hold => Some(SortBy::Hold),
            Column::Io => Some(SortBy::Io),
            Column::Net => Some(SortBy::Net),
            _ => None,
        }
    }

    /// Shown from /proc/PID/stat, which the screen reads about once a second for the rows in
    /// view (never while drawing).
    pub fn from_stat(self) -> bool {
        matches!(
            self,
            Column::Nice | Column::Pri | Column::State | Column::Threads | Column::Ppid
        )
    }
}

/// How much colour the screen uses (`--color`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColorMode {
    #[default]
    Auto,
    Never,
    C16,
    C256,
    Truecolor,
}

pub const COLOR_MODES: [ColorMode; 5] = [
    ColorMode::Auto,
    ColorMode::Never,
    ColorMode::C16,
    ColorMode::C256,
    ColorMode::Truecolor,
];

impl ColorMode {
    /// Its name, as `--color` and `config.toml` spell it.
    pub fn key(self) -> &'static str {
        match self {
            ColorMode::Auto => "auto",
            ColorMode::Never => "never",
            ColorMode::C16 => "16",
            ColorMode::C256 => "256",
            ColorMode::Truecolor => "truecolor",
        }
    }

    pub fn from_key(s: &str) -> Option<Self> {
        COLOR_MODES.into_iter().find(|c| c.key() == s)
    }
}

/// The sorts the setup screen offers, in order.
pub const SORTS: [SortBy; 7] = [
    SortBy::Cpu,
    SortBy::Mem,
    SortBy::Wait,
    SortBy::Iow,
    SortBy::Hold,
    SortBy::Io,
    SortBy::Net,
];

pub fn sort_key(s: SortBy) -> &'static str {
    match s {
        SortBy::Cpu => "cpu",
        SortBy::Mem => "mem",
        SortBy::Wait => "wait",
        SortBy::Io => "io",
        SortBy::Iow => "iow",
        SortBy::Hold => "hold",
        SortBy::Net => "net",
    }
}

fn sort_from_key(s: &str) -> Option<SortBy> {
    SORTS.into_iter().find(|x| sort_key(*x) == s)
}

/// What `config.toml` says (a field is None when the file does not set it: the flag's or the
/// built-in default then holds).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// The process table's columns in order; None: the automatic layout.
    pub columns: Option<Vec<Column>>,
    pub sort: Option<SortBy>,
    pub interval: Option<Duration>,
    pub color: Option<ColorMode>,
    /// Whether the process table opens as a tree.
    pub tree: Option<bool>,
    /// Keys and values this version does not know (a newer version's), written back as read.
    pub other: toml::Table,
    /// Values this version does not know (a newer version's column names), kept too.
    pub unknown_columns: Vec<String>,
}

/// Why a file could not be used: it is not TOML, or a known key has the wrong type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    /// 1-based line of the fault, when the parser knows it.
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "line {l}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// The file's shape, every field optional.
#[derive(Deserialize, Default)]
#[serde(default)]
struct FileForm {
    version: Option<i64>,
    columns: Option<Vec<String>>,
    sort: Option<String>,
    /// Seconds.
    interval: Option<f64>,
    color: Option<String>,
    tree: Option<bool>,
    #[serde(flatten)]
    other: toml::Table,
}

/// A settings file's text as settings, with what it said that this version cannot use
/// (unknown keys, values out of range: each ignored, never fatal). Bad TOML or a wrong type is
/// `Broken`, naming the line.
pub fn parse(text: &str) -> Result<(Settings, Vec<String>), Broken> {
    let f: FileForm = toml::from_str(text).map_err(|e| Broken {
        line: e.span().map(|s| line_of(text, s.start)),
        message: e.message().trim().replace('\n', " "),
    })?;
    let mut notes = Vec::new();
    let mut s = Settings {
        other: f.other,
        ..Default::default()
    };
    if let Some(v) = f.version.filter(|v| *v > SETTINGS_VERSION) {
        notes.push(format!(
            "written by a newer ebee-top (version {v}): what this one knows is used"
        ));
    }
    if let Some(cols) = f.columns {
        let mut out = Vec::new();
        for name in cols {
            match Column::from_key(&name) {
                Some(c) if !out.contains(&c) => out.push(c),
                Some(_) => {}
                None => {
                    notes.push(format!("unknown column `{name}` ignored"));
                    s.unknown_columns.push(name);
                }
            }
        }
        s.columns = Some(out);
    }
    if let Some(v) = f.sort {
        match sort_from_key(&v) {
            Some(b) => s.sort = Some(b),
            None => notes.push(format!(
                "unknown sort `{v}` ignored (cpu, mem, wait, io, net)"
            )),
        }
    }
    if let Some(v) = f.interval {
        let ok =
            v.is_finite() && v >= MIN_INTERVAL.as_secs_f64() && v <= MAX_INTERVAL.as_secs_f64();
        if ok {
            s.interval = Some(Duration::from_millis((v * 1000.0).round() as u64));
        } else {
            notes.push(format!("interval {v} ignored (0.01 to 10 seconds)"));
        }
    }
    if let Some(v) = f.color {
        match ColorMode::from_key(&v) {
            Some(c) => s.color = Some(c),
            None => notes.push(format!(
                "unknown color `{v}` ignored (auto, never, 16, 256, truecolor)"
            )),
        }
    }
    s.tree = f.tree;
    for k in s.other.keys() {
        notes.push(format!("unknown key `{k}` kept as is"));
    }
    Ok((s, notes))
}

fn line_of(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    text.as_bytes()[..at]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// The settings as a file's text: a comment, `version`, what is set, then the keys this version
/// did not know.
pub fn to_toml(s: &Settings) -> String {
    let mut t = toml::Table::new();
    t.insert("version".into(), toml::Value::Integer(SETTINGS_VERSION));
    if let Some(cols) = &s.columns {
        let mut names: Vec<toml::Value> = cols
            .iter()
            .map(|c| toml::Value::String(c.key().into()))
            .collect();
        names.extend(
            s.unknown_columns
                .iter()
                .map(|n| toml::Value::String(n.clone())),
        );
        t.insert("columns".into(), toml::Value::Array(names));
    }
    if let Some(b) = s.sort {
        t.insert("sort".into(), toml::Value::String(sort_key(b).into()));
    }
    if let Some(d) = s.interval {
        t.insert("interval".into(), toml::Value::Float(d.as_secs_f64()));
    }
    if let Some(c) = s.color {
        t.insert("color".into(), toml::Value::String(c.key().into()));
    }
    if let Some(b) = s.tree {
        t.insert("tree".into(), toml::Value::Boolean(b));
    }
    for (k, v) in &s.other {
        if !t.contains_key(k) {
            t.insert(k.clone(), v.clone());
        }
    }
    format!("# ebee-top settings, written by the setup screen (F2). Flags override them.\n{t}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_old_file_loads_with_nothing_set() {
        let (s, notes) = parse("").unwrap();
        assert_eq!(s, Settings::default());
        assert!(notes.is_empty());
        // A version-0 file that knew only the interval and the colours.
        let (s, notes) = parse("interval = 1\ncolor = \"never\"\n").unwrap();
        assert_eq!(s.interval, Some(Duration::from_secs(1)));
        assert_eq!(s.color, Some(ColorMode::Never));
        assert_eq!(s.columns, None);
        assert_eq!(s.tree, None);
        assert!(notes.is_empty());
    }

    #[test]
    fn every_field_round_trips() {
        let s = Settings {
            columns: Some(vec![
                Column::Pid,
                Column::Nice,
                Column::Command,
                Column::Start,
            ]),
            sort: Some(SortBy::Wait),
            interval: Some(Duration::from_millis(200)),
            color: Some(ColorMode::C256),
            tree: Some(true),
            ..Default::default()
        };
        let text = to_toml(&s);
        assert!(text.contains("version = 1"), "{text}");
        let (back, notes) = parse(&text).unwrap();
        assert_eq!(back, s);
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn unknown_keys_and_values_are_kept_and_noted_never_fatal() {
        let text = "version = 7\nfuture = { a = 1 }\ncolumns = [\"pid\", \"gpu\", \"command\"]\n\
                    sort = \"gpu\"\ninterval = 99\n";
        let (s, notes) = parse(text).unwrap();
        assert_eq!(s.columns, Some(vec![Column::Pid, Column::Command]));
        assert_eq!(s.sort, None);
        assert_eq!(s.interval, None);
        assert_eq!(notes.len(), 5, "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("`future` kept")));
        // Written back: the unknown key and column survive a rewrite.
        let again = to_toml(&s);
        let (s2, _) = parse(&again).unwrap();
        assert_eq!(s2.other.get("future"), s.other.get("future"));
        assert_eq!(s2.unknown_columns, vec!["gpu".to_string()]);
        assert!(again.contains("version = 1"));
    }

    #[test]
    fn a_broken_file_names_its_line() {
        let e = parse("interval = 0.5\n\ncolor = \n").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        // A wrong type is as broken as bad syntax, and says where.
        let e = parse("sort = \"cpu\"\ntree = \"yes\"\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(!e.to_string().contains('\n'));
        let e = parse("columns = \"pid\"\n").unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
    }
}
