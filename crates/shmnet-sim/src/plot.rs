//! Line plots of a sweep (PNG): ticks per reference and first-level miss rate against the
//! first-level size, one line per associativity — the shape of seed 001's "Varying Cache
//! Size" and "Varying Associativity" figures.
//!
//! Text needs a TrueType font read at run time (plotters' `ab_glyph` feature): the file
//! named by `SHMNET_FONT`, else DejaVu Sans or Liberation Sans at their usual paths — the
//! same rule as `shmnet-lab`'s plots.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::config::ByteSize;
use crate::sweep::{SweepCell, SweepReport};

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No usable TrueType font was found; the message names the paths tried.
    #[error("no usable font: {0}")]
    NoFont(String),
    /// Drawing or writing the PNG failed.
    #[error("drawing the plot failed: {0}")]
    Draw(String),
}

const FONT_ENV: &str = "SHMNET_FONT";
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
const FAMILY: &str = "sans-serif";

fn ensure_font() -> Result<(), PlotError> {
    static FONT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match FONT.get_or_init(load_font) {
        Ok(_) => Ok(()),
        Err(m) => Err(PlotError::NoFont(m.clone())),
    }
}

fn load_font() -> Result<PathBuf, String> {
    const HINT: &str = "install fonts-dejavu-core (apt) or set SHMNET_FONT=/path/to/font.ttf";
    let candidates: Vec<PathBuf> = match std::env::var_os(FONT_ENV) {
        Some(p) => vec![PathBuf::from(p)],
        None => FONT_PATHS.iter().map(PathBuf::from).collect(),
    };
    let mut tried = Vec::new();
    for c in candidates {
        match std::fs::read(&c) {
            Ok(bytes) => {
                let bytes: &'static [u8] = Vec::leak(bytes);
                if register_font(FAMILY, FontStyle::Normal, bytes).is_ok() {
                    return Ok(c);
                }
                tried.push(format!("{}: not a TrueType font", c.display()));
            }
            Err(e) => tried.push(format!("{}: {e}", c.display())),
        }
    }
    Err(format!("{}; {HINT}", tried.join("; ")))
}

/// A value of a sweep cell to plot.
type Metric = fn(&SweepCell) -> f64;

fn draw_err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Draws `r` into the PNG at `path`: two panels side by side.
pub fn sweep_png(r: &SweepReport, path: &Path) -> Result<(), PlotError> {
    ensure_font()?;
    let root = BitMapBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let title = format!("L1 size x associativity on {}", r.machine);
    let root = root
        .titled(&title, (FAMILY, 22).into_font())
        .map_err(draw_err)?;
    let panels = root.split_evenly((1, 2));
    let unit = format!("{} per reference", r.tick_unit);
    let metrics: [(&str, Metric); 2] = [
        (&unit, |c| c.ticks_per_ref),
        ("L1 miss rate (%)", |c| 100.0 * c.l1_miss_rate),
    ];
    let xs: Vec<f64> = r.sizes.iter().map(|&s| (s as f64).log2()).collect();
    let (xmin, xmax) = (
        xs.iter().cloned().fold(f64::INFINITY, f64::min) - 0.3,
        xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max) + 0.3,
    );
    for (area, (label, value)) in panels.iter().zip(metrics) {
        let ymax = r.cells.iter().map(value).fold(0.0, f64::max) * 1.1 + 1e-9;
        let mut chart = ChartBuilder::on(area)
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .caption(label, (FAMILY, 18).into_font())
            .build_cartesian_2d(xmin..xmax, 0.0..ymax)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc("L1 size")
            .y_desc(label)
            .x_labels(r.sizes.len() * 2)
            .x_label_formatter(&|x| {
                let b = 2f64.powf(*x).round() as u64;
                if b.is_power_of_two() && (x - x.round()).abs() < 1e-6 {
                    ByteSize(b).to_string()
                } else {
                    String::new()
                }
            })
            .label_style((FAMILY, 13).into_font())
            .draw()
            .map_err(draw_err)?;
        for (i, &w) in r.ways.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let pts: Vec<(f64, f64)> = r
                .sizes
                .iter()
                .filter_map(|&s| r.cell(s, w).map(|c| ((s as f64).log2(), value(c))))
                .collect();
            chart
                .draw_series(std::iter::once(PathElement::new(
                    pts.clone(),
                    color.stroke_width(2),
                )))
                .map_err(draw_err)?
                .label(format!("{w}-way"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(draw_err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font((FAMILY, 13).into_font())
            .draw()
            .map_err(draw_err)?;
    }
    root.present().map_err(draw_err)?;
    Ok(())
}
