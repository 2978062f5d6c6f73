//! The docs' diagrams are their sources rendered (`hcomm_e2e::diagram`): each
//! `docs/diagrams/NAME.diagram` must have a `NAME.svg` beside it equal to its rendering.
//! After editing a source, `HCOMM_BLESS=1 cargo test --workspace --test diagrams` rewrites
//! the SVGs.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use hcomm_e2e::diagram;
use hcomm_e2e::testbed::pools::workspace_root;

#[test]
fn every_diagram_in_the_docs_is_its_source_rendered() -> Result<()> {
    let dir = workspace_root().join("docs/diagrams");
    let bless = std::env::var_os("HCOMM_BLESS").is_some();
    let mut checked = Vec::new();
    let mut stale = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("read {}", dir.display()))? {
        let source = entry?.path();
        if source.extension().and_then(|e| e.to_str()) != Some("diagram") {
            continue;
        }
        let text = std::fs::read_to_string(&source)?;
        let svg = diagram::render(&text).with_context(|| source.display().to_string())?;
        let target = source.with_extension("svg");
        if bless {
            std::fs::write(&target, &svg)?;
        } else if std::fs::read_to_string(&target).ok().as_deref() != Some(svg.as_str()) {
            stale.push(target.clone());
        }
        checked.push(name(&source));
    }
    ensure!(
        checked.len() >= 2,
        "expected the architecture and lifecycle diagrams in {}, found {checked:?}",
        dir.display()
    );
    ensure!(
        stale.is_empty(),
        "diagrams that differ from their sources' rendering (run with HCOMM_BLESS=1): {stale:?}"
    );
    Ok(())
}

#[test]
fn the_design_doc_shows_each_diagram() -> Result<()> {
    let design = std::fs::read_to_string(workspace_root().join("docs/design.md"))?;
    for d in ["architecture.svg", "member-lifecycle.svg"] {
        ensure!(
            design.contains(&format!("(diagrams/{d})")),
            "docs/design.md does not show diagrams/{d}"
        );
    }
    Ok(())
}

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
