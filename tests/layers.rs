//! The layers of `src/` and `sandbox/src/` import downward only (docs/architecture.md). Every
//! `crate::NAME` a file mentions (code, tests and doc links alike) must name its own layer or
//! one it may use; a new top-level module must be given a place here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which top-level modules each top-level module may name. A module's own name is always allowed.
type Rules = BTreeMap<&'static str, Vec<&'static str>>;

fn operator_rules() -> Rules {
    let mut r = Rules::new();
    r.insert("error", vec![]);
    r.insert("api", vec!["error"]);
    r.insert("children", vec!["error", "api"]);
    r.insert("cluster", vec!["error", "api", "children"]);
    r.insert("watch", vec!["error", "api"]);
    r.insert(
        "reconcile",
        vec!["error", "api", "children", "cluster", "watch"],
    );
    r.insert(
        "runtime",
        vec!["error", "api", "children", "cluster", "watch", "reconcile"],
    );
    r
}

/// The sandbox: its leaf modules, then the nodes (a kube client program) and the store, the
/// server over the store, the simulation over the store and nodes, and the `Sandbox` on top.
fn sandbox_rules() -> Rules {
    const BASE: [&str; 10] = [
        "builtins",
        "error",
        "events",
        "faults",
        "lists",
        "meta",
        "patch",
        "registry",
        "selector",
        "validation",
    ];
    let mut r = Rules::new();
    for m in BASE {
        r.insert(m, BASE.to_vec());
    }
    r.insert("nodes", vec!["meta"]);
    r.insert("store", BASE.to_vec());
    r.insert("server", [&BASE[..], &["store"]].concat());
    r.insert("sim", [&BASE[..], &["store", "nodes"]].concat());
    let all: Vec<&str> = [&BASE[..], &["nodes", "store", "server", "sim"]].concat();
    r.insert("sandbox", all);
    r
}

/// The sandbox crate root's re-exports, by the module that defines them.
fn sandbox_reexport(name: &str) -> Option<&'static str> {
    match name {
        "ApiError" => Some("error"),
        "Faults" => Some("faults"),
        "Error" | "Options" | "Sandbox" => Some("sandbox"),
        _ => None,
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file under `root` belongs to: `api` for `api/mod.rs` and
/// `api/convert/tests.rs`, `error` for `error.rs`; `None` for the crate roots.
fn module_of(root: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(root).expect("a file under the root");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// Each `crate::NAME` on `line`.
fn crate_paths(line: &str) -> Vec<String> {
    line.match_indices("crate::")
        .filter(|(i, _)| {
            // Not `habitat_crate::` or the like.
            !line[..*i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .map(|(i, m)| {
            line[i + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// `crate::{a, b::c}` names `a` and `b`.
fn braced_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("crate::{") {
        let rest = &text[i + "crate::{".len()..];
        let mut depth = 1;
        let mut item = String::new();
        let mut at_start = true;
        for c in rest.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 1 => at_start = true,
                c if at_start && (c.is_alphanumeric() || c == '_') => item.push(c),
                _ if !item.is_empty() => {
                    found.push((i, std::mem::take(&mut item)));
                    at_start = false;
                }
                _ => {}
            }
            if depth == 0 {
                break;
            }
        }
        if !item.is_empty() {
            found.push((i, item));
        }
    }
    found
}

/// Every upward (or unknown) import under `root`, as `file:line: module -> NAME`.
fn violations(
    root: &Path,
    rules: &Rules,
    reexport: impl Fn(&str) -> Option<&'static str>,
) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no sources under {}", root.display());
    let mut bad = Vec::new();
    for file in files {
        let Some(me) = module_of(root, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let Some(allowed) = rules.get(me.as_str()) else {
            bad.push(format!(
                "{}: module `{me}` has no place in the layers of tests/layers.rs",
                file.display()
            ));
            continue;
        };
        let mut names: Vec<(usize, String)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            names.extend(crate_paths(line).into_iter().map(|p| (n + 1, p)));
        }
        for (offset, name) in braced_paths(&text) {
            names.push((text[..offset].lines().count(), name));
        }
        for (line, name) in names {
            if name.is_empty() {
                continue;
            }
            let target = reexport(&name).map(str::to_string).unwrap_or(name);
            if target != me && !allowed.contains(&target.as_str()) {
                bad.push(format!("{}:{line}: {me} -> {target}", file.display()));
            }
        }
    }
    bad
}

#[test]
fn the_operator_imports_downward_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&root, &operator_rules(), |_| None);
    assert!(
        bad.is_empty(),
        "imports that reach upward (move the item down or the caller up):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_sandbox_imports_downward_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sandbox/src");
    let bad = violations(&root, &sandbox_rules(), sandbox_reexport);
    assert!(
        bad.is_empty(),
        "imports that reach upward (move the item down or the caller up):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_import() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::create_dir_all(dir.path().join("api")).expect("api/");
    std::fs::write(
        dir.path().join("api/mod.rs"),
        "use crate::error::Error;\n/// See [`crate::reconcile::act`].\nuse crate::{children::Workload, error};\n",
    )
    .expect("a source file");
    let bad = violations(dir.path(), &operator_rules(), |_| None);
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].ends_with(":2: api -> reconcile"), "{bad:?}");
    assert!(bad[1].ends_with(":3: api -> children"), "{bad:?}");
}
