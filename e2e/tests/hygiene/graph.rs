//! The file-level import graph of one crate, and its cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::Module;
use super::facts::{FileFacts, facts};

/// The file-level import graph of one crate: files and the files each one imports.
#[derive(Debug, Default)]
pub struct Graph {
    pub edges: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

// Building a crate's graph: walk `mod` declarations from the root, then resolve paths.

/// Where `mod name;` in `file` lives: `dir/name.rs` or `dir/name/mod.rs`, where `dir` is
/// the file's directory for crate roots and `mod.rs`, else the directory named after it.
fn child_file(
    file: &Path,
    is_root: bool,
    name: &str,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let dir = if is_root || file.file_name().is_some_and(|n| n == "mod.rs") {
        file.parent()?.to_path_buf()
    } else {
        file.with_extension("")
    };
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| exists(p))
}

/// The import graph of the crate whose root is `root`, reading files through `read`.
pub fn crate_graph(root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Graph {
    let exists = |p: &Path| read(p).is_some();
    let mut modules: BTreeMap<Module, PathBuf> = BTreeMap::new();
    let mut file_facts: Vec<(PathBuf, Module, FileFacts)> = Vec::new();
    let mut queue = vec![(root.to_path_buf(), Module::new(), true)];
    while let Some((file, module, is_root)) = queue.pop() {
        let Some(source) = read(&file) else { continue };
        let f = facts(&source);
        modules.insert(module.clone(), file.clone());
        for inline in &f.inline {
            let mut m = module.clone();
            m.extend(inline.iter().cloned());
            modules.insert(m, file.clone());
        }
        for child in &f.children {
            if let Some(path) = child_file(&file, is_root, child, &exists) {
                let mut m = module.clone();
                m.push(child.clone());
                queue.push((path, m, false));
            }
        }
        file_facts.push((file, module, f));
    }
    let file_module: BTreeMap<&PathBuf, &Module> =
        file_facts.iter().map(|(f, m, _)| (f, m)).collect();
    // The parent owns its children: declaring them, and using or re-exporting their items,
    // is structure, not a dependency. A child using its parent's items is one.
    let is_child = |parent: &Module, target: &PathBuf| {
        file_module
            .get(target)
            .is_some_and(|m| m.len() == parent.len() + 1 && m.starts_with(parent))
    };
    let mut graph = Graph::default();
    for (file, module, f) in &file_facts {
        let targets = graph.edges.entry(file.clone()).or_default();
        for (inline, path) in &f.paths {
            let mut scope = module.clone();
            scope.extend(inline.iter().cloned());
            if let Some(target) = resolve(&modules, &scope, path)
                && target != *file
                && !is_child(module, &target)
            {
                targets.insert(target);
            }
        }
    }
    graph
}

/// The file a path names, if it names a module of this crate.
fn resolve(
    modules: &BTreeMap<Module, PathBuf>,
    scope: &[String],
    path: &[String],
) -> Option<PathBuf> {
    let mut segments = path.iter().peekable();
    let mut current: Module = match segments.peek()?.as_str() {
        "crate" => {
            segments.next();
            Module::new()
        }
        "self" => {
            segments.next();
            scope.to_vec()
        }
        "super" => {
            let mut m = scope.to_vec();
            while segments.peek().is_some_and(|s| *s == "super") {
                segments.next();
                m.pop();
            }
            m
        }
        first => {
            // A bare name counts only when it is a child module of the current scope.
            let mut m = scope.to_vec();
            m.push(first.to_string());
            if !modules.contains_key(&m) {
                return None;
            }
            scope.to_vec()
        }
    };
    for segment in segments {
        let mut next = current.clone();
        next.push(segment.clone());
        if !modules.contains_key(&next) {
            break;
        }
        current = next;
    }
    modules.get(&current).cloned()
}

// Cycles.

/// Every elementary cycle of the graph, each as a file chain starting at its smallest file.
pub fn cycles(graph: &Graph) -> Vec<Vec<PathBuf>> {
    let nodes: Vec<&PathBuf> = graph.edges.keys().collect();
    let mut found = Vec::new();
    for (index, start) in nodes.iter().enumerate() {
        let allowed: BTreeSet<&PathBuf> = nodes[index..].iter().copied().collect();
        let mut path = vec![(*start).clone()];
        walk(graph, start, &allowed, &mut path, &mut found);
    }
    found
}

fn walk(
    graph: &Graph,
    start: &PathBuf,
    allowed: &BTreeSet<&PathBuf>,
    path: &mut Vec<PathBuf>,
    found: &mut Vec<Vec<PathBuf>>,
) {
    let last = path.last().cloned().unwrap_or_default();
    for next in graph.edges.get(&last).into_iter().flatten() {
        if next == start {
            found.push(path.clone());
        } else if allowed.contains(next) && !path.contains(next) && found.len() < 1000 {
            path.push(next.clone());
            walk(graph, start, allowed, path, found);
            path.pop();
        }
    }
}
