//! PNG plots: forwarded against offered load with 99 % CI bars, and latency percentiles.
//!
//! Pure Rust (plotters' bitmap backend); the font, DejaVu Sans, ships in `assets/` with its
//! license and is registered on first use.

use std::ops::Range;
use std::path::Path;
use std::sync::Once;

use plotters::chart::SeriesAnno;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::Error;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

fn font() {
    REGISTER.call_once(|| {
        // The font is compiled in and known good: registration cannot fail at run time
        // unless the asset is replaced by something that is not a TTF.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// One point of a throughput plot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Generated (offered + refused) rate, frames per second.
    pub x: f64,
    /// Mean forwarded rate.
    pub y: f64,
    /// Half-width of the 99 % CI of `y`.
    pub ci: Option<f64>,
}

/// A named series of `(x, y)` points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(format!("{}: cannot draw the plot: {e}", path.display()))
}

/// (divisor, unit) for rates up to `max`.
fn rate_unit(max: f64) -> (f64, &'static str) {
    if max >= 2e6 {
        (1e6, "Mpps")
    } else if max >= 2e3 {
        (1e3, "kpps")
    } else {
        (1.0, "pps")
    }
}

/// Series colours (Tableau 10): ten distinct hues, so up to ten series never share one.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// A metric's field name as a legend reads it: `forwarded_pps` → "forwarded",
/// `p99_us` → "p99 latency".
pub fn human_label(field: &str) -> String {
    if let Some(b) = field.strip_suffix("_us") {
        return match b {
            "p50" | "p90" | "p99" | "p999" | "max" | "min" | "mean" => format!("{b} latency"),
            _ => b.replace('_', " ") + " (µs)",
        };
    }
    let b = field.strip_suffix("_pps").unwrap_or(field);
    match b {
        "forwarded_ci99" => "forwarded, 99 % CI".into(),
        "attempted" => "generated".into(),
        _ => b.replace('_', " "),
    }
}

/// Where a log10 axis from `lo` to `hi` (both log10 of values) gets its labels: at
/// 1, 2, 5 × 10^k inside the range, or every integer multiple of decades when that gives
/// fewer than three.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    for mults in [&[1.0, 2.0, 5.0][..], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0][..]] {
        out.clear();
        for k in (lo.floor() as i32 - 1)..=(hi.ceil() as i32 + 1) {
            for m in mults {
                let t = (m * 10f64.powi(k)).log10();
                if t >= lo - 1e-9 && t <= hi + 1e-9 {
                    out.push(t);
                }
            }
        }
        if out.len() >= 3 {
            break;
        }
    }
    // A very short decade span: two or fewer 1..9 marks; fall back to plain even steps.
    if out.len() < 2 {
        out = RangedCoordf64::from(lo..hi).key_points(6);
    }
    out
}

/// The x positions (log10 of the values) a log axis labels: the data's distinct x values
/// when there are at most a dozen, else [`log_ticks`] over their span.
fn log_value_ticks(xs: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| *x > 0.0 && x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.dedup_by(|a, b| (*a - *b).abs() <= 1e-9 * b.abs());
    if !v.is_empty() && v.len() <= 12 {
        v.into_iter().map(f64::log10).collect()
    } else {
        log_ticks(lo, hi)
    }
}

/// The label of a position `t` (log10 of a value) on a log axis: the value, short.
fn log_label(t: f64) -> String {
    let v = 10f64.powf(t);
    // Undo the float error of the round trip (9999.99… → 10000) at 6 significant digits.
    let v: f64 = format!("{v:.5e}").parse().unwrap_or(v);
    short(v)
}

/// A log y axis over the positive, finite `values`: its span in log10 (a little past the
/// data) and its label positions. Values at or below 0 are drawn at its floor.
fn log_y_axis(values: impl Iterator<Item = f64>) -> (Range<f64>, Vec<f64>) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| *v > 0.0 && v.is_finite()) {
        (lo, hi) = (lo.min(v), hi.max(v));
    }
    if !lo.is_finite() {
        (lo, hi) = (1.0, 10.0);
    }
    let (lo, hi) = (lo.log10(), hi.log10());
    let pad = ((hi - lo) * 0.06).max(0.05);
    let r = (lo - pad)..(hi + pad);
    let t = log_ticks(r.start, r.end);
    (r, t)
}

/// Points sorted by x (stable: equal x keep their order), so a line joins them in x order
/// and not in the order they were measured.
fn sorted_by_x<T: Clone>(pts: &[T], x: impl Fn(&T) -> f64) -> Vec<T> {
    let mut v = pts.to_vec();
    v.sort_by(|a, b| x(a).total_cmp(&x(b)));
    v
}

/// How to draw the points of a throughput plot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Means of steps, joined in order of load, with their 99 % CI bars.
    Steps,
    /// Single trials (a search's), unjoined.
    Trials,
}

/// One axis of the charts here: linear f64 with its labels (bold mesh lines) and light
/// mesh lines at given positions, so that a log axis (log10 of its values) can be labelled
/// at the data's own values.
#[derive(Clone)]
struct Axis {
    inner: RangedCoordf64,
    bold: Vec<f64>,
    light: Vec<f64>,
}

impl Ranged for Axis {
    type ValueType = f64;
    type FormatOption = NoDefaultFormatting;
    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(v, limit)
    }
    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }
}

impl ValueFormatter<f64> for Axis {
    fn format(v: &f64) -> String {
        RangedCoordf64::format(v)
    }
}

/// The chart every plot here draws on: f64 axes (a log axis is drawn as log10 of its
/// values) on a PNG.
type Chart<'a, 'p> = ChartContext<'a, BitMapBackend<'p>, Cartesian2d<Axis, Axis>>;

/// What a figure's axes span and read; the label count, tick positions and formatters are
/// `None` where plotters' defaults serve.
struct Axes<'f> {
    x: Range<f64>,
    y: Range<f64>,
    x_desc: String,
    y_desc: String,
    x_labels: Option<usize>,
    x_ticks: Option<Vec<f64>>,
    y_ticks: Option<Vec<f64>>,
    x_fmt: Option<&'f dyn Fn(&f64) -> String>,
    y_fmt: Option<&'f dyn Fn(&f64) -> String>,
}

/// `r` with its labels at `ticks`, or where plotters would put `n` of them; light mesh
/// lines only with the latter.
fn axis(r: Range<f64>, ticks: Option<Vec<f64>>, n: usize) -> Axis {
    let inner = RangedCoordf64::from(r.clone());
    match ticks {
        Some(t) => {
            let bold = t.into_iter().filter(|v| *v >= r.start && *v <= r.end).collect();
            Axis { inner, bold, light: Vec::new() }
        }
        None => {
            let (bold, light) = (inner.key_points(n), inner.key_points(n * 4));
            Axis { inner, bold, light }
        }
    }
}

impl<'f> Axes<'f> {
    fn new(
        x: Range<f64>,
        y: Range<f64>,
        x_desc: impl Into<String>,
        y_desc: impl Into<String>,
    ) -> Self {
        Axes {
            x,
            y,
            x_desc: x_desc.into(),
            y_desc: y_desc.into(),
            x_labels: None,
            x_ticks: None,
            y_ticks: None,
            x_fmt: None,
            y_fmt: None,
        }
    }
}

/// Draws one figure: the canvas, caption, axes and mesh all plots share, then what `series`
/// draws, then the legend at `legend`. One frame for every plot keeps the figures alike
/// (size, fonts, margins) and leaves each plot function only its own series.
fn figure(
    path: &Path,
    title: &str,
    axes: Axes<'_>,
    legend: SeriesLabelPosition,
    series: impl FnOnce(&mut Chart<'_, '_>) -> Result<(), Error>,
) -> Result<(), Error> {
    font();
    let root = BitMapBackend::new(path, (1000, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d(
            axis(axes.x, axes.x_ticks, axes.x_labels.unwrap_or(10)),
            axis(axes.y, axes.y_ticks, 10),
        )
        .map_err(|e| err(path, e))?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .axis_desc_style(("sans-serif", 17))
        .label_style(("sans-serif", 14));
    if let Some(f) = axes.x_fmt {
        mesh.x_label_formatter(f);
    }
    if let Some(f) = axes.y_fmt {
        mesh.y_label_formatter(f);
    }
    mesh.draw().map_err(|e| err(path, e))?;
    series(&mut chart)?;
    chart
        .configure_series_labels()
        .position(legend)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))
}

/// A series' line in colour `c`; with a name, entered in the legend as a short line.
fn line(
    chart: &mut Chart<'_, '_>,
    path: &Path,
    pts: impl IntoIterator<Item = (f64, f64)>,
    c: RGBColor,
    name: Option<String>,
) -> Result<(), Error> {
    let anno =
        chart.draw_series(LineSeries::new(pts, c.stroke_width(2))).map_err(|e| err(path, e))?;
    if let Some(name) = name {
        anno.label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    Ok(())
}

/// A series' points as filled circles of `radius`; the caller may label what comes back.
fn dots<'c, 'a, 'p>(
    chart: &'c mut Chart<'a, 'p>,
    path: &Path,
    pts: impl IntoIterator<Item = (f64, f64)>,
    radius: i32,
    c: RGBColor,
) -> Result<&'c mut SeriesAnno<'a, BitMapBackend<'p>>, Error> {
    chart
        .draw_series(pts.into_iter().map(|p| Circle::new(p, radius, c.filled())))
        .map_err(|e| err(path, e))
}

/// A CI bar at `x` from `lo` to `hi`, with caps `cap` wide either side.
fn ci_bar(
    chart: &mut Chart<'_, '_>,
    path: &Path,
    (x, lo, hi): (f64, f64, f64),
    cap: f64,
    c: RGBColor,
) -> Result<(), Error> {
    let st = c.stroke_width(2);
    chart
        .draw_series([
            PathElement::new([(x, lo), (x, hi)], st),
            PathElement::new([(x - cap, lo), (x + cap, lo)], st),
            PathElement::new([(x - cap, hi), (x + cap, hi)], st),
        ])
        .map_err(|e| err(path, e))?;
    Ok(())
}

/// The 99 % CI bars of throughput points, in the chart's units (rates / `div`), cut at the
/// frame `top / div`.
fn throughput_ci_bars(
    chart: &mut Chart<'_, '_>,
    path: &Path,
    pts: &[Point],
    (div, top): (f64, f64),
    c: RGBColor,
) -> Result<(), Error> {
    let cap = top / div * 0.006;
    for p in pts.iter().filter(|p| p.ci.is_some_and(|c| c > 0.0)) {
        let ci = p.ci.unwrap_or(0.0);
        let bar = (p.x / div, ((p.y - ci) / div).max(0.0), ((p.y + ci) / div).min(top / div));
        ci_bar(chart, path, bar, cap, c)?;
    }
    Ok(())
}

/// The figure of forwarded against generated load up to `top` (both axes, in the unit that
/// suits `top`), with the line forwarded = generated drawn first; `series` gets the divisor
/// to that unit and draws the points.
fn throughput_figure(
    path: &Path,
    title: &str,
    top: f64,
    series: impl FnOnce(&mut Chart<'_, '_>, f64) -> Result<(), Error>,
) -> Result<(), Error> {
    let (div, unit) = rate_unit(top);
    let axes = Axes::new(
        0.0..top / div,
        0.0..top / div,
        format!("generated load ({unit}): offered + refused"),
        format!("forwarded ({unit})"),
    );
    figure(path, title, axes, SeriesLabelPosition::UpperLeft, |chart| {
        let grey = RGBColor(150, 150, 150);
        chart
            .draw_series(LineSeries::new(
                [(0.0, 0.0), (top / div, top / div)],
                grey.stroke_width(1),
            ))
            .map_err(|e| err(path, e))?
            .label("forwarded = generated")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey));
        series(chart, div)
    })
}

/// Forwarded against generated load, with the line forwarded = generated.
pub fn throughput(path: &Path, title: &str, points: &[Point], style: Style) -> Result<(), Error> {
    // Scaled to the points, not to the bars: with few repetitions a 99 % interval can be
    // many times the mean (Student t for 1 degree of freedom is 63.7); bars are cut at the
    // frame.
    let top = points.iter().map(|p| p.x.max(p.y)).fold(1.0, f64::max) * 1.15;
    throughput_figure(path, title, top, |chart, div| {
        let c = COLORS[0];
        let pts = sorted_by_x(points, |p| p.x);
        let joined = if style == Style::Steps { pts.as_slice() } else { &[] };
        line(chart, path, joined.iter().map(|p| (p.x / div, p.y / div)), c, None)?;
        dots(chart, path, pts.iter().map(|p| (p.x / div, p.y / div)), 4, c)?
            .label(match style {
                Style::Steps => "mean forwarded, 99 % CI bars",
                Style::Trials => "one trial",
            })
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
        throughput_ci_bars(chart, path, &pts, (div, top), c)
    })
}

/// Latency percentile plot: each series is `(latency µs, fraction of frames at or below)`;
/// the x axis is in "nines" (0: 0 %, 1: 90 %, 2: 99 %, 3: 99.9 %...), the y axis in µs on a
/// log scale (so p50 is not flattened against the floor by a long tail).
pub fn latency_percentiles(path: &Path, title: &str, series: &[Series]) -> Result<(), Error> {
    // The axis ends one nine past the last point below 100 %; the 100 % point (the maximum)
    // is drawn at the end.
    let xmax = series
        .iter()
        .flat_map(|s| s.points.iter().filter(|p| p.1 < 1.0).map(|p| -(1.0 - p.1).log10()))
        .fold(0.0f64, f64::max)
        .floor()
        .clamp(0.0, 5.0)
        + 1.0;
    let nines = move |q: f64| if q >= 1.0 { xmax } else { (-(1.0 - q).log10()).min(xmax) };
    let (yr, yt) = log_y_axis(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
    let floor = yr.start;
    let ly = move |v: f64| if v > 0.0 { v.log10().max(floor) } else { floor };
    let fmt_x = |v: &f64| {
        let p = 100.0 * (1.0 - 10f64.powf(-v));
        if *v < 0.5 {
            "0%".into()
        } else {
            format!("{}%", trim(p))
        }
    };
    let fmt_y = |v: &f64| log_label(*v);
    let axes = Axes {
        x_labels: Some(xmax as usize + 1),
        x_fmt: Some(&fmt_x),
        y_ticks: Some(yt),
        y_fmt: Some(&fmt_y),
        ..Axes::new(0.0..xmax, yr, "percentile", "latency (µs, log scale)")
    };
    figure(path, title, axes, SeriesLabelPosition::UpperLeft, |chart| {
        for (i, s) in series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let pts = s.points.iter().map(|p| (nines(p.1), ly(p.0)));
            line(chart, path, pts, c, Some(s.name.clone()))?;
        }
        Ok(())
    })
}

/// Each series as a labelled line with its points as dots (radius 3), sorted by x and put
/// on the chart by `at`; what [`against_rate`] and [`lines`] draw.
fn lines_with_dots(
    chart: &mut Chart<'_, '_>,
    path: &Path,
    series: &[Series],
    at: impl Fn(&(f64, f64)) -> (f64, f64),
) -> Result<(), Error> {
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts = sorted_by_x(&s.points, |p| p.0);
        line(chart, path, pts.iter().map(&at), c, Some(s.name.clone()))?;
        dots(chart, path, pts.iter().map(&at), 3, c)?;
    }
    Ok(())
}

/// Lines of `y` against a rate on x (latency against offered load, say); with `log_y`, y
/// on a log scale (latencies: p50 and max can be orders of magnitude apart).
pub fn against_rate(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[Series],
    log_y: bool,
) -> Result<(), Error> {
    let xtop = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0, f64::max) * 1.05;
    let (div, unit) = rate_unit(xtop);
    let x_desc = format!("generated load ({unit})");
    if log_y {
        let (yr, yt) = log_y_axis(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        let floor = yr.start;
        let fmt_y = |v: &f64| log_label(*v);
        let axes = Axes {
            y_ticks: Some(yt),
            y_fmt: Some(&fmt_y),
            ..Axes::new(0.0..xtop / div, yr, x_desc, format!("{y_desc}, log scale"))
        };
        return figure(path, title, axes, SeriesLabelPosition::UpperLeft, |chart| {
            lines_with_dots(chart, path, series, |p| {
                (p.0 / div, if p.1 > 0.0 { p.1.log10().max(floor) } else { floor })
            })
        });
    }
    let ytop = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(1e-9, f64::max) * 1.1;
    let axes = Axes::new(0.0..xtop / div, 0.0..ytop, x_desc, y_desc);
    figure(path, title, axes, SeriesLabelPosition::UpperLeft, |chart| {
        lines_with_dots(chart, path, series, |p| (p.0 / div, p.1))
    })
}

fn trim(p: f64) -> String {
    let s = format!("{p:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `out.png` → `out-latency.png`: where the second plot of a test goes.
pub fn sibling(path: &Path, suffix: &str) -> std::path::PathBuf {
    let stem = path.file_stem().map_or("plot".into(), |s| s.to_string_lossy().to_string());
    let ext = path.extension().map_or("png".into(), |s| s.to_string_lossy().to_string());
    path.with_file_name(format!("{stem}-{suffix}.{ext}"))
}

/// Lines of named series on plain axes: the general form, for benchmarks' figures.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<(), Error> {
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let xtop = pts().map(|p| p.0).fold(1e-9, f64::max) * 1.05;
    let ytop = pts().map(|p| p.1).fold(1e-9, f64::max) * 1.1;
    let axes = Axes::new(0.0..xtop, 0.0..ytop, x_desc, y_desc);
    figure(path, title, axes, SeriesLabelPosition::UpperRight, |chart| {
        lines_with_dots(chart, path, series, |p| *p)
    })
}

/// How the x axis of [`xy`] reads.
#[derive(Clone, Debug, PartialEq)]
pub enum XScale {
    Linear,
    /// Powers of ten equally spaced (every x must be positive).
    Log,
    /// Named positions: x = 0, 1, 2, ... labelled with these.
    Categories(Vec<String>),
}

/// A series of `(x, y, half-width of the 99 % CI of y)`.
pub struct XySeries {
    pub name: String,
    pub points: Vec<(f64, f64, Option<f64>)>,
}

/// 1500 → "1.5k", 1e6 → "1M".
fn short(v: f64) -> String {
    let (d, u) = if v.abs() >= 1e6 {
        (1e6, "M")
    } else if v.abs() >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    format!("{}{u}", trim(v / d))
}

/// Lines with points and CI bars of `y` against `x`, on a linear, logarithmic or categorical
/// x axis; y from 0, or with `log_y` on a log scale (latencies). A log x axis is labelled at
/// the data's own x values when there are at most a dozen of them.
pub fn xy(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[XySeries],
    scale: &XScale,
    log_y: bool,
) -> Result<(), Error> {
    let tx = |x: f64| match scale {
        XScale::Log => x.max(1e-300).log10(),
        _ => x,
    };
    let xs = || series.iter().flat_map(|s| s.points.iter().map(|p| tx(p.0)));
    let (mut x0, mut x1) = match scale {
        XScale::Categories(c) => (-0.5, c.len().max(1) as f64 - 0.5),
        _ => (xs().fold(f64::INFINITY, f64::min), xs().fold(f64::NEG_INFINITY, f64::max)),
    };
    if !x0.is_finite() || !x1.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        (x0, x1) = (x0 - 0.5, x1 + 0.5);
    } else if !matches!(scale, XScale::Categories(_)) {
        let pad = (x1 - x0) * 0.05;
        (x0, x1) = (x0 - pad, x1 + pad);
        if matches!(scale, XScale::Linear) && x0 < 0.0 && xs().all(|x| x >= 0.0) {
            x0 = 0.0;
        }
    }
    let (yr, y_ticks) = if log_y {
        let (r, t) = log_y_axis(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        (r, Some(t))
    } else {
        let ytop = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1 + p.2.unwrap_or(0.0).min(p.1.abs())))
            .filter(|v| v.is_finite())
            .fold(1e-9, f64::max)
            * 1.12;
        (0.0..ytop, None)
    };
    let (ybot, ytop) = (yr.start, yr.end);
    // What y (or a CI bar's end) is drawn at: log10 with `log_y`, cut at the frame.
    let ty = |y: f64| {
        if log_y {
            if y > 0.0 {
                y.log10().clamp(ybot, ytop)
            } else {
                ybot
            }
        } else {
            y.clamp(0.0, ytop)
        }
    };
    let x_ticks = match scale {
        XScale::Log => {
            let raw: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
            Some(log_value_ticks(&raw, x0, x1))
        }
        XScale::Categories(c) => Some((0..c.len()).map(|i| i as f64).collect()),
        XScale::Linear => None,
    };
    let fmt_x = |v: &f64| -> String {
        match scale {
            XScale::Linear => short(*v),
            XScale::Log => log_label(*v),
            XScale::Categories(c) => {
                let r = v.round();
                if (v - r).abs() < 1e-6 && r >= 0.0 {
                    c.get(r as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
        }
    };
    let fmt_y = |v: &f64| if log_y { log_label(*v) } else { short(*v) };
    let axes = Axes {
        x_ticks,
        y_ticks,
        x_fmt: Some(&fmt_x),
        y_fmt: Some(&fmt_y),
        ..Axes::new(
            x0..x1,
            yr,
            x_desc,
            if log_y { format!("{y_desc}, log scale") } else { y_desc.into() },
        )
    };
    let cap = (x1 - x0) * 0.006;
    figure(path, title, axes, SeriesLabelPosition::LowerRight, |chart| {
        for (i, s) in series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let v: Vec<(f64, f64, Option<f64>)> =
                s.points.iter().filter(|p| p.1.is_finite()).map(|p| (tx(p.0), p.1, p.2)).collect();
            let v = sorted_by_x(&v, |p| p.0);
            line(chart, path, v.iter().map(|p| (p.0, ty(p.1))), c, Some(s.name.clone()))?;
            dots(chart, path, v.iter().map(|p| (p.0, ty(p.1))), 4, c)?;
            for p in v.iter().filter(|p| p.2.is_some_and(|c| c > 0.0)) {
                let ci = p.2.unwrap_or(0.0);
                ci_bar(chart, path, (p.0, ty(p.1 - ci), ty(p.1 + ci)), cap, c)?;
            }
        }
        Ok(())
    })
}

/// One bar of [`bars`]: a value with the half-width of its 99 % CI.
pub struct Bar {
    pub name: String,
    pub value: f64,
    pub ci: Option<f64>,
}

/// A bar per entry, each in its own colour and named under it, with 99 % CI error bars;
/// y from 0 in `y_desc`'s unit (the values as given).
pub fn bars(path: &Path, title: &str, y_desc: &str, bars: &[Bar]) -> Result<(), Error> {
    let ytop = bars
        .iter()
        .map(|b| b.value + b.ci.unwrap_or(0.0).min(b.value.abs()))
        .filter(|v| v.is_finite())
        .fold(1e-9, f64::max)
        // Headroom over the tallest bar for the legend (up to eight or so names).
        * (1.15 + 0.04 * bars.len() as f64);
    let n = bars.len().max(1);
    // Under each bar its name up to any parenthesis (the legend has the whole name), so
    // that eight names fit side by side.
    let names: Vec<String> =
        bars.iter().map(|b| b.name.split(" (").next().unwrap_or_default().to_string()).collect();
    let fmt_x = |v: &f64| {
        let r = v.round();
        if (v - r).abs() < 1e-6 && r >= 0.0 {
            names.get(r as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let fmt_y = |v: &f64| short(*v);
    let axes = Axes {
        x_ticks: Some((0..n).map(|i| i as f64).collect()),
        x_fmt: Some(&fmt_x),
        y_fmt: Some(&fmt_y),
        ..Axes::new(-0.6..n as f64 - 0.4, 0.0..ytop, "", y_desc)
    };
    figure(path, title, axes, SeriesLabelPosition::UpperRight, |chart| {
        for (i, b) in bars.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let x = i as f64;
            let v = if b.value.is_finite() { b.value.clamp(0.0, ytop) } else { 0.0 };
            chart
                .draw_series([Rectangle::new([(x - 0.3, 0.0), (x + 0.3, v)], c.filled())])
                .map_err(|e| err(path, e))?
                .label(b.name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
            if let Some(ci) = b.ci.filter(|c| *c > 0.0 && b.value.is_finite()) {
                let bar = (x, (v - ci).max(0.0), (v + ci).min(ytop));
                ci_bar(chart, path, bar, 0.08, BLACK)?;
            }
        }
        Ok(())
    })
}

/// Several forwarded-against-generated curves on one chart (one per point of a scenario),
/// with the line forwarded = generated and 99 % CI bars.
pub fn throughput_series(
    path: &Path,
    title: &str,
    series: &[(String, Vec<Point>)],
) -> Result<(), Error> {
    let top =
        series.iter().flat_map(|s| s.1.iter().map(|p| p.x.max(p.y))).fold(1.0, f64::max) * 1.15;
    throughput_figure(path, title, top, |chart, div| {
        for (i, (name, pts)) in series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let pts = sorted_by_x(pts, |p| p.x);
            line(chart, path, pts.iter().map(|p| (p.x / div, p.y / div)), c, Some(name.clone()))?;
            dots(chart, path, pts.iter().map(|p| (p.x / div, p.y / div)), 4, c)?;
            throughput_ci_bars(chart, path, &pts, (div, top), c)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts_t() -> Vec<Point> {
        (1..=3).map(|i| Point { x: i as f64 * 1e5, y: i as f64 * 9e4, ci: None }).collect()
    }

    #[test]
    fn plots_render_to_png() {
        let dir = std::env::temp_dir().join(format!("tester-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.png");
        let pts: Vec<Point> = (1..=5)
            .map(|i| Point { x: i as f64 * 1e6, y: (i as f64 * 1e6).min(3e6), ci: Some(5e4) })
            .collect();
        throughput(&p, "test", &pts, Style::Steps).unwrap();
        let l = sibling(&p, "latency");
        assert_eq!(l.file_name().unwrap(), "t-latency.png");
        latency_percentiles(
            &l,
            "latency",
            &[Series { name: "a".into(), points: vec![(10.0, 0.5), (20.0, 0.99), (50.0, 1.0)] }],
        )
        .unwrap();
        against_rate(
            &dir.join("r.png"),
            "r",
            "µs",
            &[Series { name: "p50".into(), points: vec![(1e5, 3.0), (2e5, 4.0)] }],
            true,
        )
        .unwrap();
        let pts = |k: f64| (1..=4).map(|i| (i as f64 * k, i as f64 * 10.0, Some(1.0))).collect();
        let two = [
            XySeries { name: "a".into(), points: pts(1.0) },
            XySeries { name: "b".into(), points: pts(1000.0) },
        ];
        xy(&dir.join("x.png"), "x", "n", "pps", &two, &XScale::Log, false).unwrap();
        xy(&dir.join("y.png"), "y", "n", "µs", &two, &XScale::Log, true).unwrap();
        let b = |name: &str, value| Bar { name: name.into(), value, ci: Some(0.1) };
        bars(&dir.join("b.png"), "b", "Mpps", &[b("linux", 1.2), b("routeplex", 2.5)]).unwrap();
        let cats = XScale::Categories(vec!["1".into(), "real".into(), "1M".into(), "x".into()]);
        xy(&dir.join("c.png"), "c", "routes", "pps", &two[..1], &cats, false).unwrap();
        throughput_series(&dir.join("s.png"), "s", &[("one".into(), pts_t())]).unwrap();
        for f in ["t.png", "t-latency.png", "r.png", "x.png", "y.png", "b.png", "c.png", "s.png"] {
            let b = std::fs::read(dir.join(f)).unwrap();
            assert_eq!(&b[1..4], b"PNG", "{f}");
            assert!(b.len() > 10_000, "{f} has content");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn series_are_joined_in_x_order() {
        let trials = [(3e5, 1.0), (1e5, 2.0), (2e5, 3.0), (1e5, 4.0)];
        let v = sorted_by_x(&trials, |p| p.0);
        assert_eq!(v, [(1e5, 2.0), (1e5, 4.0), (2e5, 3.0), (3e5, 1.0)]);
    }

    #[test]
    fn palette_has_distinct_colours_for_eight_series() {
        assert!(COLORS.len() >= 8);
        for (i, a) in COLORS.iter().enumerate() {
            for b in &COLORS[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn log_axis_labels_the_data_x_values() {
        let xs = [1e4, 1e6, 1e5, 1e4, 5e5];
        let t = log_value_ticks(&xs, 3.5, 6.5);
        let labels: Vec<String> = t.iter().map(|v| log_label(*v)).collect();
        assert_eq!(labels, ["10k", "100k", "500k", "1M"]);
        // Many distinct values: 1, 2, 5 × 10^k over the span instead.
        let many: Vec<f64> = (1..=40).map(|i| i as f64 * 1e3).collect();
        let t = log_value_ticks(&many, 3.0, 40e3f64.log10());
        let labels: Vec<String> = t.iter().map(|v| log_label(*v)).collect();
        assert_eq!(labels, ["1k", "2k", "5k", "10k", "20k"]);
    }

    #[test]
    fn legends_read_human_labels() {
        assert_eq!(human_label("forwarded_pps"), "forwarded");
        assert_eq!(human_label("p99_us"), "p99 latency");
        assert_eq!(human_label("ndr_pps"), "ndr");
    }
}
