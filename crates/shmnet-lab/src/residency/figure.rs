//! The overhead histograms as PNG, like the seed's Figures 2–8: one panel per run, overhead
//! ticks across, buffers up, lines at this machine's 100 % clean and 100 % dirty miss
//! marks, and the overflow bin's count in the panel's title.

use super::Residency;
use crate::plot::{PlotError, check_png_path, draw_err, ensure_font, text_style};
use plotters::prelude::*;
use std::path::Path;

/// Height of one panel, pixels.
const PANEL_HEIGHT: u32 = 260;
/// Width of the figure, pixels.
const WIDTH: u32 = 900;

/// Draws one panel per `(label, run)` into the PNG at `path`, under `title`.
pub fn histograms(
    path: &Path,
    title: &str,
    runs: &[(String, &Residency)],
) -> Result<(), PlotError> {
    if runs.is_empty() {
        return Err(PlotError::Empty);
    }
    check_png_path(path)?;
    ensure_font()?;
    let height = 40 + PANEL_HEIGHT * runs.len() as u32;
    let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let (head, body) = root.split_vertically(40);
    head.draw_text(title, &text_style(22.0), (10, 8))
        .map_err(draw_err)?;
    for (area, (label, r)) in body.split_evenly((runs.len(), 1)).iter().zip(runs) {
        panel(area, label, r)?;
    }
    root.present().map_err(draw_err)
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    label: &str,
    r: &Residency,
) -> Result<(), PlotError> {
    let h = &r.histogram;
    let limit = h.limit();
    let top = h.counts.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.1;
    let caption = format!(
        "{label}: {} buffers, {:.0} % in cache, {:.2} ticks/word{}",
        r.buffers,
        r.summary.fully_cached_pct,
        r.summary.avg_overhead_ticks_per_word,
        if h.overflow > 0 {
            format!(", {} beyond {:.0} ticks", h.overflow, limit)
        } else {
            String::new()
        }
    );
    let mut chart = ChartBuilder::on(area)
        .caption(caption, text_style(15.0))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..limit, 0f64..top)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("overhead ticks per buffer")
        .y_desc("buffers")
        .axis_desc_style(text_style(13.0))
        .label_style(text_style(12.0))
        .disable_mesh()
        .draw()
        .map_err(draw_err)?;
    let bin = h.bin_ticks;
    chart
        .draw_series(
            h.counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, &c)| {
                    let x0 = i as f64 * bin;
                    Rectangle::new(
                        [(x0, 0.0), (x0 + bin, c as f64)],
                        RGBColor(0, 114, 178).filled(),
                    )
                }),
        )
        .map_err(draw_err)?;
    for (x, name, color, y) in [
        (
            r.marks.clean,
            "100 % clean miss",
            RGBColor(0, 158, 115),
            0.97,
        ),
        (
            r.marks.dirty,
            "100 % dirty miss",
            RGBColor(213, 94, 0),
            0.85,
        ),
    ] {
        if x <= limit {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, top)],
                    color.stroke_width(2),
                )))
                .map_err(draw_err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    name,
                    (x, top * y),
                    text_style(12.0).color(&color),
                )))
                .map_err(draw_err)?;
        }
    }
    Ok(())
}
