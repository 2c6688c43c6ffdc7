//! Grouped bar charts normalised to the fastest bar of each group, written as PNG.
//!
//! The figures look like the "TTCP Transmit" / "TTCP Receive" bar charts of the 1992 paper:
//! one panel per experiment, one group of bars per x position (e.g. a message size), one bar
//! per series (e.g. "kernel", "server"). Every bar's height is its value divided by the largest
//! value of its group, so the fastest bar of each group reaches 1.0; the raw value is written
//! above the bar.
//!
//! Text is rendered with a TrueType font read at run time (plotters' `ab_glyph` feature), so
//! nothing here needs fontconfig or freetype. See
//! [`normalized_bars`](crate::plot::normalized_bars) for where the font is looked for.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, FontTransform, register_font};

/// One bar: a series name (e.g. "kernel", "server") and its raw value.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// The series the bar belongs to; it picks the bar's colour and legend entry.
    pub series: String,
    /// The raw value (e.g. messages per second); written above the bar.
    pub value: f64,
}

/// Bars that share an x position group (e.g. one message size, label "10 B").
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The label under the group on the x axis.
    pub label: String,
    /// The group's bars, left to right.
    pub bars: Vec<Bar>,
}

/// One chart of the figure (e.g. "ttcp transmit").
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The title above the chart.
    pub title: String,
    /// The groups, left to right.
    pub groups: Vec<Group>,
}

/// Why a figure could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No usable TrueType font was found; the message names the paths tried.
    #[error("no usable font: {0}")]
    NoFont(String),
    /// There was nothing to draw: no panels, or no bars in any panel.
    #[error("nothing to plot: no panels or no bars")]
    Empty,
    /// Drawing or writing the PNG failed.
    #[error("drawing the plot failed: {0}")]
    Draw(String),
}

/// The environment variable that names a `.ttf` to use instead of the usual system paths.
const FONT_ENV: &str = "SHMNET_FONT";
/// Where a sans-serif TrueType font usually lives (Debian/Ubuntu, Arch, Fedora, Liberation).
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
/// The family the font is registered under; plotters uses it for axis text by default.
const FONT_FAMILY: &str = "sans-serif";

/// Width of one panel, in pixels.
const PANEL_WIDTH: u32 = 600;
/// Height of the whole image, in pixels.
const HEIGHT: u32 = 450;
/// Top of the y axis: room above the 1.0 bars for their value labels.
const Y_MAX: f64 = 1.15;
/// Fraction of a group's x unit covered by its bars (the rest separates groups).
const GROUP_WIDTH: f64 = 0.8;
/// Fraction of a bar's slot that is filled (the rest separates bars in a group).
const BAR_FILL: f64 = 0.85;

/// Figure title font size.
const TITLE_SIZE: f64 = 24.0;
/// Panel title font size.
const PANEL_TITLE_SIZE: f64 = 20.0;
/// Legend font size.
const LEGEND_SIZE: f64 = 16.0;
/// Tick label font size.
const TICK_SIZE: f64 = 14.0;
/// Axis description font size.
const AXIS_DESC_SIZE: f64 = 14.0;
/// Value label font sizes to try, largest first, before turning labels vertical.
const VALUE_SIZES: [f64; 2] = [12.0, 10.0];
/// Value label font size when the labels are turned vertical.
const VALUE_SIZE_VERTICAL: f64 = 10.0;
/// Height of the legend row, in pixels.
const LEGEND_HEIGHT: u32 = 30;

/// Colour-blind-safe series colours (Okabe & Ito), in order of first appearance.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(110, 110, 110),
];

/// The image area everything is drawn on.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Draws `panels` side by side into a PNG at `path`; each bar's height is its value divided by
/// the largest value in its group (so the fastest is 1.0), and the raw value is written above
/// each bar using `fmt_value`. `y_label` names what was normalized (e.g. "messages/s, relative
/// to the fastest"). A legend maps colors to series; the same series always has the same color
/// across panels and groups (series order = first appearance). Zero/NaN/negative values draw
/// no bar but keep their slot. Groups whose values are all zero draw no bars.
///
/// Finite values that draw no bar (zero, negative) still get their value label at the
/// baseline, so "measured zero" differs from "not measured" (NaN, infinite: no label).
///
/// The font is the file named by `SHMNET_FONT`, else the first of the usual DejaVu Sans /
/// Liberation Sans paths that exists; it is read once per process.
///
/// # Errors
///
/// [`PlotError::Empty`] if there are no panels or no bars at all, [`PlotError::NoFont`] if no
/// font can be loaded, [`PlotError::Draw`] if `path` does not end in `.png` or drawing or
/// writing the file fails.
pub fn normalized_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    panels: &[Panel],
    fmt_value: &dyn Fn(f64) -> String,
) -> Result<(), PlotError> {
    bars(path, title, y_label, panels, fmt_value, Scale::Group)
}

/// What a bar's height is a fraction of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// The largest bar of its group ([`normalized_bars`]: which bar of a group wins).
    Group,
    /// The largest bar of its panel (how groups compare, e.g. miss ratios by configuration).
    Panel,
}

/// [`normalized_bars`] with the heights scaled as `scale` says.
pub fn bars(
    path: &Path,
    title: &str,
    y_label: &str,
    panels: &[Panel],
    fmt_value: &dyn Fn(f64) -> String,
    scale: Scale,
) -> Result<(), PlotError> {
    if panels
        .iter()
        .all(|p| p.groups.iter().all(|g| g.bars.is_empty()))
    {
        return Err(PlotError::Empty);
    }
    check_png_path(path)?;
    ensure_font()?;
    let series = series_order(panels);
    let panel_count = u32::try_from(panels.len()).map_err(draw_err)?;
    let width = PANEL_WIDTH.checked_mul(panel_count).ok_or_else(|| {
        PlotError::Draw(format!("{} panels make too wide an image", panels.len()))
    })?;

    let root = BitMapBackend::new(path, (width, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let body = draw_header(&root, title, &series)?;
    for (area, panel) in body.split_evenly((1, panels.len())).iter().zip(panels) {
        draw_panel(area, panel, y_label, &series, fmt_value, scale)?;
    }
    // Dropping the backend would also write the file, but would swallow the error.
    root.present().map_err(draw_err)
}

/// The PNG encoder picks the format from the file name's extension, so insist on `.png`.
pub(crate) fn check_png_path(path: &Path) -> Result<(), PlotError> {
    let is_png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if is_png {
        Ok(())
    } else {
        Err(PlotError::Draw(format!(
            "{}: the file name must end in .png",
            path.display()
        )))
    }
}

/// Each bar's value divided by the largest value of its group: 1.0 for the largest, 0.0 for
/// values that are zero, negative, NaN or infinite, and all zeros if no value is positive.
fn normalize(group: &Group) -> Vec<f64> {
    normalize_by(group, group_max(group))
}

fn usable(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// The largest usable value of `group` (0 if none).
fn group_max(group: &Group) -> f64 {
    group
        .bars
        .iter()
        .map(|b| b.value)
        .filter(|&v| usable(v))
        .fold(0.0, f64::max)
}

/// Each bar's value over `max`, as [`normalize`] does with its group's.
fn normalize_by(group: &Group, max: f64) -> Vec<f64> {
    group
        .bars
        .iter()
        .map(|b| {
            if max > 0.0 && usable(b.value) {
                b.value / max
            } else {
                0.0
            }
        })
        .collect()
}

/// Series names in order of first appearance across panels, groups and bars.
fn series_order(panels: &[Panel]) -> Vec<&str> {
    let mut order: Vec<&str> = Vec::new();
    let bars = panels.iter().flat_map(|p| &p.groups).flat_map(|g| &g.bars);
    for bar in bars {
        if !order.contains(&bar.series.as_str()) {
            order.push(&bar.series);
        }
    }
    order
}

/// The colour of `series`: its index in `order` picks from [`PALETTE`], cycling.
fn series_color(series: &str, order: &[&str]) -> RGBColor {
    let index = order.iter().position(|s| *s == series).unwrap_or(0);
    PALETTE[index % PALETTE.len()]
}

/// Maps any drawing error into [`PlotError::Draw`].
pub(crate) fn draw_err(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// A text style in the registered font.
pub(crate) fn text_style(size: f64) -> TextStyle<'static> {
    TextStyle::from((FONT_FAMILY, size).into_font()).color(&BLACK)
}

/// Registers the font with plotters, once per process; later calls return the first outcome.
pub(crate) fn ensure_font() -> Result<(), PlotError> {
    static FONT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match FONT.get_or_init(load_font) {
        Ok(_) => Ok(()),
        Err(message) => Err(PlotError::NoFont(message.clone())),
    }
}

/// Finds, reads and registers the font; returns the path used, or a message naming what was
/// tried. A font named by `SHMNET_FONT` must work: a broken one is an error, not skipped.
fn load_font() -> Result<PathBuf, String> {
    const HINT: &str = "install fonts-dejavu-core (apt) or set SHMNET_FONT=/path/to/font.ttf";
    if let Some(path) = std::env::var_os(FONT_ENV) {
        let path = PathBuf::from(path);
        return register_file(&path)
            .map(|()| path.clone())
            .map_err(|e| format!("{FONT_ENV}={}: {e}; {HINT}", path.display()));
    }
    let mut tried = Vec::new();
    for candidate in FONT_PATHS.iter().map(PathBuf::from) {
        match register_file(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) => tried.push(format!("{}: {e}", candidate.display())),
        }
    }
    Err(format!(
        "{FONT_ENV} is not set and none of these worked: {}; {HINT}",
        tried.join("; ")
    ))
}

/// Reads the font at `path` and registers it as [`FONT_FAMILY`]. The bytes are leaked: plotters
/// keeps a `'static` reference. [`ensure_font`] makes this happen at most once per path.
fn register_file(path: &Path) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let bytes: &'static [u8] = Vec::leak(bytes);
    register_font(FONT_FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| "not a TrueType/OpenType font".to_string())
}

/// Draws the figure title and the legend; returns the area left for the panels.
fn draw_header<'a>(root: &Area<'a>, title: &str, series: &[&str]) -> Result<Area<'a>, PlotError> {
    let below_title = root
        .titled(title, text_style(TITLE_SIZE))
        .map_err(draw_err)?;
    let (legend, body) = below_title.split_vertically(LEGEND_HEIGHT);
    draw_legend(&legend, series)?;
    Ok(body)
}

/// Draws one row of colour swatches and series names, centred in `area`.
fn draw_legend(area: &Area<'_>, series: &[&str]) -> Result<(), PlotError> {
    const SWATCH: i32 = 14;
    const GAP: i32 = 6;
    const SPACING: i32 = 26;
    let style = text_style(LEGEND_SIZE).pos(Pos::new(HPos::Left, VPos::Center));
    let mut widths = Vec::with_capacity(series.len());
    for name in series {
        let (w, _) = area.estimate_text_size(name, &style).map_err(draw_err)?;
        widths.push(i32::try_from(w).map_err(draw_err)?);
    }
    let total: i32 = widths.iter().map(|w| SWATCH + GAP + w).sum::<i32>()
        + SPACING * (i32::try_from(widths.len()).map_err(draw_err)? - 1).max(0);
    let (area_w, area_h) = area.dim_in_pixel();
    let area_w = i32::try_from(area_w).map_err(draw_err)?;
    let mid = i32::try_from(area_h / 2).map_err(draw_err)?;
    let mut x = ((area_w - total) / 2).max(8);
    for (name, width) in series.iter().zip(&widths) {
        let color = series_color(name, series);
        let swatch = [(x, mid - SWATCH / 2), (x + SWATCH, mid + SWATCH / 2)];
        area.draw(&Rectangle::new(swatch, color.filled()))
            .map_err(draw_err)?;
        area.draw(&Rectangle::new(swatch, BLACK.stroke_width(1)))
            .map_err(draw_err)?;
        area.draw_text(name, &style, (x + SWATCH + GAP, mid))
            .map_err(draw_err)?;
        x += SWATCH + GAP + width + SPACING;
    }
    Ok(())
}

/// The x extent `[left, right)` of bar `slot` of `slots` in group `group` (group centres are
/// at 0, 1, 2, …), before [`BAR_FILL`] is applied.
fn slot_span(group: usize, slot: usize, slots: usize) -> (f64, f64) {
    let width = GROUP_WIDTH / slots as f64;
    let left = group as f64 - GROUP_WIDTH / 2.0 + width * slot as f64;
    (left, left + width)
}

/// Draws one panel: axes, gridlines, group labels, bars and value labels.
fn draw_panel(
    area: &Area<'_>,
    panel: &Panel,
    y_label: &str,
    series: &[&str],
    fmt_value: &dyn Fn(f64) -> String,
    scale: Scale,
) -> Result<(), PlotError> {
    let groups = &panel.groups;
    let panel_max = groups.iter().map(group_max).fold(0.0, f64::max);
    let heights = |g: &Group| match scale {
        Scale::Group => normalize(g),
        Scale::Panel => normalize_by(g, panel_max),
    };
    let label_of = |x: &f64| {
        let index = x.round();
        if index < 0.0 {
            return String::new();
        }
        groups
            .get(index as usize)
            .map(|g| g.label.clone())
            .unwrap_or_default()
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, text_style(PANEL_TITLE_SIZE))
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(62)
        .build_cartesian_2d(GroupAxis::new(groups.len()), 0.0..Y_MAX)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&label_of)
        .y_labels(7)
        .y_max_light_lines(1)
        .y_label_formatter(&|y| format!("{y:.1}"))
        .y_desc(y_label)
        .x_label_style(text_style(TICK_SIZE))
        .y_label_style(text_style(TICK_SIZE))
        .axis_desc_style(text_style(AXIS_DESC_SIZE))
        .draw()
        .map_err(draw_err)?;

    for (index, group) in groups.iter().enumerate() {
        draw_group_bars(&mut chart, index, group, series, &heights(group))?;
    }
    let labels = value_label_style(&chart, groups, fmt_value)?;
    for (index, group) in groups.iter().enumerate() {
        draw_group_labels(&chart, index, group, &labels, fmt_value, &heights(group))?;
    }
    Ok(())
}

/// The chart of one panel: x in group units, y in fractions of the fastest bar.
type Chart<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<GroupAxis, RangedCoordf64>>;

/// The x axis of a panel: group `i` is centred at `i`, the axis runs from -0.5 to
/// `groups - 0.5`, and the ticks (and so the group labels) sit at the group centres.
struct GroupAxis {
    /// The number of groups (at least 1, so the axis is never empty).
    groups: usize,
}

impl GroupAxis {
    /// An axis for `groups` groups.
    fn new(groups: usize) -> Self {
        Self {
            groups: groups.max(1),
        }
    }
}

impl Ranged for GroupAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let Range { start, end } = self.range();
        let fraction = (value - start) / (end - start);
        limit.0 + (fraction * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        (0..self.groups).map(|i| i as f64).collect()
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.groups as f64 - 0.5
    }
}

/// Draws the bars of group number `index`; zero-height bars are skipped but keep their slot.
fn draw_group_bars(
    chart: &mut Chart<'_, '_>,
    index: usize,
    group: &Group,
    series: &[&str],
    heights: &[f64],
) -> Result<(), PlotError> {
    let slots = group.bars.len();
    for (slot, (bar, &height)) in group.bars.iter().zip(heights).enumerate() {
        if height <= 0.0 {
            continue;
        }
        let (left, right) = slot_span(index, slot, slots);
        let inset = (right - left) * (1.0 - BAR_FILL) / 2.0;
        let corners = [(left + inset, 0.0), (right - inset, height)];
        let color = series_color(&bar.series, series);
        chart
            .draw_series([
                Rectangle::new(corners, color.filled()),
                Rectangle::new(corners, BLACK.stroke_width(1)),
            ])
            .map_err(draw_err)?;
    }
    Ok(())
}

/// How the raw values are written above the bars of one panel.
struct ValueLabels {
    /// The text style, anchored so the text's position is the middle of the bar's top.
    style: TextStyle<'static>,
    /// Pixels between the bar's top and the text.
    gap: i32,
}

/// Picks the largest font size at which every value label of the panel fits the width of its
/// bar slot; if none does, writes them vertically.
fn value_label_style(
    chart: &Chart<'_, '_>,
    groups: &[Group],
    fmt_value: &dyn Fn(f64) -> String,
) -> Result<ValueLabels, PlotError> {
    let area = chart.plotting_area();
    let mut widest = Vec::new();
    for (index, group) in groups.iter().enumerate() {
        for (slot, bar) in group.bars.iter().enumerate() {
            if !bar.value.is_finite() {
                continue;
            }
            let (left, right) = slot_span(index, slot, group.bars.len());
            let room = chart.backend_coord(&(right, 0.0)).0 - chart.backend_coord(&(left, 0.0)).0;
            widest.push((fmt_value(bar.value), room));
        }
    }
    for size in VALUE_SIZES {
        let style = text_style(size).pos(Pos::new(HPos::Center, VPos::Bottom));
        let mut fits = true;
        for (text, room) in &widest {
            let (w, _) = area.estimate_text_size(text, &style).map_err(draw_err)?;
            fits &= i64::from(w) <= i64::from(*room);
        }
        if fits {
            return Ok(ValueLabels { style, gap: 3 });
        }
    }
    let style = text_style(VALUE_SIZE_VERTICAL)
        .transform(FontTransform::Rotate270)
        .pos(Pos::new(HPos::Left, VPos::Center));
    Ok(ValueLabels { style, gap: 4 })
}

/// Writes the raw values of group number `index` above its bars (at the baseline for finite
/// values that draw no bar; not at all for NaN or infinite values).
fn draw_group_labels(
    chart: &Chart<'_, '_>,
    index: usize,
    group: &Group,
    labels: &ValueLabels,
    fmt_value: &dyn Fn(f64) -> String,
    heights: &[f64],
) -> Result<(), PlotError> {
    let slots = group.bars.len();
    for (slot, (bar, &height)) in group.bars.iter().zip(heights).enumerate() {
        if !bar.value.is_finite() {
            continue;
        }
        let (left, right) = slot_span(index, slot, slots);
        let text = Text::new(fmt_value(bar.value), (0, -labels.gap), labels.style.clone());
        let label = EmptyElement::at(((left + right) / 2.0, height)) + text;
        chart.plotting_area().draw(&label).map_err(draw_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group with one bar per `(series, value)`.
    fn group(label: &str, bars: &[(&str, f64)]) -> Group {
        Group {
            label: label.to_string(),
            bars: bars
                .iter()
                .map(|&(series, value)| Bar {
                    series: series.to_string(),
                    value,
                })
                .collect(),
        }
    }

    /// Messages per second, "12.3k" style.
    fn rate(v: f64) -> String {
        if v >= 1e6 {
            format!("{:.2}M", v / 1e6)
        } else if v >= 1e3 {
            format!("{:.1}k", v / 1e3)
        } else {
            format!("{v:.0}")
        }
    }

    /// Two panels, three series, four groups, shaped like the paper's TTCP figures.
    fn ttcp_panels() -> Vec<Panel> {
        let panel = |title: &str, scale: f64| Panel {
            title: title.to_string(),
            groups: [("10 B", 1.0), ("100 B", 0.9), ("1 KB", 0.5), ("8 KB", 0.12)]
                .iter()
                .map(|&(label, size_factor)| {
                    let base = 95_000.0 * scale * size_factor;
                    group(
                        label,
                        &[
                            ("kernel", base * 0.42),
                            ("server", base * 0.61),
                            ("shmnet", base),
                        ],
                    )
                })
                .collect(),
        };
        vec![panel("ttcp transmit", 1.0), panel("ttcp receive", 0.8)]
    }

    #[test]
    fn plot_two_panels_writes_a_png() {
        let path = std::env::temp_dir().join(format!("shmnet-plot-{}.png", std::process::id()));
        let result = normalized_bars(
            &path,
            "TTCP throughput",
            "messages/s, relative to the fastest",
            &ttcp_panels(),
            &rate,
        );
        if let Err(PlotError::NoFont(message)) = &result {
            shmnet_testkit::skip(
                "plot_two_panels_writes_a_png",
                &format!("no font: {message}"),
            );
            return;
        }
        result.expect("drawing should succeed");
        let bytes = std::fs::read(&path).expect("the PNG should exist");
        let _ = std::fs::remove_file(&path);
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        assert!(bytes.len() > 5 * 1024, "PNG is only {} bytes", bytes.len());
    }

    #[test]
    fn plot_empty_panels_is_an_error() {
        let path = std::env::temp_dir().join("shmnet-plot-never-written.png");
        let none = normalized_bars(&path, "t", "y", &[], &rate);
        assert!(matches!(none, Err(PlotError::Empty)), "{none:?}");
        let barless = [Panel {
            title: "p".to_string(),
            groups: vec![group("g", &[])],
        }];
        let barless = normalized_bars(&path, "t", "y", &barless, &rate);
        assert!(matches!(barless, Err(PlotError::Empty)), "{barless:?}");
    }

    #[test]
    fn plot_refuses_paths_that_are_not_png() {
        let path = std::env::temp_dir().join("shmnet-plot-never-written.txt");
        let result = normalized_bars(&path, "t", "y", &ttcp_panels(), &rate);
        assert!(matches!(result, Err(PlotError::Draw(_))), "{result:?}");
        assert!(!path.exists());
    }

    #[test]
    fn plot_normalize_scales_to_the_largest() {
        let g = group("g", &[("a", 50.0), ("b", 200.0), ("c", 100.0)]);
        assert_eq!(normalize(&g), vec![0.25, 1.0, 0.5]);

        let g = group(
            "g",
            &[
                ("a", 0.0),
                ("b", f64::NAN),
                ("c", 4.0),
                ("d", -8.0),
                ("e", 2.0),
            ],
        );
        assert_eq!(normalize(&g), vec![0.0, 0.0, 1.0, 0.0, 0.5]);

        let g = group("g", &[("a", 0.0), ("b", 0.0)]);
        assert_eq!(normalize(&g), vec![0.0, 0.0]);
        let g = group("g", &[("a", f64::NAN), ("b", -1.0)]);
        assert_eq!(normalize(&g), vec![0.0, 0.0]);
        assert!(normalize(&group("g", &[])).is_empty());
    }

    #[test]
    fn plot_series_keep_their_first_appearance_order() {
        let panels = [
            Panel {
                title: "1".to_string(),
                groups: vec![group("g", &[("b", 1.0), ("a", 1.0)])],
            },
            Panel {
                title: "2".to_string(),
                groups: vec![group("g", &[("c", 1.0), ("a", 1.0), ("b", 1.0)])],
            },
        ];
        let order = series_order(&panels);
        assert_eq!(order, ["b", "a", "c"]);
        assert_eq!(series_color("c", &order), PALETTE[2]);
    }
}
