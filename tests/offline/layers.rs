//! The import graph stays one-way: every top-level module of `src/` belongs to a layer
//! (README "Layout", `src/lib.rs`), and imports only from layers strictly below its own, tests
//! included. A new module must be given a layer here, so nobody adds one without deciding.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Bottom first. Same layer: no imports between them.
const LAYERS: &[&[&str]] = &[
    &[
        "health", "resource", "views", "locks", "json", "testing", "glob", "hashing", "heap",
    ],
    &["argocd_lua"],
    &["metrics", "checks", "table", "store_index", "app_status"],
    &[
        "cache", "probe", "written", "leader", "events", "progress", "lint",
    ],
    &["deps"],
    &["kinds"],
    &["ask"],
    &["evaluate", "policy", "queue"],
    &["gate", "annotate"],
    &["notice"],
    &["clusters"],
    &["live_lint"],
    &["waves"],
    &["timeline"],
    &["api"],
    &["cli"],
    // A test of what derives from the registry, in every layer.
    &["adding_a_kind"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for lib.rs and main.rs).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// Modules named as `crate::<module>` in code (not in comments).
fn imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
            rest = after;
        }
    }
    out
}

#[test]
fn every_module_imports_only_from_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let text = fs::read_to_string(file).unwrap();
        graph
            .entry(module.clone())
            .or_default()
            .extend(imports(&text).into_iter().filter(|m| *m != module));
    }
    let mut problems = Vec::new();
    for (module, deps) in &graph {
        let Some(own) = layer_of(module) else {
            problems.push(format!(
                "src/{module} has no layer in tests/offline/layers.rs"
            ));
            continue;
        };
        for dep in deps {
            match layer_of(dep) {
                Some(l) if l < own => {}
                Some(l) => problems.push(format!(
                    "{module} (layer {}) imports {dep} (layer {})",
                    own + 1,
                    l + 1
                )),
                None => problems.push(format!("{module} imports unknown module {dep}")),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Sanity: the scan sees the imports it polices.
    assert!(graph["evaluate"].contains("cache") && graph["api"].contains("evaluate"));
}

#[test]
fn the_scan_catches_an_upward_import_and_ignores_comments() {
    let found = imports("use crate::cache::Change; // see crate::api\n/// [`crate::waves`]\n");
    assert_eq!(found, BTreeSet::from(["cache".to_string()]));
    assert!(layer_of("waves") > layer_of("evaluate"));
}

/// Sibling files named as `super::<file>` in code (not in comments).
fn sibling_imports(text: &str, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("super::") {
            let after = &rest[at + "super::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if siblings.contains(&name) {
                out.insert(name);
            }
            rest = after;
        }
    }
    out
}

/// A cycle in `graph`, as the files along it, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// The files of one folder module (`mod.rs` and `tests.rs` aside: the root declares its files
/// and its tests read them all) import one another one way too, so each file can be read after
/// the files it uses.
#[test]
fn the_files_of_a_module_import_one_another_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut problems = Vec::new();
    let mut folders = 0;
    for entry in fs::read_dir(&src).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        folders += 1;
        let files: BTreeMap<String, PathBuf> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .map(|p| (p.file_stem().unwrap().to_str().unwrap().to_string(), p))
            .filter(|(name, _)| name != "mod" && name != "tests")
            .collect();
        let siblings: BTreeSet<String> = files.keys().cloned().collect();
        let graph: BTreeMap<String, BTreeSet<String>> = files
            .iter()
            .map(|(name, path)| {
                let text = fs::read_to_string(path).unwrap();
                (name.clone(), sibling_imports(&text, &siblings))
            })
            .collect();
        if let Some(found) = cycle(&graph) {
            problems.push(format!("{}: {}", dir.display(), found.join(" → ")));
        }
    }
    assert!(folders > 0, "the scan sees the folder modules");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_file_scan_catches_a_cycle() {
    let siblings = BTreeSet::from(["a".to_string(), "b".to_string()]);
    assert_eq!(
        sibling_imports("use super::b::X; // super::a\nuse super::*;", &siblings),
        BTreeSet::from(["b".to_string()])
    );
    let graph = BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["a".to_string()])),
    ]);
    assert_eq!(cycle(&graph).unwrap(), ["a", "b", "a"]);
    let graph = BTreeMap::from([("a".to_string(), BTreeSet::from(["b".to_string()]))]);
    assert_eq!(cycle(&graph), None);
}
