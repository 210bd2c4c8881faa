//! The SVG form of a line chart, written by hand: no dependency, text that diffs, and
//! labels that need no font on the machine that writes it.

use super::{bounds, label, Scale, Series, COLORS, MARKERS_UP_TO};

fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    (0..=4).map(|k| lo + (hi - lo) * k as f64 / 4.0).collect()
}

/// Escapes the characters XML gives meaning to (series names come from user flags).
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
}

pub(super) fn render(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_scale: Scale,
) -> String {
    let (w, h, m) = (640.0, 400.0, 60.0);
    let ((x0, x1), (y0, y1)) = bounds(series);
    let x = |v: f64| m + (w - 2.0 * m) * (v - x0) / (x1 - x0);
    let y = |v: f64| h - m - (h - 2.0 * m) * (v - y0) / (y1 - y0);
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n<text x='{}' y='20' text-anchor='middle' font-size='14'>{}</text>\n",
        w / 2.0,
        esc(title)
    );
    s += &format!("<line x1='{m}' y1='{b}' x2='{r}' y2='{b}' stroke='black'/><line x1='{m}' y1='{m}' x2='{m}' y2='{b}' stroke='black'/>\n", b = h - m, r = w - m);
    s += &format!(
        "<text x='{}' y='{}' text-anchor='middle'>{}</text>\n",
        w / 2.0,
        h - 15.0,
        esc(x_label)
    );
    s += &format!(
        "<text x='15' y='{c}' transform='rotate(-90 15 {c})' text-anchor='middle'>{}</text>\n",
        esc(y_label),
        c = h / 2.0
    );
    for t in ticks(y0, y1) {
        s += &format!(
            "<text x='{}' y='{}' text-anchor='end'>{}</text>\n",
            m - 5.0,
            y(t) + 4.0,
            label(t, (y1 - y0) / 4.0)
        );
    }
    for t in ticks(x0, x1) {
        s += &format!(
            "<text x='{}' y='{}' text-anchor='middle'>{}</text>\n",
            x(t),
            h - m + 16.0,
            x_scale.label(t, (x1 - x0) / 4.0)
        );
    }
    for (i, se) in series.iter().enumerate() {
        let (r, g, b) = COLORS[i % COLORS.len()];
        let c = format!("#{r:02x}{g:02x}{b:02x}");
        let pts: Vec<(f64, f64)> = se
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(a, b)| (x(a), y(b)))
            .collect();
        if pts.len() <= MARKERS_UP_TO {
            for (a, b) in &pts {
                s += &format!("<circle cx='{a:.1}' cy='{b:.1}' r='3' fill='{c}'/>\n");
            }
        }
        let d: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
        s += &format!(
            "<polyline fill='none' stroke='{c}' stroke-width='2' points='{}'/>\n",
            d.join(" ")
        );
        s += &format!(
            "<text x='{}' y='{}' fill='{c}'>{}</text>\n",
            w - m - 160.0,
            m + 16.0 * i as f64,
            esc(&se.name)
        );
    }
    s += "</svg>\n";
    s
}
