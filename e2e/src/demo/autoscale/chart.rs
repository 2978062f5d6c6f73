//! The autoscaled demo's chart: requests in flight above, members below, one time axis.

use std::fmt::Write as _;

use super::Sample;

/// The samples as an SVG chart: requests in flight (offered, and the metric KEDA reads)
/// above, members (the HPA's desired count, the group's replicas and its Ready members)
/// below, on one time axis.
pub fn render_svg(title: &str, samples: &[Sample]) -> String {
    const W: f64 = 900.0;
    const LEFT: f64 = 60.0;
    const RIGHT: f64 = 160.0;
    const PANEL: f64 = 170.0;
    const TOP: f64 = 40.0;
    const GAP: f64 = 50.0;
    let end = samples.last().map_or(1.0, |s| s.t.max(1.0));
    let x = |t: f64| LEFT + (W - LEFT - RIGHT) * t / end;
    let mut svg = String::new();
    let height = TOP + 2.0 * PANEL + GAP + 40.0;
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="20" font-size="14">{}</text>"#,
        escape(title)
    );
    type Series<'a> = (&'a str, &'a str, Box<dyn Fn(&Sample) -> Option<f64>>);
    let panels: [(&str, f64, Vec<Series<'_>>); 2] = [
        (
            "requests in flight",
            TOP,
            vec![
                (
                    "offered",
                    "#999999",
                    Box::new(|s: &Sample| Some(f64::from(s.offered))),
                ),
                (
                    "metric (Prometheus)",
                    "#d62728",
                    Box::new(|s: &Sample| s.metric),
                ),
            ],
        ),
        (
            "members",
            TOP + PANEL + GAP,
            vec![
                (
                    "HPA desired",
                    "#1f77b4",
                    Box::new(|s: &Sample| s.desired.map(f64::from)),
                ),
                (
                    "spec.replicas",
                    "#9467bd",
                    Box::new(|s: &Sample| s.replicas.map(f64::from)),
                ),
                (
                    "Ready",
                    "#2ca02c",
                    Box::new(|s: &Sample| s.ready.map(f64::from)),
                ),
            ],
        ),
    ];
    for (label, top, series) in &panels {
        let max = samples
            .iter()
            .flat_map(|s| series.iter().filter_map(|(_, _, f)| f(s)))
            .fold(1.0_f64, f64::max)
            .ceil();
        let y = |v: f64| top + PANEL - PANEL * v / max;
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{top}" width="{}" height="{PANEL}" fill="none" stroke="#cccccc"/><text x="{LEFT}" y="{}">{label}</text><text x="{}" y="{}" text-anchor="end">{max}</text><text x="{}" y="{}" text-anchor="end">0</text>"##,
            W - LEFT - RIGHT,
            top - 6.0,
            LEFT - 6.0,
            top + 10.0,
            LEFT - 6.0,
            top + PANEL
        );
        for (i, (name, colour, f)) in series.iter().enumerate() {
            // A step line: a value holds until the next sample.
            let mut d = String::new();
            let mut prev: Option<f64> = None;
            for s in samples {
                match (f(s), prev) {
                    (Some(v), None) => {
                        let _ = write!(d, "M{:.1},{:.1} ", x(s.t), y(v));
                    }
                    (Some(v), Some(_)) => {
                        let _ = write!(d, "H{:.1} V{:.1} ", x(s.t), y(v));
                    }
                    (None, _) => {}
                }
                prev = f(s).or(prev);
            }
            let _ = writeln!(
                svg,
                r#"<path d="{d}" fill="none" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}" fill="{colour}">{name}</text>"#,
                W - RIGHT + 10.0,
                top + 16.0 + 16.0 * i as f64
            );
        }
    }
    let axis = TOP + 2.0 * PANEL + GAP;
    let step = (end / 10.0).ceil().max(1.0);
    let mut t = 0.0;
    while t <= end {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{t:.0}</text>"#,
            x(t),
            axis + 16.0
        );
        t += step;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">seconds</text></svg>"#,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        axis + 34.0
    );
    svg
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::autoscale::tests::sample;

    #[test]
    fn the_chart_draws_each_series_with_its_legend() {
        let samples = [sample(0.0, 4, 2, 2), sample(3.0, 16, 4, 4)];
        let svg = render_svg("t <1>", &samples);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for name in [
            "offered",
            "metric (Prometheus)",
            "HPA desired",
            "spec.replicas",
            "Ready",
        ] {
            assert!(svg.contains(&format!(">{name}</text>")), "{name}");
        }
        assert_eq!(svg.matches("<path").count(), 5);
        assert!(svg.contains("t &lt;1&gt;"));
    }
}
