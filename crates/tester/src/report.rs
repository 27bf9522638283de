//! Outputs: the JSON report, a terminal table per method, and CSV (one row per trial).

use serde::Serialize;
use serde_json::{json, Value};

use crate::dut::DutReport;
use crate::method::ndrpdr::NdrPdrResult;
use crate::method::rfc2544::Rfc2544Result;
use crate::method::sweep::SweepResult;
use crate::method::TrialRecord;
use crate::progress::fmt_rate;

/// Where the threads ran.
#[derive(Clone, Debug, Serialize)]
pub struct Placement {
    /// CPUs this process may use.
    pub cpus: usize,
    /// The generator and sink thread.
    pub tester: String,
    /// The DUT's thread(s).
    pub dut: String,
}

/// The whole report of one test: what `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report<R: Serialize> {
    pub tool: String,
    pub test: String,
    /// How the test measures, in words, with its references.
    pub method: Value,
    pub placement: Placement,
    pub dut: Value,
    pub parameters: Value,
    pub results: R,
    pub summary: Value,
    /// What the DUT reported when it stopped.
    pub dut_report: DutReport,
    pub trials: Vec<TrialRecord>,
}

/// The method descriptions that go into reports.
pub fn method_text(test: &str) -> Value {
    let common = "Generator and sink share one thread: a pacer releases bursts when the computed time of their last frame has passed (spinning on CLOCK_MONOTONIC); every frame carries a flow sequence number, a trial tag and a TX timestamp; the sink counts per flow and per class. offered = frames the DUT's port accepted; refused = frames it did not (on mem ports: the DUT's receive ring was full; counted as loss); lost = offered - received; loss_ratio = (lost + refused) / attempted. Rates are frames over the measured window. 99 % confidence intervals: Student t over the repetitions.";
    match test {
        "sweep" => json!({
            "name": "offered vs forwarded load",
            "reference": "seed 000 §3.1 (Abeni et al., router tester: 10 runs, 99 % CI, 64-byte frames)",
            "text": format!("Steps of offered load (percentages of a maximum measured first, or explicit rates), each repeated; per step the mean forwarded rate and the half-width of its 99 % CI. {common}"),
        }),
        "rfc2544" => json!({
            "name": "RFC 2544 §26: throughput, latency, frame loss rate, back-to-back",
            "reference": "RFC 2544 §26.1-26.4; trials shorter than the RFC's 60 s unless --duration 60",
            "text": format!("Throughput: binary search between the floor and the maximum for the highest rate with no loss, repeated; a search whose floor already loses counts as 0 (found = false). Latency: every frame of the repeated trials at the throughput. Frame loss rate: 100 %, 90 %, ... of the maximum until two successive loss-free steps. Back-to-back: unpaced bursts, nothing offered again, binary search on the length. {common}"),
        }),
        _ => json!({
            "name": "NDR / PDR (MLRsearch style)",
            "reference": "FD.io CSIT MLRsearch (draft-ietf-bmwg-mlrsearch): NDR 0 % loss, PDR 0.5 % loss",
            "text": format!("Phases of growing trial duration narrow a bracket per target to a relative goal width; inherited bounds are re-measured at each phase's duration; then confirmation trials at the final rate and duration. {common}"),
        }),
    }
}

/// A table with right-aligned columns (the first left-aligned).
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with a header row.
    pub fn new(header: &[&str]) -> Table {
        Table { rows: vec![header.iter().map(|s| s.to_string()).collect()] }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, one line per row.
    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let w: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for r in &self.rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                let pad = w[c] - cell.chars().count();
                if c == 0 {
                    line += cell;
                    line += &" ".repeat(pad);
                } else {
                    line += "  ";
                    line += &" ".repeat(pad);
                    line += cell;
                }
            }
            out += line.trim_end();
            out.push('\n');
        }
        out
    }
}

fn pps(v: f64) -> String {
    group(v)
}

/// Rounded to an integer, with thousands separators: 18524113.4 → "18,524,113".
pub fn group(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let r = v.round();
    let digits = format!("{:.0}", r.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if r < 0.0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A byte count in binary units: 495616.3 → "484.0 KiB"; below 1 KiB, whole bytes.
pub fn bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if !v.is_finite() {
        return "-".into();
    }
    if v.abs() < 1024.0 {
        return format!("{v:.0} B");
    }
    let mut x = v / 1024.0;
    let mut u = 0;
    while x.abs() >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    format!("{x:.1} {}", UNITS[u])
}

fn opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(v) if prec == 0 => group(v),
        Some(v) => format!("{v:.prec$}"),
        None => "-".into(),
    }
}

fn pct(v: f64) -> String {
    format!("{:.4}%", v * 100.0)
}

/// The sweep as a table.
pub fn sweep_table(r: &SweepResult) -> String {
    let mut out = String::new();
    if let Some(m) = &r.max {
        out += &format!(
            "maximum: {} ({})\n",
            fmt_rate(m.pps),
            if m.measured { "measured: unpaced, refused frames offered again" } else { "given" }
        );
    }
    let mut t = Table::new(&[
        "step",
        "% max",
        "target pps",
        "attempted pps",
        "offered pps",
        "forwarded pps",
        "±99% CI",
        "loss",
        "p50 µs",
        "p99 µs",
        "max µs",
    ]);
    for (k, s) in r.steps.iter().enumerate() {
        t.row(vec![
            k.to_string(),
            opt(s.percent_of_max, 0),
            pps(s.target_pps),
            format!("{}{}", pps(s.attempted_pps), if s.reached_target { "" } else { "*" }),
            pps(s.offered_pps),
            pps(s.forwarded_pps),
            opt(s.ci99_pps, 0),
            pct(s.loss_ratio),
            opt(s.p50_us, 1),
            opt(s.p99_us, 1),
            opt(s.max_us, 1),
        ]);
    }
    out += &t.render();
    if r.steps.iter().any(|s| !s.reached_target) {
        out += "* the generator put out less than 99 % of the target: the tester, not the DUT, limited that step\n";
    }
    out
}

/// The RFC 2544 result as text and tables.
pub fn rfc2544_table(r: &Rfc2544Result) -> String {
    let mut out = format!(
        "maximum: {} ({})\n",
        fmt_rate(r.max.pps),
        if r.max.measured { "measured: unpaced, refused frames offered again" } else { "given" }
    );
    let th = &r.throughput;
    out += &format!(
        "throughput (§26.1): {} ± {} (99 % CI, {} searches, resolution {:.0} pps, floor {:.0} pps){}\n",
        fmt_rate(th.pps),
        th.summary.ci99.map_or("-".into(), fmt_rate),
        th.searches.len(),
        th.resolution_pps,
        th.floor_pps,
        if th.found { "" } else { "; some searches found no loss-free rate at or above the floor (counted as 0)" }
    );
    match &r.latency {
        Some(l) => {
            out += &format!(
                "latency (§26.2) at {}: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs, mean {:.1} µs over {} trials (loss in them: mean {})\n",
                fmt_rate(l.rate_pps),
                l.all.p50_us,
                l.all.p99_us,
                l.all.max_us,
                l.all.mean_us,
                l.trials.len(),
                pct(l.loss.mean)
            );
        }
        None => out += "latency (§26.2): not measured (no throughput found, or skipped)\n",
    }
    if !r.frame_loss.is_empty() {
        out += "frame loss rate (§26.3):\n";
        let mut t = Table::new(&[
            "% max",
            "target pps",
            "offered pps",
            "forwarded pps",
            "±99% CI",
            "loss",
            "loss ±99% CI",
        ]);
        for s in &r.frame_loss {
            t.row(vec![
                format!("{:.0}", s.percent_of_max),
                pps(s.target_pps),
                pps(s.offered_pps),
                pps(s.forwarded.mean),
                opt(s.forwarded.ci99, 0),
                pct(s.loss_ratio.mean),
                s.loss_ratio.ci99.map_or("-".into(), pct),
            ]);
        }
        out += &t.render();
    }
    if let Some(b) = &r.back_to_back {
        out += &format!(
            "back-to-back (§26.4): {:.0} ± {} frames (99 % CI, {} searches, limit {}, resolution {}){}\n",
            b.frames.mean,
            opt(b.frames.ci99, 0),
            b.per_search.len(),
            b.limit_frames,
            b.resolution_frames,
            if b.reached_limit { "; no loss even at the limit: a lower bound" } else { "" }
        );
    }
    out
}

/// The NDR/PDR result as a table.
pub fn ndrpdr_table(r: &NdrPdrResult) -> String {
    let mut out = format!(
        "maximum: {} ({}); floor {:.0} pps\n",
        fmt_rate(r.max.pps),
        if r.max.measured { "measured: unpaced, refused frames offered again" } else { "given" },
        r.floor_pps
    );
    let mut t = Table::new(&[
        "phase",
        "trial s",
        "width",
        "NDR lower",
        "NDR upper",
        "PDR lower",
        "PDR upper",
        "trials",
    ]);
    for (p, ph) in r.phases.iter().enumerate() {
        t.row(vec![
            p.to_string(),
            format!("{:.3}", ph.duration_s),
            format!("{:.2}%", ph.width * 100.0),
            pps(ph.ndr.0),
            opt(ph.ndr.1, 0),
            pps(ph.pdr.0),
            opt(ph.pdr.1, 0),
            ph.trials.len().to_string(),
        ]);
    }
    out += &t.render();
    let mut t = Table::new(&[
        "",
        "loss target",
        "rate pps",
        "upper pps",
        "confirmed",
        "forwarded pps",
        "±99% CI",
        "loss",
        "p50 µs",
        "p99 µs",
        "max µs",
    ]);
    for b in [&r.ndr, &r.pdr] {
        t.row(vec![
            b.name.clone(),
            pct(b.loss_target),
            if b.found { pps(b.rate_pps) } else { "none".into() },
            opt(b.upper_pps, 0),
            format!("{}/{}", b.confirmed, b.confirm.len()),
            pps(b.forwarded.mean),
            opt(b.forwarded.ci99, 0),
            pct(b.loss.mean),
            if b.p50_us.n > 0 { format!("{:.1}", b.p50_us.mean) } else { "-".into() },
            if b.p99_us.n > 0 { format!("{:.1}", b.p99_us.mean) } else { "-".into() },
            opt(b.max_us, 1),
        ]);
    }
    out + &t.render()
}

/// Column names of the CSV.
pub const CSV_HEADER: &str = "phase,step,rep,attempt,used,valid,target_pps,duration_s,attempted,offered,refused,retried,received,lost,duplicates,reordered,stale,foreign,attempted_pps,offered_pps,forwarded_pps,loss_ratio,min_us,mean_us,p50_us,p90_us,p99_us,p999_us,max_us,burst,mean_late_ns,max_late_ns,late_over_100us,max_stall_us,drain_ms";

/// One row per trial.
pub fn csv(trials: &[TrialRecord]) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for t in trials {
        out += &csv_row(t);
    }
    out
}

/// The CSV row of one trial (see [`CSV_HEADER`]), with its newline.
pub fn csv_row(t: &TrialRecord) -> String {
    let mut out = String::new();
    {
        let r = &t.result;
        let l = r.latency.unwrap_or_default();
        let lat = |v: f64| if r.latency.is_some() { format!("{v:.3}") } else { String::new() };
        out += &format!(
            "{},{},{},{},{},{},{},{:.6},{},{},{},{},{},{},{},{},{},{},{:.1},{:.1},{:.1},{:.9},{},{},{},{},{},{},{},{},{:.0},{},{},{:.1},{:.3}\n",
            t.phase,
            t.step,
            t.rep,
            t.attempt,
            t.used,
            r.valid,
            r.target_pps.map_or("max".into(), |p| format!("{p:.1}")),
            r.duration_s,
            r.attempted,
            r.offered,
            r.refused,
            r.retried,
            r.received,
            r.lost,
            r.duplicates,
            r.reordered,
            r.stale,
            r.foreign,
            r.attempted_pps,
            r.offered_pps,
            r.forwarded_pps,
            r.loss_ratio,
            lat(l.min_us),
            lat(l.mean_us),
            lat(l.p50_us),
            lat(l.p90_us),
            lat(l.p99_us),
            lat(l.p999_us),
            lat(l.max_us),
            r.pacing.burst,
            r.pacing.mean_late_ns,
            r.pacing.max_late_ns,
            r.pacing.late_over_100us,
            r.max_stall_us,
            r.drain_ms,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_columns_line_up() {
        let mut t = Table::new(&["step", "pps"]);
        t.row(vec!["0".into(), "1000".into()]);
        t.row(vec!["10".into(), "5".into()]);
        assert_eq!(t.render(), "step   pps\n0     1000\n10       5\n");
    }

    #[test]
    fn numbers_are_grouped_and_bytes_have_units() {
        assert_eq!(group(18524113.4), "18,524,113");
        assert_eq!(group(999.5), "1,000");
        assert_eq!(group(-1234.0), "-1,234");
        assert_eq!(group(0.0), "0");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(495616.3), "484.0 KiB");
        assert_eq!(bytes(2968371.0), "2.8 MiB");
    }
}
