//! A scenario's outputs: the terminal table, CSV (one row per point, one per trial) and plots.

use std::path::Path;

use super::run::{PointResult, ScenarioReport};
use super::{MethodKind, CLASS_METRICS, DUT_KEYS, TRAFFIC_KEYS};
use crate::plot::{self, Point, XScale, XySeries};
use crate::progress::fmt_rate;
use crate::report::{self, Table};
use crate::Error;

/// Classes seen at any point, in order of first appearance.
fn class_names(r: &ScenarioReport) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in &r.points {
        for c in &p.classes {
            if !out.contains(&c.name) {
                out.push(c.name.clone());
            }
        }
    }
    out
}

/// The report's columns with `*.<metric>` expanded to every class.
fn columns(r: &ScenarioReport, cols: &[String]) -> Vec<String> {
    let classes = class_names(r);
    let mut out = Vec::new();
    for c in cols {
        match c.strip_prefix("*.") {
            Some(m) => out.extend(classes.iter().map(|n| format!("{n}.{m}"))),
            None => out.push(c.clone()),
        }
    }
    out
}

fn format_metric(name: &str, v: f64) -> String {
    let m = name.rsplit('.').next().unwrap_or(name);
    if !v.is_finite() {
        return "-".into();
    }
    if m.ends_with("_pps") {
        report::group(v)
    } else if m.ends_with("_bytes") || m.contains("bytes_per_") {
        report::bytes(v)
    } else if matches!(m, "loss_ratio" | "drop_vs_first" | "share" | "forwarded_ratio") {
        format!("{:.3}%", v * 100.0)
    } else if m == "vs_first" {
        format!("{v:.3}")
    } else if m.ends_with("_us") {
        format!("{v:.1}")
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        report::group(v)
    } else {
        format!("{v:.3}")
    }
}

/// A point's value for column `col`, if it has one.
pub(crate) fn value(r: &ScenarioReport, p: &PointResult, col: &str) -> Option<f64> {
    let _ = r;
    point_value(p, col)
}

/// A point's value of metric or `<class>.<metric>` `col`, if it has one.
pub(crate) fn point_value(p: &PointResult, col: &str) -> Option<f64> {
    if let Some((class, m)) = col.split_once('.') {
        if CLASS_METRICS.contains(&m) {
            let c = p.classes.iter().find(|c| c.name == class)?;
            return match m {
                "share" => Some(c.share),
                "offered_pps" => Some(c.offered_pps),
                "forwarded_pps" => Some(c.forwarded_pps),
                "loss_ratio" => Some(c.loss_ratio),
                "attempted_pps" => Some(c.attempted_pps),
                "forwarded_ratio" => Some(c.forwarded_ratio),
                "dut_received" => c.dut_received.map(|v| v as f64),
                "dut_forwarded" => c.dut_forwarded.map(|v| v as f64),
                "offered" => Some(c.offered as f64),
                "received" => Some(c.received as f64),
                "warmup_offered" => Some(c.warmup_offered as f64),
                _ => None,
            };
        }
    }
    p.metrics.get(col).copied()
}

fn cell(r: &ScenarioReport, p: &PointResult, col: &str) -> String {
    let sc = r.scenario();
    if col == sc.axis.label || sc.axis.params.iter().any(|x| x == col) {
        return p.axis.clone();
    }
    if let Some(s) = &sc.series {
        if col == s.label || s.params.iter().any(|x| x == col) {
            return p.series.clone().unwrap_or_default();
        }
    }
    if DUT_KEYS.contains(&col) || TRAFFIC_KEYS.contains(&col) {
        return p.params.get(col);
    }
    if p.skipped.is_some() {
        return String::new();
    }
    value(r, p, col).map_or("-".into(), |v| format_metric(col, v))
}

/// The report as text: what ran, then one row per point, the sweep curves, the derived
/// figures and notes.
pub fn table(r: &ScenarioReport) -> String {
    let sc = r.scenario();
    let mut out = format!("scenario {}: {}\n", sc.name, sc.title);
    if !sc.reproduces.is_empty() {
        out += &format!("reproduces: {}\n", sc.reproduces);
    }
    let mut duts: Vec<&str> = Vec::new();
    for p in &r.points {
        if let Some(n) = &p.dut_name {
            if !duts.contains(&n.as_str()) {
                duts.push(n);
            }
        }
    }
    if duts.len() == 1 {
        out += &format!("DUT: {}\n", duts[0]);
    }
    let m = &r.method;
    out += &format!(
        "method: {} per point; trials of {} s after {} s warm-up, {} repetitions{}\n",
        m["kind"].as_str().unwrap_or("?"),
        m["duration_s"],
        m["warmup_s"],
        m["repetitions"],
        if r.quick { " (--quick)" } else { "" }
    );
    if let (Some(tester), Some(dut)) = (r.placement["tester"].as_str(), r.placement["dut"].as_str())
    {
        out += &format!("placement: tester {tester}; DUT {dut}\n");
    }
    if let Some(c) = r.summary["capacity_pps"].as_f64() {
        out += &format!("capacity (what % rates refer to): {}\n", fmt_rate(c));
    }
    let cols = columns(r, &sc.report.columns);
    let mut t = Table::new(&cols.iter().map(String::as_str).collect::<Vec<_>>());
    let mut notes = Vec::new();
    for p in &r.points {
        let mut row: Vec<String> = cols.iter().map(|c| cell(r, p, c)).collect();
        if let Some(why) = &p.skipped {
            if let Some(i) = row.iter().position(String::is_empty) {
                row[i] = "skipped".into();
            }
            notes.push(format!("{}: skipped: {why}", p.label));
        }
        t.row(row);
    }
    out += &t.render();
    if sc.method.kind == MethodKind::Sweep {
        for p in r.points.iter().filter(|p| !p.curve.is_empty()) {
            out += &format!("{}:\n", p.label);
            let mut t =
                Table::new(&["  target pps", "attempted pps", "forwarded pps", "±99% CI", "loss"]);
            for s in &p.curve {
                t.row(vec![
                    format!("  {}", report::group(s.target_pps)),
                    format!(
                        "{}{}",
                        report::group(s.attempted_pps),
                        if s.attempted_pps < 0.99 * s.target_pps { "*" } else { "" }
                    ),
                    report::group(s.forwarded_pps),
                    s.ci99_pps.map_or("-".into(), report::group),
                    format!("{:.4}%", s.loss_ratio * 100.0),
                ]);
            }
            out += &t.render();
        }
        if r.points.iter().flat_map(|p| &p.curve).any(|s| s.attempted_pps < 0.99 * s.target_pps) {
            notes.push("* the generator put out less than 99 % of the target: the tester, not the DUT, limited that step".into());
        }
    }
    if let Some(fits) = r.derived["linear_fits"].as_array() {
        for f in fits {
            let fit = &f["fit"];
            if fit.is_null() {
                continue;
            }
            out += &format!(
                "linear fit of {} against {}{}: slope {:.4}, intercept {:.1}, r² {:.4} ({} points)\n",
                f["of"].as_str().unwrap_or("?"),
                sc.axis.label,
                f["series"].as_str().map_or(String::new(), |s| format!(" ({s})")),
                fit["slope"].as_f64().unwrap_or(f64::NAN),
                fit["intercept"].as_f64().unwrap_or(f64::NAN),
                fit["r_squared"].as_f64().unwrap_or(f64::NAN),
                fit["n"],
            );
        }
    }
    for g in r.derived["goals"].as_array().into_iter().flatten() {
        out += &goal_line(g);
    }
    let invalid = r.summary["invalid_trials_used"].as_u64().unwrap_or(0);
    if invalid > 0 {
        notes.push(format!("{invalid} trial(s) in the results had the tester stalled on every attempt (valid: false in the JSON and the trials CSV)"));
    }
    for n in notes {
        out += &format!("note: {n}\n");
    }
    out
}

fn csv_quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row per point: its labels, every metric, every class figure.
pub fn points_csv(r: &ScenarioReport) -> String {
    let mut metrics: Vec<String> = Vec::new();
    for p in &r.points {
        for k in p.metrics.keys() {
            if !metrics.contains(k) {
                metrics.push(k.clone());
            }
        }
    }
    metrics.sort();
    let classes = class_names(r);
    let class_cols: Vec<String> = classes
        .iter()
        .flat_map(|c| CLASS_METRICS.iter().map(move |m| format!("{c}.{m}")))
        .collect();
    let mut out = String::from("point,label,axis,series,skipped");
    for c in metrics.iter().chain(&class_cols) {
        out.push(',');
        out += &csv_quote(c);
    }
    out.push('\n');
    for p in &r.points {
        out += &format!(
            "{},{},{},{},{}",
            p.index,
            csv_quote(&p.label),
            csv_quote(&p.axis),
            csv_quote(p.series.as_deref().unwrap_or("")),
            csv_quote(p.skipped.as_deref().unwrap_or(""))
        );
        for c in metrics.iter().chain(&class_cols) {
            out.push(',');
            if let Some(v) = value(r, p, c).filter(|v| v.is_finite()) {
                out += &format!("{v}");
            }
        }
        out.push('\n');
    }
    out
}

/// One row per trial, with the point it belongs to.
pub fn trials_csv(r: &ScenarioReport) -> String {
    let mut out = format!("point,{}\n", report::CSV_HEADER);
    for t in &r.trials {
        out += &format!("{},{}", t.point, report::csv_row(&t.record));
    }
    out
}

/// The plotted metrics against the axis: one line per metric (and class) and series value.
pub fn metric_plot(r: &ScenarioReport, path: &Path) -> Result<(), Error> {
    let sc = r.scenario();
    let ys = columns(r, &sc.report.plot_y);
    let numeric = r.points.iter().all(|p| p.x.is_some());
    let mut cats: Vec<String> = Vec::new();
    for p in &r.points {
        if !cats.contains(&p.axis) {
            cats.push(p.axis.clone());
        }
    }
    let scale = match (numeric, sc.axis.log) {
        (true, true) => XScale::Log,
        (true, false) => XScale::Linear,
        _ => XScale::Categories(cats.clone()),
    };
    let x_of = |p: &PointResult| -> f64 {
        if numeric {
            p.x.unwrap_or(0.0)
        } else {
            cats.iter().position(|c| c == &p.axis).unwrap_or(0) as f64
        }
    };
    let all_pps = ys.iter().all(|y| y.ends_with("_pps"));
    // Latencies (µs) span orders of magnitude (p50 to max): a log y axis.
    let all_us = ys.iter().all(|y| y.ends_with("_us"));
    let top = r
        .points
        .iter()
        .flat_map(|p| ys.iter().filter_map(|y| value(r, p, y)))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (div, unit) = if !all_pps {
        (1.0, "")
    } else if top >= 2e6 {
        (1e6, "Mpps")
    } else if top >= 2e3 {
        (1e3, "kpps")
    } else {
        (1.0, "pps")
    };
    let mut series_vals: Vec<Option<String>> = Vec::new();
    for p in &r.points {
        if !series_vals.contains(&p.series) {
            series_vals.push(p.series.clone());
        }
    }
    let mut series = Vec::new();
    for y in &ys {
        for s in &series_vals {
            let points: Vec<(f64, f64, Option<f64>)> = r
                .points
                .iter()
                .filter(|p| &p.series == s && p.skipped.is_none())
                .filter_map(|p| {
                    let v = value(r, p, y)?;
                    let ci = (y == "forwarded_pps")
                        .then(|| p.metrics.get("forwarded_ci99_pps").copied())
                        .flatten();
                    Some((x_of(p), v / div, ci.map(|c| c / div)))
                })
                .collect();
            if points.is_empty() {
                continue;
            }
            let name = match (s, &sc.series, ys.len()) {
                (Some(v), Some(sa), 1) => format!("{} = {v}", sa.label),
                (Some(v), Some(sa), _) => format!("{}, {} = {v}", plot::human_label(y), sa.label),
                _ => plot::human_label(y),
            };
            series.push(XySeries { name, points });
        }
    }
    let y_desc = if !sc.report.y_label.is_empty() {
        if unit.is_empty() {
            sc.report.y_label.clone()
        } else {
            format!("{} ({unit})", sc.report.y_label)
        }
    } else {
        let names: Vec<String> = ys.iter().map(|y| plot::human_label(y)).collect();
        let names = names.join(", ");
        match (unit.is_empty(), all_us) {
            (false, _) => format!("{names} ({unit})"),
            (true, true) => format!("{names} (µs)"),
            (true, false) => names,
        }
    };
    let title = format!("{}{}", sc.title, if r.quick { " (--quick)" } else { "" });
    plot::xy(path, &title, &sc.axis.label, &y_desc, &series, &scale, all_us)
}

/// Sweep scenarios: every point's offered-against-forwarded curve on one chart. Returns
/// false (drawing nothing) for other methods.
pub fn curves_plot(r: &ScenarioReport, path: &Path) -> Result<bool, Error> {
    let series: Vec<(String, Vec<Point>)> = r
        .points
        .iter()
        .filter(|p| !p.curve.is_empty())
        .map(|p| {
            let pts = p
                .curve
                .iter()
                .map(|s| Point { x: s.attempted_pps, y: s.forwarded_pps, ci: s.ci99_pps })
                .collect();
            (p.label.clone(), pts)
        })
        .collect();
    if series.is_empty() {
        return Ok(false);
    }
    let sc = r.scenario();
    let title =
        format!("{}: offered vs forwarded{}", sc.title, if r.quick { " (--quick)" } else { "" });
    plot::throughput_series(path, &title, &series)?;
    Ok(true)
}

/// One goal's line: met or not, and the value at each point it applies to.
fn goal_line(g: &serde_json::Value) -> String {
    let points = g["points"].as_array().map_or(0, Vec::len);
    let verdict = match g["met"].as_bool() {
        Some(true) => "met",
        Some(false) => "NOT met",
        None if points > 0 => "not shown",
        None => "not measured",
    };
    let mut out = format!("goal {}: {verdict}", g["goal"].as_str().unwrap_or("?"));
    let at: Vec<String> = g["points"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let v = p["value"].as_f64().unwrap_or(f64::NAN);
            format!(
                "{} {}{}",
                p["point"].as_str().unwrap_or("?"),
                if v.is_finite() { format!("{v:.4}") } else { "-".into() },
                match p["met"].as_bool() {
                    Some(true) => "",
                    Some(false) => " (no)",
                    None => " (not shown)",
                }
            )
        })
        .collect();
    if !at.is_empty() {
        out += &format!(" [{}]", at.join("; "));
    }
    for why in g["why"].as_array().into_iter().flatten().filter_map(|w| w.as_str()) {
        out += &format!("\n  why: {why}");
    }
    out.push('\n');
    out
}
