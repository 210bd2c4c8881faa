//! The PNG form of a line chart, drawn with plotters' bitmap backend into memory and
//! encoded with `image`, so the file is written atomically like every other run file.

use super::{bounds, label, Scale, Series, COLORS, MARKERS_UP_TO};
use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;

/// Width and height in pixels.
pub(crate) const SIZE: (u32, u32) = (800, 500);

/// The chart as PNG bytes; `family` is the registered font family for its text, `None`
/// to draw lines and axes only.
pub(crate) fn render(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_scale: Scale,
    family: Option<&str>,
) -> Result<Vec<u8>> {
    let (w, h) = SIZE;
    let mut buf = vec![0u8; (w * h * 3) as usize];
    draw(&mut buf, title, x_label, y_label, series, x_scale, family).map_err(|e| anyhow!("{e}"))?;
    let img = image::RgbImage::from_raw(w, h, buf).context("chart buffer size")?;
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .context("encoding PNG")?;
    Ok(out.into_inner())
}

fn draw(
    buf: &mut [u8],
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_scale: Scale,
    family: Option<&str>,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::with_buffer(buf, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let ((x0, x1), (y0, y1)) = bounds(series);
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if let Some(f) = family {
        builder
            .caption(title, (f, 22))
            .x_label_area_size(50)
            .y_label_area_size(75);
    } else {
        builder.x_label_area_size(2).y_label_area_size(2);
    }
    let mut chart = builder.build_cartesian_2d(x0..x1, y0..y1)?;
    // plotters puts about ten ticks on an axis; the labels' precision follows that step.
    let (x_step, y_step) = ((x1 - x0) / 10.0, (y1 - y0) / 10.0);
    let x_fmt = |v: &f64| x_scale.label(*v, x_step);
    let y_fmt = |v: &f64| label(*v, y_step);
    match family {
        Some(f) => chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style((f, 14))
            .axis_desc_style((f, 16))
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .light_line_style(WHITE.mix(0.0))
            .draw()?,
        // No tick labels means no text: the mesh draws its axes only.
        None => chart.configure_mesh().x_labels(0).y_labels(0).draw()?,
    }
    for (i, s) in series.iter().enumerate() {
        let (r, g, b) = COLORS[i % COLORS.len()];
        let color = RGBColor(r, g, b);
        let pts = s
            .points
            .iter()
            .copied()
            .filter(|p| p.0.is_finite() && p.1.is_finite());
        let pts: Vec<(f64, f64)> = pts.collect();
        if pts.len() <= MARKERS_UP_TO {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
        let drawn = chart.draw_series(LineSeries::new(pts, color.stroke_width(2)))?;
        if family.is_some() {
            drawn.label(s.name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
    }
    if let Some(f) = family {
        chart
            .configure_series_labels()
            .label_font((f, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(family: Option<&str>) -> image::RgbImage {
        let series = vec![
            Series {
                name: "dense".into(),
                points: (0..20)
                    .map(|i| (i as f64, 2.0 / (1.0 + i as f64)))
                    .collect(),
            },
            Series {
                name: "dgc <0.1%>".into(),
                points: vec![(0.0, 1.5), (f64::NAN, 1.0), (19.0, 0.4)],
            },
        ];
        let bytes =
            render("loss", "epoch", "loss", &series, Scale::Linear, family).expect("render");
        image::load_from_memory_with_format(&bytes, image::ImageFormat::Png)
            .expect("decodes as PNG")
            .to_rgb8()
    }

    fn count(img: &image::RgbImage, c: (u8, u8, u8)) -> usize {
        img.pixels().filter(|p| p.0 == [c.0, c.1, c.2]).count()
    }

    #[test]
    fn lines_and_axes_without_a_font() {
        let img = chart(None);
        assert_eq!(img.dimensions(), SIZE);
        // Both series' colours are drawn (a 2-pixel line across most of the width),
        // and the frame is black.
        assert!(count(&img, COLORS[0]) > 500, "{}", count(&img, COLORS[0]));
        assert!(count(&img, COLORS[1]) > 500, "{}", count(&img, COLORS[1]));
        assert!(count(&img, (0, 0, 0)) > 400);
    }

    #[test]
    fn text_with_a_font() {
        // CI installs fonts-dejavu-core and sets REQUIRE_SYSTEM_DATA=1: there a missing
        // font is a failure; elsewhere the text-free path above is what runs.
        let Some(f) = super::super::font::family() else {
            assert!(
                std::env::var_os("REQUIRE_SYSTEM_DATA").is_none(),
                "no font found for the PNG charts' text"
            );
            eprintln!("skipped: no TrueType font on this machine");
            return;
        };
        let with = chart(Some(f));
        let without = chart(None);
        // Text adds dark anti-aliased pixels (title, ticks, legend) the text-free chart
        // lacks.
        let dark = |img: &image::RgbImage| {
            img.pixels()
                .filter(|p| p.0.iter().all(|&v| v < 128))
                .count()
        };
        assert!(
            dark(&with) > dark(&without) + 1000,
            "{} vs {}",
            dark(&with),
            dark(&without)
        );
        assert!(count(&with, COLORS[1]) > 500);
    }
}
