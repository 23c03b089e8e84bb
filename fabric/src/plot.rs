//! `rdma-fabric run --plot FILE.svg`: per-flow rates and the bottleneck
//! queue over time, as two panels of one SVG; for `compare` of a
//! collective, when the ranks finished on each fabric (a CDF per fabric).
//! Only SVG: the bitmap backend would need system fonts and image libraries.

use crate::report::{Report, Series};
use plotters::prelude::*;
use std::path::Path;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlotError {
    #[error("--plot {0:?}: only .svg is supported (PNG would need system font and image libraries)")]
    Format(String),
    #[error("--plot: the run recorded no time series to plot")]
    Empty,
    #[error("--plot {0:?}: {1}")]
    Draw(String, String),
}

const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Whether `path` names a format we can write; checked before a run so a
/// bad flag costs nothing.
pub fn check_path(path: &Path) -> Result<(), PlotError> {
    match path.extension() {
        Some(e) if e.eq_ignore_ascii_case("svg") => Ok(()),
        _ => Err(PlotError::Format(path.display().to_string())),
    }
}

/// Writes the plot of `r` to `path`, which must end in `.svg`.
pub fn write(r: &Report, path: &Path) -> Result<(), PlotError> {
    let title = if r.trajectory.is_some() { "reaction point rate" } else { "per-flow delivered rate" };
    write_series(&format!("{} (seed {}): {title}", r.scenario, r.seed), &r.series, path)
}

/// Writes `s` (per-flow rates, and the queue if any) under `caption`: for
/// any run with these series, simulated or live (`rdma-bottleneck`).
pub fn write_series(caption: &str, s: &Series, path: &Path) -> Result<(), PlotError> {
    check_path(path)?;
    let name = path.display().to_string();
    if s.flow_rates.iter().all(|f| f.is_empty()) && s.queue.is_empty() {
        return Err(PlotError::Empty);
    }
    let err = |e: &dyn std::fmt::Display| PlotError::Draw(name.clone(), e.to_string());
    let panels = if s.queue.is_empty() { 1 } else { 2 };
    let root = SVGBackend::new(path, (900, 300 * panels)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels as usize, 1));
    let t_end = s.flow_rates.iter().flatten().chain(&s.queue).map(|p| p.0).fold(1.0, f64::max);

    let y_max = s.flow_rates.iter().flatten().map(|p| p.1).fold(1.0, f64::max) * 1.05;
    let mut chart = ChartBuilder::on(&areas[0])
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_end, 0.0..y_max)
        .map_err(|e| err(&e))?;
    chart.configure_mesh().x_desc("time (us)").y_desc("Gb/s").draw().map_err(|e| err(&e))?;
    for (i, f) in s.flow_rates.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(f.iter().copied(), &c))
            .map_err(|e| err(&e))?
            .label(format!("flow {i}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], c));
    }
    if s.flow_rates.len() <= 16 {
        chart.configure_series_labels().border_style(BLACK).draw().map_err(|e| err(&e))?;
    }

    if panels == 2 {
        let q_max = s.queue.iter().map(|p| p.1 / 1000.0).fold(1.0, f64::max) * 1.05;
        let mut chart = ChartBuilder::on(&areas[1])
            .caption("bottleneck data queue", ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..t_end, 0.0..q_max)
            .map_err(|e| err(&e))?;
        chart.configure_mesh().x_desc("time (us)").y_desc("KB").draw().map_err(|e| err(&e))?;
        chart
            .draw_series(LineSeries::new(s.queue.iter().map(|&(t, q)| (t, q / 1000.0)), &BLACK))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Writes one line per labelled set of times: the fraction of its values
/// at or below each time (an empirical CDF), e.g. when each rank of a
/// collective finished, one line per fabric.
pub fn write_cdfs(caption: &str, x_desc: &str, lines: &[(String, Vec<f64>)], path: &Path) -> Result<(), PlotError> {
    check_path(path)?;
    let name = path.display().to_string();
    if lines.iter().all(|(_, v)| v.is_empty()) {
        return Err(PlotError::Empty);
    }
    let err = |e: &dyn std::fmt::Display| PlotError::Draw(name.clone(), e.to_string());
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let x_max = lines.iter().flat_map(|(_, v)| v).copied().fold(1.0, f64::max) * 1.05;
    let x_min = lines.iter().flat_map(|(_, v)| v).copied().fold(x_max, f64::min) * 0.95;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(x_min..x_max, 0.0..1.02)
        .map_err(|e| err(&e))?;
    chart.configure_mesh().x_desc(x_desc).y_desc("fraction done").draw().map_err(|e| err(&e))?;
    for (i, (label, v)) in lines.iter().enumerate() {
        let mut v = v.clone();
        v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        let n = v.len().max(1) as f64;
        // A step function: 0 until the first value, up 1/n at each.
        let mut pts = vec![(x_min, 0.0)];
        for (k, &x) in v.iter().enumerate() {
            pts.push((x, k as f64 / n));
            pts.push((x, (k + 1) as f64 / n));
        }
        let c = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], c));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
