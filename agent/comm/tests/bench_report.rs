//! The collective tables in docs/benchmarks.md are generated from the raw rows recorded under
//! docs/benchmarks/data (not typed by hand): `report.py --check` re-renders them from the run
//! named in `current` and must find the committed document unchanged, and must notice a
//! document that the data does not give.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn report(args: &[&str]) -> std::process::Output {
    let script = repo_root().join("agent/comm/bench/report.py");
    Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs report.py (install python3)")
}

#[test]
fn the_committed_collective_tables_are_what_the_recorded_data_gives() {
    let out = report(&["--check"]);
    assert!(
        out.status.success(),
        "docs/benchmarks.md drifted from docs/benchmarks/data; rerun agent/comm/bench/report.py\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_table_edited_by_hand_is_caught() {
    let doc = std::fs::read_to_string(repo_root().join("docs/benchmarks.md")).unwrap();
    let target = "Met ";
    let at = doc
        .find(target)
        .expect("the targets table states how many checks were met");
    let edited = format!("{}Met 66{}", &doc[..at], &doc[at + target.len()..]);
    let dir = std::env::temp_dir().join(format!("hcomm-bench-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("benchmarks.md");
    std::fs::write(&path, edited).unwrap();
    let out = report(&["--check", "--out", path.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        out.status.code(),
        Some(1),
        "an edited table must fail the check\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("+Met "));
}
