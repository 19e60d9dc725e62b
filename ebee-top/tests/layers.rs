//! The crate's layers depend one way. Every module of `ebee-top/src` belongs to one layer (its
//! top-level folder, or its file at the crate root), and may name only the layers listed for it
//! below: read from the `crate::...` and `super::...` paths in its source. A module that names
//! a layer above it, a layer missing from the table, or a table with a circle in it fails here,
//! so the picture in docs/ARCHITECTURE.md stays true.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each layer and the layers it may use, lowest first (docs/ARCHITECTURE.md has the picture).
const LAYERS: &[(&str, &[&str])] = &[
    ("time", &[]),
    ("batch", &[]),
    ("model", &["batch"]),
    ("os", &["batch", "time"]),
    ("probes", &["os", "time"]),
    ("record", &["batch", "time"]),
    (
        "source",
        &["batch", "model", "os", "probes", "record", "time"],
    ),
    ("app", &["batch", "model", "os", "record", "source", "time"]),
    (
        "view",
        &["app", "batch", "model", "os", "record", "source", "time"],
    ),
    ("cli", &["time"]),
    (
        "frontend",
        &[
            "app", "batch", "cli", "model", "os", "probes", "record", "source", "time", "view",
        ],
    ),
    ("exit", &["frontend", "probes", "record"]),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a source file: `src/view/qos.rs` is `["view", "qos"]`, a `mod.rs` is
/// its folder's module.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_owned();
    }
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// The identifiers of a path that starts at `at` in `text` (`crate::a::b` gives `[a, b]`).
fn path_after(text: &str, at: usize) -> Vec<String> {
    text[at..]
        .split("::")
        .map(|seg| {
            seg.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .take_while(|s| !s.is_empty())
        .collect()
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The name of the inline module a line opens (`mod tests {`), if any.
fn inline_mod(line: &str) -> Option<String> {
    let t = line.trim_start();
    let t = t
        .strip_prefix("pub(crate) ")
        .or_else(|| t.strip_prefix("pub "))
        .unwrap_or(t);
    let name = t.strip_prefix("mod ")?.strip_suffix(" {")?;
    name.chars().all(is_ident_char).then(|| name.to_owned())
}

/// Every layer a file names, with the line it is named on: `crate::x` paths, and
/// `super::` paths that climb out of the file's own top-level module.
fn layers_named(text: &str, file_module: &[String]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    // Inline modules (`mod tests { .. }`), by the indentation rustfmt gives their bodies.
    let mut inline: Vec<(usize, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        if !line.trim().is_empty() {
            while inline.last().is_some_and(|(i, _)| indent <= *i) {
                inline.pop();
            }
        }
        let module: Vec<String> = file_module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(_, m)| m.clone()))
            .collect();
        if let Some(name) = inline_mod(line) {
            inline.push((indent, name));
        }
        let code = line.split("//").next().unwrap_or("");
        // The whole line: a doc link to a module is a dependency too.
        let mut from = 0;
        while let Some(i) = line[from..].find("crate::") {
            let at = from + i;
            from = at + "crate::".len();
            if line[..at].chars().next_back().is_some_and(is_ident_char) {
                continue; // `some_crate::`, not ours
            }
            if let Some(first) = path_after(line, from).first() {
                out.push((first.clone(), n + 1));
            }
        }
        let mut from = 0;
        while let Some(i) = code[from..].find("super::") {
            let at = from + i;
            from = at + 1;
            if code[..at].chars().next_back().is_some_and(is_ident_char)
                || code[..at].ends_with("super::")
            {
                continue;
            }
            let segs = {
                let mut s = vec!["super".to_owned()];
                s.extend(path_after(code, at + "super::".len()));
                s
            };
            let ups = segs.iter().take_while(|s| *s == "super").count();
            let mut m: Vec<String> = module.to_vec();
            for _ in 0..ups {
                m.pop();
            }
            m.extend(segs[ups..].iter().cloned());
            match m.first() {
                Some(first) if first != &file_module[0] => out.push((first.clone(), n + 1)),
                None => out.push(("<crate root>".to_owned(), n + 1)),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let table: BTreeMap<&str, BTreeSet<&str>> = LAYERS
        .iter()
        .map(|(l, deps)| (*l, deps.iter().copied().collect()))
        .collect();
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let module = module_of(rel);
        // The crate root only declares the layers; the binary dispatches through `ebee_top::`.
        if module == ["lib"] || module == ["main"] {
            continue;
        }
        let layer = module[0].as_str();
        seen.insert(layer.to_owned());
        let Some(allowed) = table.get(layer) else {
            wrong.push(format!(
                "{}: layer `{layer}` has no row in LAYERS",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (used, line) in layers_named(&text, &module) {
            if used != layer && !allowed.contains(used.as_str()) {
                wrong.push(format!(
                    "{}:{line}: `{layer}` uses `{used}`, which is not below it",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
    for (l, _) in LAYERS {
        assert!(seen.contains(*l), "LAYERS names `{l}`, which has no module");
    }
}

#[test]
fn the_layer_table_has_no_circle() {
    let table: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    // Each layer may use only layers listed before it: a total order, so no circle.
    for (i, (layer, deps)) in LAYERS.iter().enumerate() {
        for d in deps.iter() {
            let j = LAYERS.iter().position(|(l, _)| l == d);
            assert!(
                j.is_some_and(|j| j < i),
                "`{layer}` uses `{d}`, which is not listed before it"
            );
            assert!(table.contains_key(d));
        }
    }
}

#[test]
fn lib_declares_exactly_the_layers() {
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect();
    let layers: BTreeSet<String> = LAYERS.iter().map(|(l, _)| (*l).to_owned()).collect();
    assert_eq!(declared, layers);
}

#[test]
fn the_checker_sees_what_it_must() {
    let m = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let found = |text: &str, module: &[&str]| -> Vec<String> {
        layers_named(text, &m(module))
            .into_iter()
            .map(|(l, _)| l)
            .collect()
    };
    assert_eq!(found("use crate::app::App;", &["view", "qos"]), ["app"]);
    assert_eq!(
        found("let x = crate::model::procs::CELL_NS;", &["view"]),
        ["model"]
    );
    assert_eq!(
        found("use super::theme;", &["view", "qos"]),
        Vec::<String>::new()
    );
    assert_eq!(
        found("use super::super::app::App;", &["view", "qos"]),
        ["app"]
    );
    assert_eq!(found("/// See [`crate::record`].", &["batch"]), ["record"]);
    assert_eq!(
        found("use ebee_shared::qos;", &["model"]),
        Vec::<String>::new()
    );
    let inline = "mod tests {\n    use super::*;\n    use super::super::app;\n}\nuse super::x;\n";
    assert_eq!(found(inline, &["cli"]), ["app", "x"]);
}
