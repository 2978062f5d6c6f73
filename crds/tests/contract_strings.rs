//! The contract (label, annotation, condition and finalizer names, condition and Event
//! reasons, worker environment names, the rank-table file) is spelled once, in `crds/`.
//! This test walks every `.rs` file of the workspace outside `crds/` — sources and tests
//! of the operator, the agent and its comm engine, e2e and the examples — and fails,
//! naming file:line, when a string literal *is* one of those names; code must use the
//! constants and enums of `hcomm_crds` instead. The forbidden set comes from those
//! constants and enums, so a new reason is covered as soon as it is declared.
//!
//! A literal counts when its whole text is a name: `"hcomm.io/joined"` or
//! `"hcomm.io/group=decode"` (any `hcomm.io/` literal without whitespace), `"RANK_ID"`,
//! `"JoinFailed"`. Sentences for people that mention a name (`"hcomm.io/joined=False
//! (JoinFailed): …"`) are messages, not names, and are left alone.
//!
//! Five words are not forbidden because they are also lifecycle phase names, so a literal
//! alone cannot tell which one it spells: `Ready` (the kubelet's Pod condition, a member
//! and a group phase), `Draining` and `Standby` (member phases), `Degraded` (a group
//! phase) and `Drained` (a phase of the agent's member task). `RollingUpdate` (a group reason) is left
//! alone too: it is also the update strategy type of Kubernetes' own DaemonSets and
//! Deployments, which the chart tests read; so is `Healthy`, a device's health in the
//! kubelet's device-plugin API.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hcomm_crds::contract::{
    GroupConditionType, GroupReason, PodConditionType, PodReason, ascend, env, secrets,
};
use hcomm_crds::{GroupPhase, MemberPhase, rank_table};

/// Names that are also phase names (see the module docs).
const PHASE_WORDS: &[&str] = &["Ready", "Draining", "Standby", "Degraded", "Drained"];

/// Names that are also Kubernetes' own words (see the module docs).
const KUBERNETES_WORDS: &[&str] = &["RollingUpdate", "Healthy"];

/// Every name that must not appear as a literal outside `crds/`.
fn forbidden() -> BTreeSet<&'static str> {
    let mut names: BTreeSet<&'static str> = BTreeSet::new();
    names.extend(env::ALL);
    names.extend(PodConditionType::ALL.iter().map(|t| t.as_str()));
    names.extend(PodReason::ALL.iter().map(|r| r.as_str()));
    names.extend(GroupReason::ALL.iter().map(|r| r.as_str()));
    names.extend(GroupConditionType::ALL.iter().map(|t| t.as_str()));
    names.extend([
        rank_table::KEY_RANK_TABLE,
        rank_table::MOUNT_DIR,
        rank_table::RANK_TABLE_FILE,
        ascend::RESOURCE_ASCEND910,
        ascend::RESOURCE_NPU,
        ascend::ANNOTATION_ASCEND_910_CONFIGURATION,
        ascend::ANNOTATION_ASCEND_NPU_CONFIGURATION,
        ascend::ANNOTATION_ASCEND_REAL,
        ascend::POD_RESOURCES_SOCKET,
        ascend::LABEL_CHIP_NAME,
        ascend::LABEL_TOPOTREE_SUPER_POD,
        secrets::SECRET_NAME_PREFIX,
    ]);
    for word in PHASE_WORDS.iter().chain(KUBERNETES_WORDS) {
        names.remove(word);
    }
    names
}

/// Whether a literal's text is a contract name.
fn is_contract(literal: &str, forbidden: &BTreeSet<&str>) -> bool {
    forbidden.contains(literal)
        || (literal.starts_with("hcomm.io/") && !literal.contains(char::is_whitespace))
}

/// The contents of the string literals on one line of code (comments skipped). Raw
/// strings are scanned the same way, so a quoted name inside a JSON fixture counts too.
fn literals(line: &str) -> Vec<&str> {
    let code = match line.trim_start() {
        l if l.starts_with("//") => return Vec::new(),
        _ => line,
    };
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' if bytes.get(i + 1) == Some(&b'"') && bytes.get(i + 2) == Some(&b'\'') => {
                i += 3;
            }
            b'\'' if bytes.get(i + 1) == Some(&b'\\') && bytes.get(i + 3) == Some(&b'\'') => {
                i += 4;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => break,
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                out.push(&code[start..j.min(bytes.len())]);
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_contract_string_is_spelled_outside_crds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let forbidden = forbidden();
    let mut files = Vec::new();
    for dir in ["operator", "agent", "e2e", "examples"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 100,
        "the walk found only {} files",
        files.len()
    );
    let mut hits = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a readable source file");
        for (n, line) in text.lines().enumerate() {
            for literal in literals(line) {
                if is_contract(literal, &forbidden) {
                    let shown = file.strip_prefix(&root).unwrap_or(file);
                    hits.push(format!("{}:{}: \"{literal}\"", shown.display(), n + 1));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "contract strings spelled outside crds/ (use the hcomm_crds constants/enums):\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_words_left_out_really_are_phase_names() {
    let phase = |p: serde_json::Value| p.as_str().map(str::to_owned);
    let phases = [
        phase(serde_json::to_value(MemberPhase::Ready).unwrap()),
        phase(serde_json::to_value(MemberPhase::Draining).unwrap()),
        phase(serde_json::to_value(MemberPhase::Standby).unwrap()),
        phase(serde_json::to_value(GroupPhase::Degraded).unwrap()),
    ];
    for (word, phase) in PHASE_WORDS.iter().zip(&phases) {
        assert_eq!(Some(*word), phase.as_deref());
    }
    // `Drained` is the agent task's final phase (agent/src/member/state.rs), not a crds
    // type; it is the fifth word.
    assert_eq!(PHASE_WORDS.len(), phases.len() + 1);
}

#[test]
fn the_scanner_finds_names_and_skips_comments_and_sentences() {
    let forbidden = forbidden();
    let line = r#"  let c = cond("hcomm.io/joined", "JoinFailed", "rank 0 refused"); // "RANK_ID""#;
    let found: Vec<&str> = literals(line)
        .into_iter()
        .filter(|l| is_contract(l, &forbidden))
        .collect();
    assert_eq!(found, ["hcomm.io/joined", "JoinFailed"]);
    assert!(literals(r#"  /// "hcomm.io/joined""#).is_empty());
    assert!(!is_contract(
        "hcomm.io/joined=False (JoinFailed): refused",
        &forbidden
    ));
    assert!(is_contract("hcomm.io/group=decode", &forbidden));
    assert!(is_contract(env::RANK_TABLE_FILE, &forbidden));
    assert!(!is_contract("Ready", &forbidden));
    assert!(is_contract(PodReason::JoinFailed.as_str(), &forbidden));
    assert!(is_contract(
        GroupReason::LinksRecovered.as_str(),
        &forbidden
    ));
    assert_eq!(literals(r#"x('"', "a\"b", 'c')"#), [r#"a\"b"#]);
}
