//! The import-graph half of the source-hygiene test: a small token-based reader of Rust
//! modules (no `syn`), the file-level graph of a crate and its cycles.

mod facts;
pub mod graph;
mod lex;
#[cfg(test)]
mod tests;

/// A module path inside a crate (`["weights", "store"]`); the crate root is empty.
pub type Module = Vec<String>;
