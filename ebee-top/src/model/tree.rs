//! The process tree: who is whose parent, from the `ppid` the Batches carry for their processes
//! and for the ancestors of those (`Batch::lineage`), and the tree of the rows a table shows,
//! each under its parent, siblings in the table's order, the ancestors that lead to a row
//! added (an idle shell above a busy `make`), and collapsed subtrees summed into one row.
//!
//! Pure like the rest of the Model. Processes are known by (pid, start time): a parent always
//! started no later than its child, so a child whose recorded parent pid now names a younger
//! process (the parent exited and its pid was reused) is not put under it.

// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::{HashMap, HashMapExt as _, HashSet, HashSetExt as _};

use super::procs::{ProcEntry, ProcKey};
use crate::batch::{Batch, ProcInfo};

/// A node not heard of for this long (batch time) is forgotten: the live source sends every
/// ancestor at least every `LINEAGE_REFRESH_MS`, and a process in the Batch's rows every
/// interval.
pub const LINEAGE_FORGET_NS: u64 = 3 * crate::batch::LINEAGE_REFRESH_MS * 1_000_000;
/// How often forgotten nodes are swept, batch time.
const SWEEP_NS: u64 = 5_000_000_000;
/// Deepest chain followed (a loop in damaged data ends there too).
const MAX_DEPTH: usize = 64;

/// One process the lineage knows: its parent, and an entry (with no measures) to show it by
/// when the process table does not list it.
#[derive(Clone, Debug)]
struct Node {
    ppid: u32,
    entry: ProcEntry,
    seen_ns: u64,
}

/// Parent links of the processes the Batches told of.
#[derive(Clone, Debug, Default)]
pub struct Lineage {
    nodes: HashMap<u32, Node>,
    swept_ns: u64,
}

/// The sums a collapsed row shows for its whole subtree (itself included).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sums {
    pub members: usize,
    pub cpu_pct: f64,
    pub wait_pct: f64,
    /// IOW% of the subtree.
    pub iow_pct: f64,
    /// HOLD% of the subtree.
    pub caused_pct: f64,
    pub total_ns: u64,
    pub read_per_s: f64,
    pub write_per_s: f64,
    /// None when no member has a known RSS.
    pub rss: Option<u64>,
    /// Network bytes received and sent per second; None without network data.
    pub net: Option<(f64, f64)>,
}

/// One row of the tree, in drawing order.
#[derive(Clone, Debug)]
pub struct TreeRow<'a> {
    pub entry: &'a ProcEntry,
    pub depth: usize,
    /// For each level above it, whether a branch line passes there.
    pub guides: Vec<bool>,
    /// The last of its siblings (drawn with an elbow).
    pub last: bool,
    /// It has children in the tree (shown or collapsed).
    pub parent: bool,
    /// Its subtree is collapsed into it; `sums` then holds the subtree's measures.
    pub collapsed: bool,
    pub sums: Option<Sums>,
    /// An ancestor the table itself would not list (shown only to lead to a row).
    pub context: bool,
}

/// How rows are measured for the sums of a collapsed subtree.
pub struct Measures<R, N> {
    pub rss: R,
    pub net: N,
}

impl Lineage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fold one interval's parent links in.
    pub fn ingest(&mut self, b: &Batch) {
        for p in b.procs.iter().chain(&b.lineage) {
            self.note(p, b.end_ns);
        }
        if b.end_ns.saturating_sub(self.swept_ns) >= SWEEP_NS {
            self.swept_ns = b.end_ns;
            let now = b.end_ns;
            self.nodes
                .retain(|_, n| now.saturating_sub(n.seen_ns) < LINEAGE_FORGET_NS);
        }
    }

    fn note(&mut self, p: &ProcInfo, now_ns: u64) {
        let Some(ppid) = p.ppid else {
            return;
        };
        let key = ProcKey {
            pid: p.pid,
            start_ticks: p.start_ticks,
        };
        let n = self.nodes.entry(p.pid).or_insert_with(|| Node {
            ppid,
            entry: ProcEntry {
                key,
                tgid: p.pid,
                ..Default::default()
            },
            seen_ns: now_ns,
        });
        if n.entry.key != key && p.start_ticks != 0 {
            // The pid was reused: another process.
            n.entry = ProcEntry {
                key,
                tgid: p.pid,
                ..Default::default()
            };
        }
        n.ppid = ppid;
        n.seen_ns = now_ns;
        let e = &mut n.entry;
        // Every Batch names its processes again: copy only what changed.
        if !p.comm.is_empty() && e.comm != p.comm {
            e.comm.clone_from(&p.comm);
        }
        if !p.cmdline.is_empty() && e.cmdline != p.cmdline {
            e.cmdline.clone_from(&p.cmdline);
        }
        if p.uid.is_some() {
            e.uid = p.uid;
        }
        e.kthread = p.kthread;
        if !p.cgroup.is_empty() && e.cgroup != p.cgroup {
            e.cgroup.clone_from(&p.cgroup);
        }
    }

    /// The parent pid of `pid`, when known.
    pub fn ppid(&self, pid: u32) -> Option<u32> {
        self.nodes.get(&pid).map(|n| n.ppid)
    }

    /// What is known of `pid` as a row of its own (names, owner; no measures).
    pub fn entry(&self, pid: u32) -> Option<&ProcEntry> {
        self.nodes.get(&pid).map(|n| &n.entry)
    }
}

/// How to find a row's parent and a row for a pid the table does not list.
pub trait Parents<'a> {
    /// The parent of this row (its pid among the rows' keys), if any.
    fn parent_of(&self, e: &ProcEntry) -> Option<u32>;
    /// A row for `pid` (an ancestor of a listed row), if one is known.
    fn row_for(&self, pid: u32) -> Option<&'a ProcEntry>;
}

/// The tree of `listed` (a table's rows, in its order): each row under its parent, the
/// ancestors that lead to a row added after them, children of a key in `collapsed` folded into
/// it with their sums (each row's branch glyphs from [`TreeRow::prefix_at`]).
pub fn build<'a, R, N>(
    listed: &[&'a ProcEntry],
    parents: &impl Parents<'a>,
    collapsed: &std::collections::HashSet<ProcKey>,
    measures: &Measures<R, N>,
) -> Vec<TreeRow<'a>>
where
    R: Fn(&ProcEntry) -> Option<u64>,
    N: Fn(&ProcEntry) -> Option<(f64, f64)>,
{
    // Every row by pid, in the table's order, then the ancestors found walking up.
    let mut rows: Vec<&'a ProcEntry> = listed.to_vec();
    let mut index: HashMap<u32, usize> = HashMap::with_capacity(rows.len());
    for (i, e) in rows.iter().enumerate() {
        index.entry(e.key.pid).or_insert(i);
    }
    let listed_n = rows.len();
    let mut i = 0;
    while i < rows.len() {
        let mut e = rows[i];
        for _ in 0..MAX_DEPTH {
            let Some(pp) = parents.parent_of(e) else {
                break;
            };
            if index.contains_key(&pp) {
                break;
            }
            let Some(p) = parents.row_for(pp) else {
                break;
            };
            index.insert(pp, rows.len());
            rows.push(p);
            e = p;
        }
        i += 1;
    }
    // Parent of each row, as an index: only a process that started no later than the child
    // (a reused pid is not the parent), and never the row itself.
    let parent: Vec<Option<usize>> = rows
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let j = *index.get(&parents.parent_of(e)?)?;
            let p = rows[j];
            let older = p.key.start_ticks == 0
                || e.key.start_ticks == 0
                || p.key.start_ticks <= e.key.start_ticks;
            (j != i && older).then_some(j)
        })
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); rows.len()];
    let mut roots = Vec::new();
    for (i, p) in parent.iter().enumerate() {
        match p {
            Some(j) => children[*j].push(i),
            None => roots.push(i),
        }
    }
    // The table's order is the index order for listed rows; ancestors (after them) go by pid;
    // exited processes after the live ones among their siblings.
    let order = |v: &mut Vec<usize>| {
        v.sort_by_key(|&i| {
            let exited = rows[i].exited();
            if i < listed_n {
                (exited, 0, i as u64)
            } else {
                (exited, 1, u64::from(rows[i].key.pid))
            }
        })
    };
    order(&mut roots);
    for c in &mut children {
        order(c);
    }
    // A cycle in damaged data would leave rows unreachable from any root: make them roots.
    let mut out = Vec::with_capacity(rows.len());
    let mut seen = vec![false; rows.len()];
    let walk = |root: usize, out: &mut Vec<TreeRow<'a>>, seen: &mut Vec<bool>| {
        // (row, depth, a line to draw at each level above it, last among its siblings)
        let mut stack: Vec<(usize, usize, Vec<bool>, bool)> = vec![(root, 0, Vec::new(), true)];
        while let Some((i, depth, guides, last)) = stack.pop() {
            if seen[i] {
                continue;
            }
            seen[i] = true;
            let e = rows[i];
            let is_collapsed = collapsed.contains(&e.key) && !children[i].is_empty();
            let sums = is_collapsed.then(|| subtree_sums(i, &rows, &children, measures));
            let below = if depth == 0 {
                Vec::new()
            } else {
                let mut b = guides.clone();
                b.push(!last);
                b
            };
            out.push(TreeRow {
                entry: e,
                depth,
                guides,
                last,
                parent: !children[i].is_empty(),
                collapsed: is_collapsed,
                sums,
                context: i >= listed_n,
            });
            if is_collapsed {
                mark(i, &children, seen);
                continue;
            }
            let n = children[i].len();
            for (k, &c) in children[i].iter().enumerate().rev() {
                stack.push((c, depth + 1, below.clone(), k + 1 == n));
            }
        }
    };
    for r in roots {
        walk(r, &mut out, &mut seen);
    }
    for i in 0..rows.len() {
        if !seen[i] {
            walk(i, &mut out, &mut seen);
        }
    }
    out
}

/// The branch glyphs of a row at `depth` with `guides` (a line at each level above it) and
/// `last` (the last of its siblings), `width` characters a level (1 to 3: a deep tree on a
/// narrow screen draws narrower levels), and a space before the command.
fn branches(guides: &[bool], last: bool, depth: usize, width: usize, ascii: bool) -> String {
    if depth == 0 {
        return String::new();
    }
    let (tee, elbow, line, dash) = if ascii {
        ('|', '`', '|', '-')
    } else {
        ('├', '└', '│', '─')
    };
    let width = width.clamp(1, 3);
    let mut out = String::new();
    for &g in guides {
        out.push(if g { line } else { ' ' });
        out.extend(std::iter::repeat_n(' ', width - 1));
    }
    out.push(if last { elbow } else { tee });
    if width > 1 {
        out.push(dash);
    }
    out.push(' ');
    out
}

impl TreeRow<'_> {
    /// The glyphs drawn before the command, `width` characters a level (3: `├─ `, or `|- `
    /// in ASCII).
    pub fn prefix_at(&self, width: usize, ascii: bool) -> String {
        branches(&self.guides, self.last, self.depth, width, ascii)
    }
}

/// Mark every row under `i` as placed (a collapsed subtree's rows are not drawn).
fn mark(i: usize, children: &[Vec<usize>], seen: &mut [bool]) {
    let mut stack: Vec<usize> = children[i].clone();
    while let Some(c) = stack.pop() {
        if !seen[c] {
            seen[c] = true;
            stack.extend(&children[c]);
        }
    }
}

/// The measures of row `i` and every row under it.
fn subtree_sums<R, N>(
    i: usize,
    rows: &[&ProcEntry],
    children: &[Vec<usize>],
    m: &Measures<R, N>,
) -> Sums
where
    R: Fn(&ProcEntry) -> Option<u64>,
    N: Fn(&ProcEntry) -> Option<(f64, f64)>,
{
    let mut s = Sums::default();
    let mut stack = vec![i];
    let mut visited = HashSet::new();
    while let Some(j) = stack.pop() {
        if !visited.insert(j) {
            continue;
        }
        let e = rows[j];
        s.members += 1;
        s.cpu_pct += e.cpu_pct;
        s.wait_pct += e.wait_pct;
        s.iow_pct += e.iow_pct;
        s.caused_pct += e.caused_pct;
        s.total_ns += e.total_ns;
        s.read_per_s += e.read_per_s;
        s.write_per_s += e.write_per_s;
        if let Some(r) = (m.rss)(e) {
            *s.rss.get_or_insert(0) += r;
        }
        if let Some((rx, tx)) = (m.net)(e) {
            let n = s.net.get_or_insert((0.0, 0.0));
            n.0 += rx;
            n.1 += tx;
        }
        stack.extend(&children[j]);
    }
    s
}
