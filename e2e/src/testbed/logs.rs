//! The last lines of the testbed's member logs, for a failure message: a CI machine keeps
//! only the test's output, not the testbed's folder.

use std::path::Path;

/// How many characters of one log line a tail keeps.
const LINE_CHARS: usize = 400;

/// The last `lines` lines of each worker log of the Pods in `namespace` whose name starts
/// with `pod_prefix`, under `logs`, colour codes removed.
pub fn worker_log_tails(logs: &Path, namespace: &str, pod_prefix: &str, lines: usize) -> String {
    let Ok(entries) = std::fs::read_dir(logs) else {
        return format!("(no logs in {})", logs.display());
    };
    let prefix = format!("{namespace}_{pod_prefix}");
    let mut names: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with(&prefix) && n.ends_with("_worker.log"))
        .collect();
    names.sort();
    let mut out = String::new();
    for name in names {
        let text = std::fs::read_to_string(logs.join(&name)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        out.push_str(&format!("--- {name}, last {lines} lines:\n"));
        for line in &all[all.len().saturating_sub(lines)..] {
            out.extend(strip_ansi(line).chars().take(LINE_CHARS));
            out.push('\n');
        }
    }
    out
}

/// `s` without its ANSI escape sequences (tracing colours its output).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_are_removed_and_text_kept() {
        assert_eq!(
            strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m joined"),
            "2026  INFO joined"
        );
    }

    #[test]
    fn only_the_prefixed_worker_logs_are_tailed() {
        let dir = std::env::temp_dir().join(format!("hcomm-logs-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ns_decode-2-a_worker.log"), "1\n2\n3\n").unwrap();
        std::fs::write(dir.join("ns_decode-1-a_worker.log"), "x\n").unwrap();
        std::fs::write(dir.join("ns_decode-2-a_agent.log"), "y\n").unwrap();
        let tails = worker_log_tails(&dir, "ns", "decode-2-", 2);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(tails, "--- ns_decode-2-a_worker.log, last 2 lines:\n2\n3\n");
    }
}
