//! The overhead histograms as PNG, like the seed's Figures 2–8: one panel per run, overhead
//! ticks across, buffers up, lines at this machine's three marks (totally within cache, a
//! 100 % clean miss, a 100 % dirty miss), each peak lettered above it as the seed lettered
//! its peaks (the letters run on across the panels of a figure), and the overflow bin's
//! count in the panel's title.

use super::Residency;
use super::summary::Peak;
use crate::plot::{PlotError, check_png_path, draw_err, ensure_font, text_style};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// Height of one panel, pixels.
const PANEL_HEIGHT: u32 = 260;
/// Width of the figure, pixels.
const WIDTH: u32 = 900;

/// A peak with the letter it carries in a figure.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LetteredPeak {
    /// Its letter: `A`…`Z`, then `AA`, `AB`… (as spreadsheet columns).
    pub letter: String,
    /// The label of the run (the panel) it is in.
    pub run: String,
    /// The peak.
    pub peak: Peak,
}

/// The `k`-th letter from `first` (an ASCII letter, either case; anything else counts as
/// `A`): `A`…`Z`, then `AA`, `AB`…, so the letters never run out or repeat.
pub fn letter(first: char, k: usize) -> String {
    let first = first.to_ascii_uppercase();
    let start = if first.is_ascii_uppercase() {
        (first as u8 - b'A') as usize
    } else {
        0
    };
    let mut n = start + k;
    let mut out = Vec::new();
    loop {
        out.push(b'A' + (n % 26) as u8);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The peaks of every run, lettered in order — run by run, left to right within each —
/// from `first_letter`.
pub fn letter_peaks(runs: &[(String, &Residency)], first_letter: char) -> Vec<LetteredPeak> {
    runs.iter()
        .flat_map(|(label, r)| r.peaks.iter().map(move |p| (label, p)))
        .enumerate()
        .map(|(k, (label, p))| LetteredPeak {
            letter: letter(first_letter, k),
            run: label.clone(),
            peak: *p,
        })
        .collect()
}

/// A markdown table of lettered peaks: letter, run, ticks, buffers, %, reading.
pub fn peaks_table(peaks: &[LetteredPeak]) -> String {
    let mut t = String::from(
        "| peak | run | overhead ticks (top) | buffers | % of buffers | reading |\n|---|---|---|---:|---:|---|\n",
    );
    for l in peaks {
        let p = &l.peak;
        t.push_str(&format!(
            "| {} | {} | {:.0}–{:.0} ({:.0}) | {} | {:.1} | {} |\n",
            l.letter, l.run, p.lo_ticks, p.hi_ticks, p.top_ticks, p.buffers, p.share_pct, p.reading
        ));
    }
    t
}

/// Draws one panel per `(label, run)` into the PNG at `path`, under `title`, lettering the
/// peaks of all panels in order from `first_letter` (pass the letter after the previous
/// figure's last to run on as the seed's figures do). Returns the lettered peaks, for a
/// report's table ([`peaks_table`]).
pub fn histograms(
    path: &Path,
    title: &str,
    runs: &[(String, &Residency)],
    first_letter: char,
) -> Result<Vec<LetteredPeak>, PlotError> {
    if runs.is_empty() {
        return Err(PlotError::Empty);
    }
    check_png_path(path)?;
    ensure_font()?;
    let lettered = letter_peaks(runs, first_letter);
    let height = 40 + PANEL_HEIGHT * runs.len() as u32;
    let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let (head, body) = root.split_vertically(40);
    head.draw_text(title, &text_style(22.0), (10, 8))
        .map_err(draw_err)?;
    let mut letters = lettered.iter().map(|l| l.letter.as_str());
    for (area, (label, r)) in body.split_evenly((runs.len(), 1)).iter().zip(runs) {
        let mine: Vec<&str> = letters.by_ref().take(r.peaks.len()).collect();
        panel(area, label, r, &mine)?;
    }
    root.present().map_err(draw_err)?;
    Ok(lettered)
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    label: &str,
    r: &Residency,
    letters: &[&str],
) -> Result<(), PlotError> {
    let h = &r.histogram;
    let limit = h.limit();
    let tallest = h.counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    // Head room for the letters above the tallest bars.
    let top = tallest * 1.2;
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
    let k = &r.marks;
    // Labels beside their lines, a few pixels off; the clean mark's on its left (the dirty
    // mark is often just right of it), the others on their right unless near the right edge.
    let right_of = |x: f64| x <= 0.8 * limit;
    for (x, name, color, y, right) in [
        (
            k.cached_max,
            format!("in cache ≤ {:.0}", k.cached_max),
            RGBColor(204, 121, 167),
            0.97,
            right_of(k.cached_max),
        ),
        (
            k.clean,
            format!("100 % clean {:.0}", k.clean),
            RGBColor(0, 158, 115),
            0.89,
            false,
        ),
        (
            k.dirty,
            format!("100 % dirty {:.0}", k.dirty),
            RGBColor(213, 94, 0),
            0.81,
            right_of(k.dirty),
        ),
    ] {
        if x.is_finite() && (0.0..=limit).contains(&x) {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, top)],
                    color.stroke_width(2),
                )))
                .map_err(draw_err)?;
            let (dx, hpos) = if right {
                (5, HPos::Left)
            } else {
                (-5, HPos::Right)
            };
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((x, top * y))
                        + Text::new(
                            name,
                            (dx, 0),
                            text_style(12.0)
                                .color(&color)
                                .pos(Pos::new(hpos, VPos::Top)),
                        ),
                ))
                .map_err(draw_err)?;
        }
    }
    // Each peak's letter just above its tallest bin.
    chart
        .draw_series(r.peaks.iter().zip(letters).map(|(p, l)| {
            let bin_at = ((p.top_ticks / bin) as usize).min(h.counts.len().saturating_sub(1));
            let height = h.counts.get(bin_at).copied().unwrap_or(0) as f64;
            Text::new(
                l.to_string(),
                (p.top_ticks, height + 0.03 * top),
                text_style(16.0).pos(Pos::new(HPos::Center, VPos::Bottom)),
            )
        }))
        .map_err(draw_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::residency::peaks::Reading;

    #[test]
    fn letters_run_on_past_z() {
        assert_eq!(letter('A', 0), "A");
        assert_eq!(letter('D', 2), "F");
        assert_eq!(letter('z', 0), "Z");
        assert_eq!(letter('Z', 1), "AA");
        assert_eq!(letter('A', 27), "AB");
        assert_eq!(letter('A', 26 + 26 * 26), "AAA");
        assert_eq!(letter('?', 1), "B");
    }

    #[test]
    fn peaks_are_lettered_panel_by_panel_left_to_right() {
        let samples = |overheads: &[(u32, usize)]| -> Vec<crate::residency::probe::Sample> {
            overheads
                .iter()
                .flat_map(|&(o, n)| {
                    std::iter::repeat_n(
                        crate::residency::probe::Sample {
                            position: 0,
                            len: 1480,
                            cold: 100 + o,
                            hot: 100,
                        },
                        n,
                    )
                })
                .collect()
        };
        let marks = crate::calibrate::Marks {
            cached_max: 50.0,
            clean: 800.0,
            dirty: 1000.0,
        };
        let run = |s: &[crate::residency::probe::Sample]| {
            crate::residency::analyse(
                crate::residency::Settings::default(),
                marks,
                1.0,
                s,
                Default::default(),
                0,
                0,
                0.0,
            )
        };
        let a = run(&samples(&[(0, 300), (845, 500)]));
        let b = run(&samples(&[(1500, 400)]));
        assert_eq!(a.peaks.len(), 2, "{:?}", a.peaks);
        assert_eq!(b.peaks.len(), 1, "{:?}", b.peaks);
        let l = letter_peaks(&[("a".into(), &a), ("b".into(), &b)], 'D');
        let got: Vec<(&str, &str, Reading)> = l
            .iter()
            .map(|l| (l.letter.as_str(), l.run.as_str(), l.peak.reading))
            .collect();
        assert_eq!(
            got,
            [
                ("D", "a", Reading::InCache),
                ("E", "a", Reading::CleanMiss),
                ("F", "b", Reading::BeyondDirty)
            ]
        );
    }

    #[test]
    fn the_table_lists_every_peak() {
        let p = Peak {
            lo_ticks: 840.0,
            hi_ticks: 850.0,
            top_ticks: 845.0,
            buffers: 148,
            share_pct: 4.93,
            reading: Reading::CleanMiss,
        };
        let t = peaks_table(&[LetteredPeak {
            letter: "B".into(),
            run: "mach".into(),
            peak: p,
        }]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[2],
            "| B | mach | 840–850 (845) | 148 | 4.9 | about a 100 % clean miss |"
        );
    }
}
