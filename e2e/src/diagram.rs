//! The docs' diagrams, rendered to SVG from small sources checked in beside them
//! (`docs/diagrams/*.diagram`), so a picture is reviewed and changed as text and can never
//! drift from its source (`e2e/tests/diagrams.rs` re-renders each and compares).
//!
//! The source names boxes on a grid and the arrows between them; placement is the
//! author's (a handful of boxes needs no layout engine, and a fixed grid keeps the output
//! stable). One statement per line, `#` starts a comment:
//!
//! ```text
//! title The member lifecycle
//! box verifying 1 0 "Verifying\nNIC, links, NPUs"
//! box syncing 2 0 "Syncing"
//! arrow verifying syncing "verified"
//! frame 0 0 3 1 "node agent"      # a dashed frame around columns 0..3, rows 0..1
//! ```
//!
//! `box ID COL ROW "LABEL"` (optionally followed by `accent` for a highlighted box),
//! `arrow FROM TO ["LABEL"]` (optionally `dashed`), `frame COL ROW COLS ROWS "LABEL"`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A source that cannot be rendered: which line, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {message}")]
pub struct DiagramError {
    pub line: usize,
    pub message: String,
}

const CELL_W: f64 = 290.0;
const CELL_H: f64 = 120.0;
const BOX_W: f64 = 200.0;
const BOX_H: f64 = 64.0;
const MARGIN: f64 = 30.0;
const TITLE_H: f64 = 40.0;
const LINE_H: f64 = 15.0;

#[derive(Debug)]
struct Box_ {
    col: f64,
    row: f64,
    label: String,
    accent: bool,
}

#[derive(Debug)]
struct Arrow {
    from: String,
    to: String,
    label: Option<String>,
    dashed: bool,
}

#[derive(Debug)]
struct Frame {
    col: f64,
    row: f64,
    cols: f64,
    rows: f64,
    label: String,
}

#[derive(Debug, Default)]
struct Diagram {
    title: String,
    boxes: BTreeMap<String, Box_>,
    order: Vec<String>,
    arrows: Vec<Arrow>,
    frames: Vec<Frame>,
}

/// Renders a diagram source to a standalone SVG document.
pub fn render(source: &str) -> Result<String, DiagramError> {
    let d = parse(source)?;
    Ok(draw(&d))
}

/// Splits a line into words, a `"quoted string"` being one word (with `\n` for a line break).
fn words(line: &str, n: usize) -> Result<Vec<String>, DiagramError> {
    let mut out = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if rest.starts_with('#') {
            break;
        }
        if let Some(q) = rest.strip_prefix('"') {
            let end = q.find('"').ok_or_else(|| DiagramError {
                line: n,
                message: "unterminated quoted label".into(),
            })?;
            out.push(q[..end].replace("\\n", "\n"));
            rest = q[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            out.push(rest[..end].to_owned());
            rest = rest[end..].trim_start();
        }
    }
    Ok(out)
}

fn parse(source: &str) -> Result<Diagram, DiagramError> {
    let mut d = Diagram::default();
    for (i, line) in source.lines().enumerate() {
        let n = i + 1;
        let err = |message: String| DiagramError { line: n, message };
        let w = words(line, n)?;
        let num = |s: &str| -> Result<f64, DiagramError> {
            s.parse::<f64>()
                .map_err(|_| err(format!("{s:?} is not a number")))
        };
        match w.first().map(String::as_str) {
            None => {}
            Some("title") => d.title = w[1..].join(" "),
            Some("box") => {
                let [_, id, col, row, label, rest @ ..] = w.as_slice() else {
                    return Err(err("box needs: box ID COL ROW \"LABEL\" [accent]".into()));
                };
                if d.boxes.contains_key(id) {
                    return Err(err(format!("box {id} declared twice")));
                }
                let b = Box_ {
                    col: num(col)?,
                    row: num(row)?,
                    label: label.clone(),
                    accent: rest.iter().any(|r| r == "accent"),
                };
                d.boxes.insert(id.clone(), b);
                d.order.push(id.clone());
            }
            Some("arrow") => {
                let [_, from, to, rest @ ..] = w.as_slice() else {
                    return Err(err("arrow needs: arrow FROM TO [\"LABEL\"] [dashed]".into()));
                };
                for end in [from, to] {
                    if !d.boxes.contains_key(end) {
                        return Err(err(format!("arrow to an undeclared box {end}")));
                    }
                }
                let dashed = rest.iter().any(|r| r == "dashed");
                let label = rest.iter().find(|r| *r != "dashed").cloned();
                d.arrows.push(Arrow {
                    from: from.clone(),
                    to: to.clone(),
                    label,
                    dashed,
                });
            }
            Some("frame") => {
                let [_, col, row, cols, rows, label] = w.as_slice() else {
                    return Err(err("frame needs: frame COL ROW COLS ROWS \"LABEL\"".into()));
                };
                d.frames.push(Frame {
                    col: num(col)?,
                    row: num(row)?,
                    cols: num(cols)?,
                    rows: num(rows)?,
                    label: label.clone(),
                });
            }
            Some(other) => return Err(err(format!("unknown statement {other:?}"))),
        }
    }
    if d.boxes.is_empty() {
        return Err(DiagramError {
            line: 0,
            message: "no boxes".into(),
        });
    }
    Ok(d)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The centre of grid cell (col, row).
fn centre(col: f64, row: f64) -> (f64, f64) {
    (
        MARGIN + col * CELL_W + CELL_W / 2.0,
        TITLE_H + MARGIN + row * CELL_H + CELL_H / 2.0,
    )
}

/// Where the segment from a box's centre towards (tx, ty) leaves the box's border.
fn border(cx: f64, cy: f64, tx: f64, ty: f64) -> (f64, f64) {
    let (dx, dy) = (tx - cx, ty - cy);
    if dx == 0.0 && dy == 0.0 {
        return (cx, cy);
    }
    let sx = if dx == 0.0 {
        f64::INFINITY
    } else {
        (BOX_W / 2.0) / dx.abs()
    };
    let sy = if dy == 0.0 {
        f64::INFINITY
    } else {
        (BOX_H / 2.0) / dy.abs()
    };
    let s = sx.min(sy);
    (cx + dx * s, cy + dy * s)
}

fn text_lines(out: &mut String, x: f64, y: f64, label: &str, class: &str) {
    let lines: Vec<&str> = label.lines().collect();
    let top = y - (lines.len() as f64 - 1.0) * LINE_H / 2.0;
    for (i, l) in lines.iter().enumerate() {
        let _ = writeln!(
            out,
            r#"  <text class="{class}" x="{x:.1}" y="{:.1}">{}</text>"#,
            top + i as f64 * LINE_H,
            escape(l)
        );
    }
}

fn draw(d: &Diagram) -> String {
    let max_col = d.boxes.values().map(|b| b.col).fold(0.0, f64::max);
    let max_row = d.boxes.values().map(|b| b.row).fold(0.0, f64::max);
    let width = 2.0 * MARGIN + (max_col + 1.0) * CELL_W;
    let height = TITLE_H + 2.0 * MARGIN + (max_row + 1.0) * CELL_H;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif">"#
    );
    out.push_str(concat!(
        "  <style>\n",
        "    .box { fill: #f5f7fa; stroke: #34495e; stroke-width: 1.5; }\n",
        "    .accent { fill: #e8f4ea; stroke: #2e7d32; stroke-width: 2; }\n",
        "    .frame { fill: none; stroke: #7f8c8d; stroke-dasharray: 6 4; }\n",
        "    .edge { stroke: #34495e; stroke-width: 1.4; fill: none; }\n",
        "    .dashed { stroke-dasharray: 5 4; }\n",
        "    .label { font-size: 13px; text-anchor: middle; dominant-baseline: middle; fill: #1c2833; }\n",
        "    .edge-label { font-size: 11px; text-anchor: middle; dominant-baseline: middle; fill: #34495e; paint-order: stroke; stroke: #ffffff; stroke-width: 4px; }\n",
        "    .frame-label { font-size: 12px; fill: #566573; }\n",
        "    .title { font-size: 17px; font-weight: bold; fill: #1c2833; }\n",
        "  </style>\n",
        "  <defs><marker id=\"head\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"8\" markerHeight=\"8\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#34495e\"/></marker></defs>\n",
    ));
    let _ = writeln!(
        out,
        r#"  <text class="title" x="{MARGIN}" y="{:.1}">{}</text>"#,
        MARGIN,
        escape(&d.title)
    );
    for f in &d.frames {
        let x = MARGIN + f.col * CELL_W + 6.0;
        let y = TITLE_H + MARGIN + f.row * CELL_H + 2.0;
        let _ = writeln!(
            out,
            r#"  <rect class="frame" x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" rx="10"/>"#,
            f.cols * CELL_W - 12.0,
            f.rows * CELL_H - 4.0
        );
        let _ = writeln!(
            out,
            r#"  <text class="frame-label" x="{:.1}" y="{:.1}">{}</text>"#,
            x + 8.0,
            y + 14.0,
            escape(&f.label)
        );
    }
    // Edge labels go on top of everything (with a white halo), so a box never hides one.
    let mut labels = String::new();
    for a in &d.arrows {
        let (from, to) = (&d.boxes[&a.from], &d.boxes[&a.to]);
        let (fx, fy) = centre(from.col, from.row);
        let (tx, ty) = centre(to.col, to.row);
        let (x1, y1) = border(fx, fy, tx, ty);
        let (x2, y2) = border(tx, ty, fx, fy);
        let class = if a.dashed { "edge dashed" } else { "edge" };
        let _ = writeln!(
            out,
            r#"  <line class="{class}" x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" marker-end="url(#head)"/>"#
        );
        if let Some(label) = &a.label {
            // Beside the line's middle, off the line so it stays readable.
            let (mx, my) = ((x1 + x2) / 2.0, (y1 + y2) / 2.0);
            let vertical = (x2 - x1).abs() < (y2 - y1).abs();
            let (lx, ly) = if vertical {
                (mx + 8.0, my)
            } else {
                (mx, my - 10.0)
            };
            let anchor = if vertical {
                " style=\"text-anchor: start\""
            } else {
                ""
            };
            for (i, l) in label.lines().enumerate() {
                let _ = writeln!(
                    labels,
                    r#"  <text class="edge-label" x="{lx:.1}" y="{:.1}"{anchor}>{}</text>"#,
                    ly + i as f64 * 13.0,
                    escape(l)
                );
            }
        }
    }
    for id in &d.order {
        let b = &d.boxes[id];
        let (cx, cy) = centre(b.col, b.row);
        let class = if b.accent { "box accent" } else { "box" };
        let _ = writeln!(
            out,
            r#"  <rect class="{class}" x="{:.1}" y="{:.1}" width="{BOX_W}" height="{BOX_H}" rx="8"/>"#,
            cx - BOX_W / 2.0,
            cy - BOX_H / 2.0
        );
        text_lines(&mut out, cx, cy, &b.label, "label");
    }
    out.push_str(&labels);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_arrows_and_frames_render_at_their_cells() {
        let svg = render(
            "title T\nbox a 0 0 \"A\\nsecond\"\nbox b 1 0 \"B & C\" accent\narrow a b \"x\"\nframe 0 0 2 1 \"f\"\n",
        )
        .unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains(">A</text>") && svg.contains(">second</text>"));
        assert!(svg.contains("B &amp; C"));
        assert!(svg.contains("box accent"));
        assert!(svg.contains("marker-end"));
        assert!(svg.contains(r#"class="frame""#));
        // The arrow leaves a's right border and ends at b's left border.
        let a_right = MARGIN + CELL_W / 2.0 + BOX_W / 2.0;
        assert!(svg.contains(&format!(r#"x1="{a_right:.1}""#)), "{svg}");
    }

    #[test]
    fn bad_sources_name_the_line() {
        assert_eq!(
            render("box a 0 0 \"A\"\narrow a b").unwrap_err(),
            DiagramError {
                line: 2,
                message: "arrow to an undeclared box b".into()
            }
        );
        assert_eq!(render("box a x 0 \"A\"").unwrap_err().line, 1);
        assert_eq!(
            render("circle a").unwrap_err().message,
            "unknown statement \"circle\""
        );
        assert!(render("box a 0 0 \"A").is_err());
        assert!(render("# nothing\n").is_err());
    }
}
