//! The benchmark's section of the output file (e.g. docs/benchmarks.md): the text between
//! two HTML-comment markers is replaced, nothing else in the file is touched.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

/// First line of the generated section.
pub const BEGIN: &str = "<!-- scaleout:begin -->";
/// Last line of the generated section.
pub const END: &str = "<!-- scaleout:end -->";

/// Replaces the text between the markers (inclusive) in the file at `path` with
/// `section`, or appends it under a heading when the markers are absent (see [`splice`]).
/// The file is replaced whole (written beside it, then renamed).
pub fn write(path: &Path, section: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let new = splice(&text, section);
    let tmp = path.with_extension("md.tmp");
    std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(new.as_bytes()))
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    Ok(())
}

/// `text` with the section between the markers replaced, or the section appended under
/// a heading (pure).
pub fn splice(text: &str, section: &str) -> String {
    match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if b < e => {
            let end = e + END.len();
            let end = if text[end..].starts_with('\n') {
                end + 1
            } else {
                end
            };
            format!("{}{}{}", &text[..b], section, &text[end..])
        }
        _ => {
            let mut t = text.to_owned();
            if !t.is_empty() && !t.ends_with('\n') {
                t.push('\n');
            }
            t.push_str("\n## Scale-out benchmark (issue #6)\n\n");
            t.push_str(section);
            t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(body: &str) -> String {
        format!("{BEGIN}\n{body}\n{END}\n")
    }

    #[test]
    fn the_section_between_the_markers_is_replaced_and_nothing_else() {
        let text = format!("# Benchmarks\n\nbefore\n{}after\n", section("old"));
        assert_eq!(
            splice(&text, &section("new")),
            format!("# Benchmarks\n\nbefore\n{}after\n", section("new"))
        );
    }

    #[test]
    fn without_markers_the_section_is_appended_under_a_heading() {
        assert_eq!(
            splice("# Benchmarks", &section("new")),
            format!(
                "# Benchmarks\n\n## Scale-out benchmark (issue #6)\n\n{}",
                section("new")
            )
        );
        assert_eq!(
            splice("", "S\n"),
            "\n## Scale-out benchmark (issue #6)\n\nS\n"
        );
        // An end marker before the begin marker is no section.
        let odd = format!("{END}\n{BEGIN}\n");
        assert!(splice(&odd, "S\n").starts_with(&odd));
    }

    #[test]
    fn the_file_is_rewritten_in_place() {
        let dir = std::env::temp_dir().join(format!("scaleout-section-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("benchmarks.md");
        std::fs::write(&path, format!("top\n{}bottom\n", section("old"))).unwrap();
        write(&path, &section("new")).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("top\n{}bottom\n", section("new"))
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
