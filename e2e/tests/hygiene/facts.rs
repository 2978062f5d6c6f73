//! What one file says, read from its tokens: the `mod x;` it declares, its inline modules,
//! and every path it names (`use` trees expanded, `a::b::c` paths in code).

use super::Module;
use super::lex::{is_ident, tokens};

/// What one file says: the `mod x;` it declares, its inline modules (relative to the
/// file's module), and every path it names, each with the inline module it was named in.
#[derive(Debug, Default)]
pub struct FileFacts {
    pub children: Vec<String>,
    pub inline: Vec<Module>,
    pub paths: Vec<(Module, Vec<String>)>,
}

pub fn facts(source: &str) -> FileFacts {
    let toks = tokens(source);
    let mut facts = FileFacts::default();
    // Inline module stack: (name, brace depth at which it closes).
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let here = |stack: &[(String, usize)]| stack.iter().map(|(n, _)| n.clone()).collect::<Module>();
    while i < toks.len() {
        let t = toks[i].as_str();
        match t {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if stack.last().is_some_and(|(_, d)| *d > depth) {
                    stack.pop();
                }
            }
            "mod" if i + 2 < toks.len() && is_ident(&toks[i + 1]) => {
                let name = toks[i + 1].clone();
                if toks[i + 2] == ";" && stack.is_empty() {
                    facts.children.push(name);
                    i += 3;
                    continue;
                }
                if toks[i + 2] == "{" {
                    if is_test_attribute(&toks[..i]) {
                        // Test code sits above what it tests: its imports are not the file's.
                        i = skip_block(&toks, i + 2);
                        continue;
                    }
                    stack.push((name, depth + 1));
                    facts.inline.push(here(&stack));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            "use" => {
                let end = toks[i..]
                    .iter()
                    .position(|t| t == ";")
                    .map_or(toks.len(), |p| i + p);
                let mut trees = Vec::new();
                use_tree(&toks[i + 1..end], Vec::new(), &mut trees);
                let scope = here(&stack);
                facts
                    .paths
                    .extend(trees.into_iter().map(|p| (scope.clone(), p)));
                i = end + 1;
                continue;
            }
            _ if is_ident(t)
                && toks.get(i + 1).is_some_and(|n| n == "::")
                && (i == 0 || toks[i - 1] != "::") =>
            {
                let mut path = vec![t.to_string()];
                let mut j = i + 1;
                while j + 1 < toks.len() && toks[j] == "::" && is_ident(&toks[j + 1]) {
                    path.push(toks[j + 1].clone());
                    j += 2;
                }
                facts.paths.push((here(&stack), path));
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    facts
}

/// Whether the tokens before a `mod` end in `#[cfg(test)]`.
fn is_test_attribute(before: &[String]) -> bool {
    before.ends_with(&["#", "[", "cfg", "(", "test", ")", "]"].map(String::from))
}

/// The index after the block whose `{` is at `open`.
fn skip_block(toks: &[String], open: usize) -> usize {
    let mut level = 0;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t.as_str() {
            "{" => level += 1,
            "}" => {
                level -= 1;
                if level == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// Expands a `use` tree (`a::{b, c::{d as e, self}}`) into its full paths.
fn use_tree(toks: &[String], prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    let mut i = 0;
    // Leading `::` (`use ::std::…`) names an external crate.
    if toks.first().is_some_and(|t| t == "::") {
        return;
    }
    while i < toks.len() {
        let t = toks[i].as_str();
        if t == "{" {
            // Split the group at top-level commas.
            let mut level = 0;
            let mut start = i + 1;
            for j in i + 1..toks.len() {
                match toks[j].as_str() {
                    "{" => level += 1,
                    "}" if level == 0 => {
                        use_tree(&toks[start..j], path.clone(), out);
                        return;
                    }
                    "}" => level -= 1,
                    "," if level == 0 => {
                        use_tree(&toks[start..j], path.clone(), out);
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        if t == "as" || t == "*" || t == "," || t == "}" {
            break;
        }
        // `self` inside a group names the group's prefix itself.
        let group_self = t == "self" && !path.is_empty();
        if is_ident(t) && !group_self {
            path.push(t.to_string());
        }
        i += 1;
    }
    if !path.is_empty() {
        out.push(path);
    }
}
