//! The `socketIfname` syntax of `HCCL_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`, parsed once
//! into an [`IfnameMatcher`] (pure; no I/O).
//!
//! - `eth,ens` — a comma-separated list of name *prefixes*: `eth` matches `eth0`, `eth1`.
//! - `=eth0` — `=` makes every entry an *exact* name.
//! - `^lo,docker` — `^` *excludes* the listed prefixes: every other interface matches.
//! - `^=eth0` — both: every interface except exactly `eth0`.
//!
//! Entries are trimmed; empty entries are ignored; a list with no entry is an error, so a
//! typo such as `^` never silently matches everything.

use std::fmt;

/// A parsed `socketIfname` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfnameMatcher {
    exclude: bool,
    exact: bool,
    names: Vec<String>,
}

/// Why a `socketIfname` value did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid socketIfname {value:?}: {reason}")]
pub struct IfnameError {
    pub value: String,
    pub reason: &'static str,
}

impl IfnameMatcher {
    /// Parses the HCCL/NCCL syntax.
    pub fn parse(value: &str) -> Result<IfnameMatcher, IfnameError> {
        let err = |reason| IfnameError {
            value: value.to_owned(),
            reason,
        };
        let mut rest = value.trim();
        let exclude = match rest.strip_prefix('^') {
            Some(r) => {
                rest = r;
                true
            }
            None => false,
        };
        let exact = match rest.strip_prefix('=') {
            Some(r) => {
                rest = r;
                true
            }
            None => false,
        };
        let names: Vec<String> = rest
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if names.is_empty() {
            return Err(err("no interface name or prefix listed"));
        }
        if let Some(bad) = names.iter().find(|n| n.len() > 15) {
            let _ = bad;
            return Err(err("an interface name is longer than 15 characters"));
        }
        if names
            .iter()
            .any(|n| n.contains(|c: char| c.is_whitespace() || c == '^' || c == '='))
        {
            return Err(err("`^` and `=` may only appear at the start of the list"));
        }
        Ok(IfnameMatcher {
            exclude,
            exact,
            names,
        })
    }

    /// Whether interface `name` is selected.
    pub fn matches(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|p| {
            if self.exact {
                name == p
            } else {
                name.starts_with(p.as_str())
            }
        });
        hit != self.exclude
    }

    /// Whether the list excludes rather than selects.
    pub fn is_exclusion(&self) -> bool {
        self.exclude
    }
}

impl fmt::Display for IfnameMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exclude {
            f.write_str("^")?;
        }
        if self.exact {
            f.write_str("=")?;
        }
        f.write_str(&self.names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> IfnameMatcher {
        IfnameMatcher::parse(s).unwrap()
    }

    #[test]
    fn a_bare_list_matches_by_prefix() {
        let x = m("eth,ens");
        assert!(x.matches("eth0"));
        assert!(x.matches("ens3f0"));
        assert!(x.matches("eth"));
        assert!(!x.matches("data0"));
        assert!(!x.matches("veth12"), "prefix, not substring");
    }

    #[test]
    fn equals_makes_every_entry_exact() {
        let x = m("=eth0,data0");
        assert!(x.matches("eth0"));
        assert!(x.matches("data0"));
        assert!(!x.matches("eth01"));
        assert!(!x.matches("eth"));
    }

    #[test]
    fn caret_excludes_the_listed_prefixes() {
        let x = m("^lo,docker");
        assert!(!x.matches("lo"));
        assert!(!x.matches("docker0"));
        assert!(x.matches("eth0"));
        assert!(x.matches("data0"));
        assert!(x.is_exclusion());
    }

    #[test]
    fn caret_equals_excludes_exact_names_only() {
        let x = m("^=eth0");
        assert!(!x.matches("eth0"));
        assert!(x.matches("eth01"));
        assert!(x.matches("eth1"));
    }

    #[test]
    fn whitespace_and_empty_entries_are_ignored() {
        let x = m(" eth , ,ib ");
        assert!(x.matches("ib0"));
        assert!(x.matches("eth2"));
        assert_eq!(x.to_string(), "eth,ib");
    }

    #[test]
    fn empty_lists_and_misplaced_markers_are_refused() {
        for bad in [
            "",
            "^",
            "=",
            "^=",
            " , ",
            "eth,^lo",
            "eth,=lo",
            "abcdefghijklmnop",
        ] {
            assert!(
                IfnameMatcher::parse(bad).is_err(),
                "{bad:?} should not parse"
            );
        }
        let e = IfnameMatcher::parse("^").unwrap_err();
        assert!(e.to_string().contains("no interface"));
    }

    #[test]
    fn display_round_trips() {
        for s in ["eth", "=eth0", "^lo,docker", "^=eth0,eth1"] {
            assert_eq!(m(s).to_string(), s);
            assert_eq!(m(&m(s).to_string()), m(s));
        }
    }
}
