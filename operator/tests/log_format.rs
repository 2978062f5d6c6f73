//! `hcomm-operator --log-format json` against a real control plane: every line it writes
//! is one JSON object, and the lines a reconcile logs carry the reconcile span with the
//! group's namespace, name and epoch.

mod support;

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use serde_json::Value;
use support::{Cluster, Operator, group_manifest, run, wait_until};

/// The log's lines, each parsed as JSON (an error names the first line that is not).
fn json_lines(op: &Operator) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(&op.log)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("not JSON: {l}")))
        .collect()
}

/// The fields of the span named `name` in a line's span list.
fn span<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line["spans"].as_array()?.iter().find(|s| s["name"] == name)
}

#[test]
fn json_log_lines_parse_and_carry_the_reconcile_span_fields() {
    run(Duration::from_secs(180), || async {
        let cluster = Cluster::start("jsonlog").await?;
        cluster.add_node("n1", "r0", "s0", 4, "10.0.1.1").await?;
        let op = Operator::start_with(
            &cluster,
            "op-json",
            cluster.cp.kubeconfig_path(),
            "default",
            &["--log-format", "json"],
        )?;
        cluster
            .apply_group(group_manifest("pool", 1, 1, 60))
            .await?;
        let line = wait_until("a reconcile log line with group and epoch", || async {
            let lines = json_lines(&op).ok()?;
            lines.into_iter().find(|l| {
                span(l, "reconcile").is_some_and(|s| {
                    s["group"] == "pool" && s["namespace"] == "jsonlog" && s.get("epoch").is_some()
                })
            })
        })
        .await
        .with_context(|| op.log_tail())?;
        ensure!(
            line["level"].is_string() && line["fields"]["message"].is_string(),
            "{line}"
        );
        // Every line so far is JSON, not only the one found.
        let lines = json_lines(&op)?;
        ensure!(lines.len() > 1, "{} lines", lines.len());
        Ok(())
    });
}
