//! Format 3: what the next delta is coded against (rows absent for a few records are kept).

use super::*;

/// Integers of the skeleton with a model of their own (format 3).
pub(super) const SKEL_MODELS: usize = 256;
/// Format 3: a row absent from a record stays in the reference this many records more, so a
/// process that skips an interval or a few is matched again, not coded as new.
pub(super) const MAX_AGE: u32 = 16;

/// Format 3: what the next delta is coded against. The record's own tables, plus the rows of
/// the previous reference (and its tables) absent from it for at most `MAX_AGE` records, all
/// within `MAX_CELLS`. Encoder and decoder both build it from the same values.
pub(super) fn carry(prev: Option<&Tables>, mut cur: Tables) -> Tables {
    let Some(prev) = prev else {
        return cur;
    };
    let mut cells: usize = cur
        .tables
        .iter()
        .map(|t| t.pids.len() * (t.cols.len() + 1))
        .sum();
    for pt in &prev.tables {
        let ti = match cur.tables.iter().position(|t| t.name == pt.name) {
            Some(i) => i,
            None => {
                if cur.tables.len() >= MAX_TABLES {
                    continue;
                }
                cur.tables.push(Table {
                    name: pt.name.clone(),
                    cols: pt
                        .cols
                        .iter()
                        .map(|c| Column {
                            name: c.name.clone(),
                            ..Column::default()
                        })
                        .collect(),
                    ..Table::default()
                });
                cur.tables.len() - 1
            }
        };
        let t = &mut cur.tables[ti];
        let per_row = t.cols.len() + 1;
        let keep: Vec<usize> = (0..pt.pids.len())
            .filter(|&j| {
                pt.age.get(j).is_some_and(|a| *a < MAX_AGE)
                    && t.pids.binary_search(&pt.pids[j]).is_err()
            })
            .collect();
        if keep.is_empty() {
            continue;
        }
        if cells + keep.len() * per_row > MAX_CELLS {
            continue;
        }
        cells += keep.len() * per_row;
        // Merge by pid (a present row first on a tie: carried pids are never present).
        let n = t.pids.len() + keep.len();
        let mut from: Vec<(u64, Option<usize>, Option<usize>)> = Vec::with_capacity(n);
        from.extend(t.pids.iter().enumerate().map(|(i, &p)| (p, Some(i), None)));
        from.extend(keep.iter().map(|&j| (pt.pids[j], None, Some(j))));
        from.sort_by_key(|x| (x.0, x.1.is_none()));
        let pcols: Vec<Option<&Column>> = t
            .cols
            .iter()
            .map(|c| pt.cols.iter().find(|x| x.name == c.name))
            .collect();
        let mut cols: Vec<Column> = t
            .cols
            .iter()
            .map(|c| Column {
                name: c.name.clone(),
                cells: Vec::with_capacity(n),
                absent: Vec::new(),
            })
            .collect();
        let mut pids = Vec::with_capacity(n);
        let mut age = Vec::with_capacity(n);
        for (pid, i, j) in from {
            pids.push(pid);
            match (i, j) {
                (Some(i), _) => {
                    age.push(0);
                    for (c, col) in cols.iter_mut().zip(&t.cols) {
                        c.cells
                            .push(col.cells.get(i).cloned().unwrap_or(Value::Null));
                    }
                }
                (None, Some(j)) => {
                    age.push(pt.age.get(j).map_or(MAX_AGE, |a| a + 1));
                    for (c, pc) in cols.iter_mut().zip(&pcols) {
                        c.cells.push(
                            pc.and_then(|pc| pc.cells.get(j))
                                .cloned()
                                .unwrap_or(Value::Null),
                        );
                    }
                }
                (None, None) => {}
            }
        }
        t.pids = pids;
        t.cols = cols;
        t.age = age;
        t.order = Vec::new();
    }
    cur
}
