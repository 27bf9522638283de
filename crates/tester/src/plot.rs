//! PNG plots: forwarded against offered load with 99 % CI bars, and latency percentiles.
//!
//! Pure Rust (plotters' bitmap backend); the font, DejaVu Sans, ships in `assets/` with its
//! license and is registered on first use.

use std::ops::Range;
use std::path::Path;
use std::sync::Once;

use plotters::chart::SeriesAnno;
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

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(90, 90, 90),
];

/// How to draw the points of a throughput plot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Means of steps, joined in order of load, with their 99 % CI bars.
    Steps,
    /// Single trials (a search's), unjoined.
    Trials,
}

/// The chart every plot here draws on: linear f64 axes on a PNG.
type Chart<'a, 'p> =
    ChartContext<'a, BitMapBackend<'p>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// What a figure's axes span and read; the label count and formatters are `None` where
/// plotters' defaults serve.
struct Axes<'f> {
    x: Range<f64>,
    y: Range<f64>,
    x_desc: String,
    y_desc: String,
    x_labels: Option<usize>,
    x_fmt: Option<&'f dyn Fn(&f64) -> String>,
    y_fmt: Option<&'f dyn Fn(&f64) -> String>,
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
        .build_cartesian_2d(axes.x, axes.y)
        .map_err(|e| err(path, e))?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .axis_desc_style(("sans-serif", 17))
        .label_style(("sans-serif", 14));
    if let Some(n) = axes.x_labels {
        mesh.x_labels(n);
    }
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
        let mut pts: Vec<Point> = points.to_vec();
        pts.sort_by(|a, b| a.x.total_cmp(&b.x));
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
/// the x axis is in "nines" (0: 0 %, 1: 90 %, 2: 99 %, 3: 99.9 %...), the y axis in µs.
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
    let ymax = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0, f64::max) * 1.1;
    let fmt_x = |v: &f64| {
        let p = 100.0 * (1.0 - 10f64.powf(-v));
        if *v < 0.5 {
            "0%".into()
        } else {
            format!("{}%", trim(p))
        }
    };
    let axes = Axes {
        x_labels: Some(xmax as usize + 1),
        x_fmt: Some(&fmt_x),
        ..Axes::new(0.0..xmax, 0.0..ymax, "percentile", "latency (µs)")
    };
    figure(path, title, axes, SeriesLabelPosition::UpperLeft, |chart| {
        for (i, s) in series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            line(chart, path, s.points.iter().map(|p| (nines(p.1), p.0)), c, Some(s.name.clone()))?;
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
        let mut pts = s.points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        line(chart, path, pts.iter().map(&at), c, Some(s.name.clone()))?;
        dots(chart, path, pts.iter().map(&at), 3, c)?;
    }
    Ok(())
}

/// Lines of `y` against a rate on x (latency against offered load, say).
pub fn against_rate(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<(), Error> {
    let xtop = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0, f64::max) * 1.05;
    let ytop = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(1e-9, f64::max) * 1.1;
    let (div, unit) = rate_unit(xtop);
    let axes = Axes::new(0.0..xtop / div, 0.0..ytop, format!("generated load ({unit})"), y_desc);
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
/// x axis; y from 0.
pub fn xy(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[XySeries],
    scale: &XScale,
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
    let ytop = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1 + p.2.unwrap_or(0.0).min(p.1.abs())))
        .filter(|v| v.is_finite())
        .fold(1e-9, f64::max)
        * 1.12;
    let fmt_x = |v: &f64| -> String {
        match scale {
            XScale::Linear => short(*v),
            XScale::Log => {
                let r = v.round();
                if (v - r).abs() < 1e-6 {
                    short(10f64.powf(r))
                } else {
                    String::new()
                }
            }
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
    let nlabels = match scale {
        XScale::Categories(c) => c.len() * 2 + 1,
        XScale::Log => ((x1 - x0).ceil() as usize + 1) * 4,
        XScale::Linear => 10,
    };
    let fmt_y = |v: &f64| short(*v);
    let axes = Axes {
        x_labels: Some(nlabels.max(2)),
        x_fmt: Some(&fmt_x),
        y_fmt: Some(&fmt_y),
        ..Axes::new(x0..x1, 0.0..ytop, x_desc, y_desc)
    };
    let cap = (x1 - x0) * 0.006;
    figure(path, title, axes, SeriesLabelPosition::LowerRight, |chart| {
        for (i, s) in series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let mut v: Vec<(f64, f64, Option<f64>)> =
                s.points.iter().filter(|p| p.1.is_finite()).map(|p| (tx(p.0), p.1, p.2)).collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            line(chart, path, v.iter().map(|p| (p.0, p.1)), c, Some(s.name.clone()))?;
            dots(chart, path, v.iter().map(|p| (p.0, p.1)), 4, c)?;
            for p in v.iter().filter(|p| p.2.is_some_and(|c| c > 0.0)) {
                let ci = p.2.unwrap_or(0.0);
                ci_bar(chart, path, (p.0, (p.1 - ci).max(0.0), (p.1 + ci).min(ytop)), cap, c)?;
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
            let mut pts = pts.clone();
            pts.sort_by(|a, b| a.x.total_cmp(&b.x));
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
        )
        .unwrap();
        let pts = |k: f64| (1..=4).map(|i| (i as f64 * k, i as f64 * 10.0, Some(1.0))).collect();
        let two = [
            XySeries { name: "a".into(), points: pts(1.0) },
            XySeries { name: "b".into(), points: pts(1000.0) },
        ];
        xy(&dir.join("x.png"), "x", "n", "pps", &two, &XScale::Log).unwrap();
        let cats = XScale::Categories(vec!["1".into(), "real".into(), "1M".into(), "x".into()]);
        xy(&dir.join("c.png"), "c", "routes", "pps", &two[..1], &cats).unwrap();
        throughput_series(&dir.join("s.png"), "s", &[("one".into(), pts_t())]).unwrap();
        for f in ["t.png", "t-latency.png", "r.png", "x.png", "c.png", "s.png"] {
            let b = std::fs::read(dir.join(f)).unwrap();
            assert_eq!(&b[1..4], b"PNG", "{f}");
            assert!(b.len() > 10_000, "{f} has content");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
