//! The graph and cycle code on small in-memory crates.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::graph::{Graph, crate_graph, cycles};
use crate::has_size_reason;

fn in_memory(files: &[(&str, &str)]) -> Graph {
    let map: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(p, s)| (PathBuf::from(p), s.to_string()))
        .collect();
    crate_graph(Path::new("src/lib.rs"), &|p: &Path| map.get(p).cloned())
}

fn chains(graph: &Graph) -> Vec<String> {
    cycles(graph)
        .into_iter()
        .map(|c| {
            c.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" -> ")
        })
        .collect()
}

#[test]
fn two_files_that_use_each_other_are_a_cycle() {
    let graph = in_memory(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A;"),
        (
            "src/b.rs",
            "pub struct B;\nfn f() -> crate::a::A { todo!() }",
        ),
    ]);
    assert_eq!(chains(&graph), vec!["src/a.rs -> src/b.rs"]);
}

#[test]
fn a_cycle_through_three_files_is_reported_as_one_chain() {
    let graph = in_memory(&[
        ("src/lib.rs", "mod a; mod b; mod c;"),
        ("src/a.rs", "use super::b::{self, B};"),
        ("src/b.rs", "use crate::{c::C as D};"),
        ("src/c.rs", "fn f() { crate::a::g(); }"),
    ]);
    assert_eq!(chains(&graph), vec!["src/a.rs -> src/b.rs -> src/c.rs"]);
}

#[test]
fn a_diamond_is_not_a_cycle() {
    let graph = in_memory(&[
        ("src/lib.rs", "mod top; mod left; mod right; mod bottom;"),
        ("src/top.rs", "use crate::left::L; use crate::right::R;"),
        ("src/left.rs", "use crate::bottom::X;"),
        ("src/right.rs", "use crate::bottom::X;"),
        ("src/bottom.rs", "pub struct X;"),
    ]);
    assert!(chains(&graph).is_empty());
    assert_eq!(graph.edges[Path::new("src/top.rs")].len(), 2);
}

#[test]
fn a_parent_declaring_its_children_is_not_an_import() {
    let graph = in_memory(&[
        ("src/lib.rs", "mod net;"),
        ("src/net/mod.rs", "mod tcp;\nmod udp;\npub struct Addr;"),
        ("src/net/tcp.rs", "use super::Addr;"),
        ("src/net/udp/mod.rs", "mod socket;\nuse super::Addr;"),
        ("src/net/udp/socket.rs", "use super::super::Addr;"),
    ]);
    assert!(chains(&graph).is_empty());
    assert!(graph.edges[Path::new("src/net/mod.rs")].is_empty());
    assert!(graph.edges[Path::new("src/net/udp/socket.rs")].contains(Path::new("src/net/mod.rs")));
}

#[test]
fn a_parent_re_exporting_its_child_that_uses_it_back_is_not_a_cycle() {
    let graph = in_memory(&[
        ("src/lib.rs", "mod net;"),
        (
            "src/net/mod.rs",
            "mod tcp;\npub use tcp::Stream;\npub struct Addr;",
        ),
        ("src/net/tcp.rs", "use super::Addr;\npub struct Stream;"),
    ]);
    assert!(chains(&graph).is_empty());
    assert!(graph.edges[Path::new("src/net/tcp.rs")].contains(Path::new("src/net/mod.rs")));
}

#[test]
fn a_parent_reaching_a_module_that_uses_it_back_is_a_cycle() {
    let graph = in_memory(&[
        ("src/lib.rs", "mod net;\nmod dns;"),
        (
            "src/net/mod.rs",
            "mod tcp;\npub struct Addr;\nfn f() { crate::dns::lookup(); }",
        ),
        ("src/net/tcp.rs", "use super::Addr;"),
        (
            "src/dns.rs",
            "pub fn lookup() -> crate::net::Addr { todo!() }",
        ),
    ]);
    assert_eq!(chains(&graph), vec!["src/dns.rs -> src/net/mod.rs"]);
}

#[test]
fn super_inside_an_inline_module_is_the_file_and_test_modules_import_nothing() {
    let graph = in_memory(&[
        ("src/lib.rs", "mod a;\nmod b;\npub fn top() {}"),
        (
            "src/a.rs",
            "pub fn f() {}\nmod inner {\n    use super::*;\n    fn g() { super::f(); }\n}\n",
        ),
        (
            "src/b.rs",
            "fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::a::f;\n}\nfn g() { let c = '}'; }",
        ),
    ]);
    assert!(graph.edges[Path::new("src/a.rs")].is_empty());
    assert!(graph.edges[Path::new("src/b.rs")].is_empty());
}

#[test]
fn comments_strings_and_char_literals_are_not_paths() {
    let graph = in_memory(&[
        ("src/lib.rs", "mod a; mod b;"),
        (
            "src/a.rs",
            "// crate::b::x\n/* crate::b */\nconst S: &str = \"crate::b::y\";\nconst R: &str = r#\"crate::b\"#;\nconst C: char = '{';\nfn f<'a>(x: &'a str) {}",
        ),
        ("src/b.rs", "use crate::a::f;"),
    ]);
    assert!(chains(&graph).is_empty());
    assert!(graph.edges[Path::new("src/a.rs")].is_empty());
}

#[test]
fn a_long_file_needs_a_size_line_in_its_header() {
    assert!(has_size_reason(
        "//! Role.\n//! Size: one FFI table.\n\nuse x;"
    ));
    assert!(!has_size_reason("//! Role.\n\nuse x;\n//! Size: too late"));
    assert!(!has_size_reason("fn main() {}"));
}
