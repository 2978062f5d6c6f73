//! The member timeline as a picture: one row per member, one coloured bar per lifecycle
//! phase (verifying, syncing, joining, ready, draining), on a shared time axis — what the
//! text table of [`super::timeline::render`] says, in the form people read at a glance
//! (issue 19: the scale-out timelines as plots). Written by `cargo demo --timeline-svg`
//! and `cargo scaleout-bench --timeline-svg`; plain SVG, no dependency.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::timeline::MemberMarks;

/// The phases drawn, in order: (name, colour, start, end) of one member.
type Phase = (
    &'static str,
    &'static str,
    Option<Duration>,
    Option<Duration>,
);

const LEFT: f64 = 190.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 50.0;
const ROW_H: f64 = 24.0;
const BAR_H: f64 = 14.0;
const PLOT_W: f64 = 760.0;
const LEGEND_H: f64 = 50.0;

fn phases(m: &MemberMarks) -> [Phase; 5] {
    let ready_end = m.drain_requested.or(m.deleted);
    [
        ("verifying", "#8e44ad", m.created, m.verified),
        ("syncing", "#2980b9", m.verified, m.synced),
        ("joining", "#f39c12", m.synced, m.ready),
        ("ready", "#27ae60", m.ready, ready_end),
        (
            "draining",
            "#c0392b",
            m.drain_requested,
            m.drained.or(m.deleted),
        ),
    ]
}

/// A tick step giving fewer than 10 ticks over `span` seconds.
fn tick_step(span: f64) -> f64 {
    let raw = span / 8.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s < 10.0)
        .unwrap_or(10.0 * mag)
}

/// 0, 0.5, 1, 1.5 — not 1.5000000000000002.
fn seconds(t: f64) -> String {
    let s = format!("{t:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Renders `members` (by Pod name) as an SVG Gantt chart titled `title`. A phase that has
/// begun but not ended runs to the end of the axis (the last mark seen), drawn lighter.
pub fn render_svg(title: &str, members: &BTreeMap<String, MemberMarks>) -> String {
    let end = members
        .values()
        .flat_map(|m| {
            [
                m.created,
                m.verified,
                m.synced,
                m.ready,
                m.drain_requested,
                m.drained,
                m.deleted,
            ]
        })
        .flatten()
        .max()
        .unwrap_or_default()
        .as_secs_f64()
        .max(1.0);
    let x = |t: Duration| LEFT + t.as_secs_f64() / end * PLOT_W;
    let rows = members.len().max(1) as f64;
    let width = LEFT + PLOT_W + RIGHT;
    let height = TOP + rows * ROW_H + 30.0 + LEGEND_H;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"  <text x="{LEFT}" y="24" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let axis_y = TOP + rows * ROW_H;
    let step = tick_step(end);
    for i in 0.. {
        let t = f64::from(i) * step;
        if t > end + 1e-9 {
            break;
        }
        let tx = LEFT + t / end * PLOT_W;
        let _ = writeln!(
            out,
            r##"  <line x1="{tx:.1}" y1="{TOP}" x2="{tx:.1}" y2="{axis_y:.1}" stroke="#e5e8e8"/>"##
        );
        let _ = writeln!(
            out,
            r#"  <text x="{tx:.1}" y="{:.1}" text-anchor="middle">{}s</text>"#,
            axis_y + 16.0,
            seconds(t)
        );
    }
    for (i, (name, m)) in members.iter().enumerate() {
        let y = TOP + i as f64 * ROW_H;
        let _ = writeln!(
            out,
            r#"  <text x="{:.1}" y="{:.1}" text-anchor="end">{} ({})</text>"#,
            LEFT - 8.0,
            y + ROW_H / 2.0 + 4.0,
            escape(name),
            escape(&m.node)
        );
        for (phase, colour, from, to) in phases(m) {
            let Some(from) = from else { continue };
            let (to, open) = match to {
                Some(to) => (to, false),
                None => (Duration::from_secs_f64(end), true),
            };
            let (x0, x1) = (x(from), x(to.max(from)));
            let opacity = if open { 0.45 } else { 1.0 };
            let _ = writeln!(
                out,
                r#"  <rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{BAR_H}" fill="{colour}" fill-opacity="{opacity}"><title>{} {phase}: {:.2}s → {}</title></rect>"#,
                y + (ROW_H - BAR_H) / 2.0,
                (x1 - x0).max(1.0),
                escape(name),
                from.as_secs_f64(),
                if open {
                    "…".to_owned()
                } else {
                    format!("{:.2}s", to.as_secs_f64())
                }
            );
        }
    }
    let _ = writeln!(
        out,
        r##"  <line x1="{LEFT}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}" stroke="#566573"/>"##,
        LEFT + PLOT_W
    );
    let legend_y = axis_y + 40.0;
    for (i, (phase, colour, _, _)) in phases(&MemberMarks::default()).iter().enumerate() {
        let lx = LEFT + i as f64 * 120.0;
        let _ = writeln!(
            out,
            r#"  <rect x="{lx:.1}" y="{:.1}" width="14" height="14" fill="{colour}"/><text x="{:.1}" y="{:.1}">{phase}</text>"#,
            legend_y - 11.0,
            lx + 20.0,
            legend_y
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Option<Duration> {
        Some(Duration::from_secs_f64(secs))
    }

    #[test]
    fn each_member_gets_a_row_and_each_phase_a_bar_at_its_times() {
        let mut members = BTreeMap::new();
        members.insert(
            "decode-2-e3".to_owned(),
            MemberMarks {
                node: "host-1".into(),
                created: s(0.0),
                verified: s(1.0),
                synced: s(3.0),
                ready: s(4.0),
                drain_requested: s(8.0),
                drained: s(10.0),
                ..Default::default()
            },
        );
        members.insert(
            "decode-3-e3".to_owned(),
            MemberMarks {
                node: "host-2".into(),
                created: s(0.5),
                verified: s(2.0),
                ..Default::default()
            },
        );
        let svg = render_svg("scale-out <2→4>", &members);
        assert!(svg.contains("scale-out &lt;2→4&gt;"));
        assert!(svg.contains("decode-2-e3 (host-1)") && svg.contains("decode-3-e3 (host-2)"));
        // The axis ends at the last mark (10 s): syncing of the first member spans 1..3 s.
        let x1 = LEFT + 1.0 / 10.0 * PLOT_W;
        assert!(svg.contains(&format!(r#"<rect x="{x1:.1}""#)), "{svg}");
        assert!(svg.contains("decode-2-e3 syncing: 1.00s → 3.00s"));
        // The second member is still syncing: an open bar to the end of the axis.
        assert!(svg.contains("decode-3-e3 syncing: 2.00s → …"));
        assert!(svg.contains(r#"fill-opacity="0.45""#));
        assert_eq!(svg.matches("<rect").count(), 5 + 2 + 5, "bars and legend");
    }

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(seconds(0.0), "0");
        assert_eq!(seconds(1.5000000000000002), "1.5");
        assert_eq!(seconds(20.0), "20");
        assert_eq!(tick_step(10.0), 2.0);
        assert_eq!(tick_step(60.0), 10.0);
        assert_eq!(tick_step(3.0), 0.5);
    }
}
