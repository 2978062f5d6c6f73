//! Source hygiene, checked mechanically over the whole workspace: no file-level import
//! circles inside a crate, and no `.rs` file over 500 lines without a `//! Size:` line in
//! its header saying why.
//!
//! The import graph is file-level: a file points at another file of the same crate when it
//! names one of that file's modules through `crate::…`, `super::…`, `self::…` or a child
//! module's name, in a `use` or in a path anywhere in its code. The parent owns its
//! children: a `mod child;` declaration, and the parent using or re-exporting its direct
//! child's items, is structure, not an import; a child using its parent's items is an edge.
//! Inline modules (`mod inner { use super::*; }`) belong to their file, so `super` from
//! inside one resolves to the file itself; `#[cfg(test)]` inline modules are skipped (test
//! code sits above what it tests). Comments, strings and character literals are blanked
//! out first, then `use` trees and `::` paths are read from the tokens (see `hygiene/`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hygiene::graph::{crate_graph, cycles};

mod hygiene;

/// Files over this many lines need a `//! Size:` reason in their header.
const MAX_LINES: usize = 500;

// The workspace on disk.

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace members, read from the root `Cargo.toml`'s `members = [...]`.
fn members(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("workspace Cargo.toml");
    let start = manifest.find("members").expect("members list");
    let list = &manifest[start..start + manifest[start..].find(']').expect("members end")];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(|m| root.join(m))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Crate roots of one package: the library, the main binary, `src/bin/*`, and the
/// integration tests, benches and examples, each its own crate.
fn crate_roots(package: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["src/lib.rs", "src/main.rs"]
        .iter()
        .map(|r| package.join(r))
        .collect();
    for dir in ["src/bin", "tests", "benches", "examples"] {
        let Ok(entries) = std::fs::read_dir(package.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "rs") {
                roots.push(path);
            } else if path.join("main.rs").exists() {
                roots.push(path.join("main.rs"));
            }
        }
    }
    roots.retain(|r| r.exists());
    roots
}

fn shown(path: &Path, root: &Path) -> String {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string()
}

#[test]
fn no_crate_in_the_workspace_has_an_import_circle() {
    let root = workspace();
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let mut chains = BTreeSet::new();
    for package in members(&root) {
        for crate_root in crate_roots(&package) {
            for cycle in cycles(&crate_graph(&crate_root, &read)) {
                let mut chain: Vec<String> = cycle.iter().map(|f| shown(f, &root)).collect();
                chain.push(chain[0].clone());
                chains.insert(chain.join(" -> "));
            }
        }
    }
    assert!(
        chains.is_empty(),
        "{} import circle(s):\n{}",
        chains.len(),
        chains.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// Whether the file's opening `//!` header has a `//! Size:` line.
pub fn has_size_reason(source: &str) -> bool {
    source
        .lines()
        .take_while(|l| l.starts_with("//!") || l.trim().is_empty())
        .any(|l| l.starts_with("//! Size:"))
}

#[test]
fn no_source_file_is_over_500_lines_without_a_reason() {
    let root = workspace();
    let mut files = Vec::new();
    for package in members(&root) {
        rust_files(&package, &mut files);
    }
    files.sort();
    files.dedup();
    let mut long = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).expect("readable source");
        let lines = source.lines().count();
        if lines > MAX_LINES && !has_size_reason(&source) {
            long.push(format!("{} ({lines} lines)", shown(&file, &root)));
        }
    }
    assert!(
        long.is_empty(),
        "{} file(s) over {MAX_LINES} lines without a `//! Size:` reason in the header:\n{}",
        long.len(),
        long.join("\n")
    );
}
