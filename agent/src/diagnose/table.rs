//! Rendering the findings as a plain-text table (symptom, likely cause, what was checked,
//! result) followed by the log matches.

use super::checks::Finding;
use super::facts::LogMatch;

fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for word in s.split_whitespace() {
        let mut word = word.to_owned();
        while word.chars().count() > width {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            let head: String = word.chars().take(width).collect();
            word = word.chars().skip(width).collect();
            out.push(head);
        }
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > width {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(&word);
    }
    if !cur.is_empty() || out.is_empty() {
        out.push(cur);
    }
    out
}

/// One `id<TAB>RESULT<TAB>detail` line per finding.
pub fn render_tsv(rows: &[Finding]) -> String {
    rows.iter()
        .map(|r| {
            format!(
                "{}\t{}\t{}\n",
                r.id,
                r.outcome.as_str(),
                r.detail.replace(['\t', '\n'], " ")
            )
        })
        .collect()
}

/// The table as text.
pub fn render(rows: &[Finding], logs: &[LogMatch]) -> String {
    const W: [usize; 4] = [22, 30, 34, 60];
    let header = ["SYMPTOM", "LIKELY CAUSE", "CHECKED", "RESULT"];
    let mut out = String::new();
    let line = |cells: [Vec<String>; 4], out: &mut String| {
        let n = cells.iter().map(Vec::len).max().unwrap_or(1);
        for i in 0..n {
            let mut l = String::new();
            for (c, w) in cells.iter().zip(W) {
                let text = c.get(i).map_or("", String::as_str);
                l.push_str(&format!("{text:<w$}  "));
            }
            out.push_str(l.trim_end());
            out.push('\n');
        }
    };
    line(header.map(|h| vec![h.to_owned()]), &mut out);
    for r in rows {
        let result = format!("{} {}", r.outcome.as_str(), r.detail);
        line(
            [
                wrap(r.symptom, W[0]),
                wrap(r.cause, W[1]),
                wrap(&r.checked, W[2]),
                wrap(&result, W[3]),
            ],
            &mut out,
        );
    }
    if !logs.is_empty() {
        out.push_str("\nLOG MATCHES\n");
        for m in logs {
            out.push_str(&format!("{}:{} [{}]\n", m.file, m.line_no, m.keyword));
            for c in &m.context {
                out.push_str(&format!("    {c}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::checks::Outcome;

    #[test]
    fn rows_wrap_into_aligned_columns_and_logs_follow() {
        let rows = vec![Finding {
            id: "x",
            symptom: "handshake timeout on all nodes",
            cause: "wrong NIC",
            checked: "socketIfname".into(),
            outcome: Outcome::Fail,
            detail: "the data NIC resolves to mgmt0".into(),
        }];
        let logs = vec![LogMatch {
            file: "f".into(),
            line_no: 3,
            keyword: "timeout",
            context: vec!["a timeout".into()],
        }];
        let t = render(&rows, &logs);
        assert!(t.starts_with("SYMPTOM"));
        assert!(t.contains("FAIL the data NIC resolves to mgmt0"));
        assert!(t.contains("f:3 [timeout]\n    a timeout"));
        assert!(
            t.lines()
                .nth(1)
                .unwrap()
                .starts_with("handshake timeout on")
        );
    }

    #[test]
    fn tsv_has_one_line_per_check() {
        let rows = vec![Finding {
            id: "x",
            symptom: "s",
            cause: "c",
            checked: "k".into(),
            outcome: Outcome::Warn,
            detail: "a\tb".into(),
        }];
        assert_eq!(render_tsv(&rows), "x\tWARN\ta b\n");
    }

    #[test]
    fn long_words_are_split() {
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), [""]);
    }
}
