//! Log scanning: finds the keywords that matter in HCCL and agent logs and keeps one line
//! of context either side. Directories are walked (bounded); only each file's tail is read.

use std::path::{Path, PathBuf};

use super::facts::LogMatch;

/// Keywords searched, case-insensitively.
pub const KEYWORDS: &[&str] = &["timeout", "connect fail", "link down"];
/// At most this many matches are kept.
pub const MAX_MATCHES: usize = 50;
const MAX_FILES: usize = 500;
const TAIL_BYTES: usize = 4 << 20;

/// Matches in one file's text (pure).
pub fn scan_text(file: &str, text: &str, out: &mut Vec<LogMatch>) {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if out.len() >= MAX_MATCHES {
            return;
        }
        let lower = line.to_ascii_lowercase();
        // "connect failed", "connect fail", "timed out" count too.
        let hit = KEYWORDS
            .iter()
            .copied()
            .find(|k| lower.contains(k))
            .or_else(|| lower.contains("timed out").then_some("timeout"));
        if let Some(keyword) = hit {
            let from = i.saturating_sub(1);
            let to = (i + 2).min(lines.len());
            out.push(LogMatch {
                file: file.to_owned(),
                line_no: i + 1,
                keyword,
                context: lines[from..to]
                    .iter()
                    .map(|s| s.chars().take(300).collect())
                    .collect(),
            });
        }
    }
}

fn files_under(root: &Path, out: &mut Vec<PathBuf>) {
    if out.len() >= MAX_FILES {
        return;
    }
    if root.is_file() {
        out.push(root.to_owned());
        return;
    }
    let Ok(dir) = std::fs::read_dir(root) else {
        return;
    };
    let mut entries: Vec<PathBuf> = dir.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_symlink() {
            continue;
        }
        files_under(&p, out);
    }
}

/// Scans every file under `roots` (missing paths are skipped).
pub fn scan(roots: &[PathBuf]) -> Vec<LogMatch> {
    let mut files = Vec::new();
    for r in roots {
        files_under(r, &mut files);
    }
    let mut out = Vec::new();
    for f in files {
        let Ok(bytes) = std::fs::read(&f) else {
            continue;
        };
        let tail = &bytes[bytes.len().saturating_sub(TAIL_BYTES)..];
        scan_text(
            &f.display().to_string(),
            &String::from_utf8_lossy(tail),
            &mut out,
        );
        if out.len() >= MAX_MATCHES {
            break;
        }
    }
    out
}

/// The default log locations: `~/ascend/log`, `/var/log/npu`, the agent's log.
pub fn default_roots() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(home) = std::env::var_os("HOME") {
        v.push(PathBuf::from(home).join("ascend/log"));
    }
    v.push("/var/log/npu".into());
    v.push("/var/log/hcomm-agent.log".into());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_match_case_insensitively_with_context() {
        let text =
            "start\n[ERROR] HCCL connect FAIL to 10.0.0.2\nretry\nall good\nsocket timed out\n";
        let mut out = Vec::new();
        scan_text("hccl.log", text, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].keyword, "connect fail");
        assert_eq!(out[0].line_no, 2);
        assert_eq!(
            out[0].context,
            ["start", "[ERROR] HCCL connect FAIL to 10.0.0.2", "retry"]
        );
        assert_eq!(out[1].keyword, "timeout");
    }

    #[test]
    fn directories_are_walked_and_missing_paths_skipped() {
        let dir = std::env::temp_dir().join(format!("hcomm-logs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/plog.log"), "x\neth2 link down\n").unwrap();
        let m = scan(&[dir.clone(), "/nonexistent/logs".into()]);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].keyword, "link down");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
