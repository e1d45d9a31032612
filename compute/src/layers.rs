//! The compute crate's layers, and the test that keeps them.
//!
//! Each top-level module (a file, or a folder with everything under it)
//! belongs to one layer, and imports only modules of its own layer or of
//! the layers below, with no cycle among them:
//!
//! ```text
//!   0 front ends          server, flight, pg
//!   1 session and engine  engine (statements: engine/dml, insert, alter,
//!                         index_ddl, backup), session, session_settings,
//!                         auth, params
//!   2 planner             df (DataFusion and Quarry's rules, MPP in df/mpp), sql (the
//!                         parser and Quarry's own statements), handle_order
//!   3 execution           dispatch (region scans), kv_writer, sst_ingest,
//!                         index (entries, access paths, index reads),
//!                         activity (the running queries)
//!   4 transactions        txn (Percolator's client), tso, gc_hold,
//!                         schema_check
//!   5 region access       cluster (the stores' and meta's RPCs),
//!                         region_cache, retry (the one region-retry
//!                         layer), catalog_cache
//!   6 leaves              error, metrics, config, caller (who sent the
//!                         request), statement_deadline, output (what a
//!                         statement answers), table_stats, backoff
//! ```
//!
//! This is ARCHITECTURE.md's order (front ends → session/engine → planner
//! → execution and dispatch → transactions) with one change, written down
//! in `docs/design-notes.md`: the region cache and the retry layer sit
//! below the transactions, not beside the scans' dispatch, because a
//! transaction's prewrite and commit go through the same retry layer as a
//! scan; and the scans' dispatch resolves locks, so it sits above the
//! transactions.
//!
//! Things a lower layer needs to read but a higher one sets travel in
//! leaves: the caller and the statement's deadline are task-locals that
//! the front ends and the session layer set (`caller.rs`,
//! `statement_deadline.rs`), a statement's answer is `output.rs`'s type,
//! and the configuration's defaults are `config.rs`'s constants.
//!
//! A folder is one unit: the engine's statements (`engine/dml.rs`, …)
//! take the `QueryEngine` that calls them, as a parent's children do.
//!
//! The test reads the crate's sources: every `crate::module` path outside
//! comments and test modules is an import.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// Layer of each top-level module, top (0) to bottom.
    const LAYERS: &[(usize, &[&str])] = &[
        (0, &["server", "flight", "pg"]),
        (
            1,
            &["engine", "session", "session_settings", "auth", "params"],
        ),
        (2, &["df", "sql", "handle_order"]),
        (
            3,
            &["dispatch", "kv_writer", "sst_ingest", "index", "activity"],
        ),
        (4, &["txn", "tso", "gc_hold", "schema_check"]),
        (5, &["cluster", "region_cache", "retry", "catalog_cache"]),
        (
            6,
            &[
                "error",
                "metrics",
                "config",
                "caller",
                "statement_deadline",
                "output",
                "table_stats",
                "backoff",
                "layers",
            ],
        ),
    ];

    fn layer_of(module: &str) -> Option<usize> {
        LAYERS
            .iter()
            .find(|(_, ms)| ms.contains(&module))
            .map(|(l, _)| *l)
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// The source without comments (outside string literals) and without
    /// its test module (`#[cfg(test)] mod tests { … }` and what follows).
    fn code(text: &str) -> String {
        let text = text
            .find("#[cfg(test)]\nmod tests {")
            .map_or(text, |at| &text[..at]);
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars().peekable();
        let (mut in_string, mut escaped) = (false, false);
        while let Some(c) = chars.next() {
            if in_string {
                out.push(c);
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                // A comment: up to the end of the line.
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
                continue;
            }
            in_string = c == '"';
            out.push(c);
        }
        out
    }

    /// Top-level modules that `code` names after `root` (`crate::`, or
    /// `super::` where that is the crate's root), `use` groups included
    /// (`crate::{a, b::{c, d}}` names `a` and `b`).
    fn imports(code: &str, root: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        let ident = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        let mut name = |s: &str| {
            let n = ident(s.trim_start());
            if modules.contains(&n) {
                found.insert(n);
            }
        };
        for (at, _) in code.match_indices(root) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = &code[at + root.len()..];
            let Some(group) = rest.strip_prefix('{') else {
                name(rest);
                continue;
            };
            // The group's top-level items: the first, and each after a
            // comma outside nested braces.
            name(group);
            let mut depth = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => name(&group[i + 1..]),
                    _ => {}
                }
            }
        }
        found
    }

    #[test]
    fn each_module_imports_only_its_layer_and_those_below_without_cycles() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![];
        rust_files(&src, &mut files);
        // Top-level module of each file.
        let module_of = |p: &Path| -> String {
            let rel = p.strip_prefix(&src).unwrap();
            let first = rel.components().next().unwrap();
            let name = first.as_os_str().to_string_lossy();
            name.trim_end_matches(".rs").to_string()
        };
        let modules: BTreeSet<String> = files
            .iter()
            .map(|p| module_of(p))
            .filter(|m| m != "lib")
            .collect();
        let unplaced: Vec<&String> = modules.iter().filter(|m| layer_of(m).is_none()).collect();
        assert!(
            unplaced.is_empty(),
            "modules with no layer (add them to LAYERS and to the table in layers.rs): {unplaced:?}"
        );

        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut wrong = vec![];
        for f in &files {
            let from = module_of(f);
            if from == "lib" {
                continue;
            }
            let text = code(&std::fs::read_to_string(f).unwrap());
            // `super::` is the crate's root in a top-level file and in a
            // folder's `mod.rs`.
            let rel = f.strip_prefix(&src).unwrap();
            let depth = rel.components().count();
            let at_root = depth == 1 || (depth == 2 && rel.ends_with("mod.rs"));
            let mut found = imports(&text, "crate::", &modules);
            if at_root {
                found.extend(imports(&text, "super::", &modules));
            }
            for to in found {
                if to == from {
                    continue;
                }
                let (lf, lt) = (layer_of(&from).unwrap(), layer_of(&to).unwrap());
                if lt < lf {
                    wrong.push(format!(
                        "{} (layer {lf}) imports {to} (layer {lt})",
                        f.strip_prefix(&src).unwrap().display()
                    ));
                }
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
        assert!(wrong.is_empty(), "imports upwards:\n{}", wrong.join("\n"));

        // No cycle, within a layer or across (depth-first, by colour).
        fn visit(
            m: &str,
            edges: &BTreeMap<String, BTreeSet<String>>,
            state: &mut BTreeMap<String, u8>,
            path: &mut Vec<String>,
        ) -> Option<Vec<String>> {
            match state.get(m) {
                Some(2) => return None,
                Some(1) => {
                    let at = path.iter().position(|p| p == m).unwrap();
                    let mut cycle = path[at..].to_vec();
                    cycle.push(m.to_string());
                    return Some(cycle);
                }
                _ => {}
            }
            state.insert(m.to_string(), 1);
            path.push(m.to_string());
            for to in edges.get(m).into_iter().flatten() {
                if let Some(c) = visit(to, edges, state, path) {
                    return Some(c);
                }
            }
            path.pop();
            state.insert(m.to_string(), 2);
            None
        }
        let mut state = BTreeMap::new();
        for m in &modules {
            let cycle = visit(m, &edges, &mut state, &mut vec![]);
            assert!(cycle.is_none(), "an import cycle: {:?}", cycle.unwrap());
        }
    }

    #[test]
    fn the_reader_finds_imports_and_skips_comments_and_tests() {
        let set =
            |names: &[&str]| -> BTreeSet<String> { names.iter().map(|s| s.to_string()).collect() };
        let modules = set(&["a", "b", "c", "d", "e", "f", "g"]);
        let text = "use crate::a::X;\nuse crate::{b, c::{Y, Z}, e::W};\n\
                    // crate::d in a comment\n\
                    let url = \"file://x\"; let y = crate::f::y();\n\
                    mod tests;\n\
                    #[cfg(test)]\nmod tests {\n    use crate::g;\n}\n";
        let got = imports(&code(text), "crate::", &modules);
        assert_eq!(got, set(&["a", "b", "c", "e", "f"]));
        let got = imports("use super::{a, b::c};", "super::", &modules);
        assert_eq!(got, set(&["a", "b"]));
    }
}
