//! `--baseline BINARY`: a benchmark measured against another build of routeplex (the previous
//! release, say) in interleaved pairs (this binary, the baseline, this binary, …), each side a
//! child process running the same `bench` command with `--json`, and the probes of
//! [`tester::pairs`] timed before each trial. Both sides pay the same start-up (a fresh
//! process, the table built again), so the pair compares builds, not set-ups.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::{bail, Context, Result};
use serde_json::{json, Value};

/// One side's run: the child's JSON, and the figure read from it.
struct Side {
    figure: f64,
    out: Value,
}

/// Runs `bench ARGS --json` with `bin` and returns its last stdout line's JSON's `field`.
fn side(bin: &Path, args: &[String], field: &str) -> Result<Side> {
    let o = Command::new(bin)
        .arg("bench")
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stdout = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        let tail: Vec<&str> = err.lines().rev().take(10).collect();
        bail!(
            "{} bench {} --json failed ({}):\n{}",
            bin.display(),
            args.join(" "),
            o.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let line =
        stdout.lines().rev().find(|l| l.trim_start().starts_with('{')).with_context(|| {
            format!("{} bench {} --json printed no JSON object", bin.display(), args.join(" "))
        })?;
    let out: Value = serde_json::from_str(line)
        .with_context(|| format!("{} bench {}: its JSON", bin.display(), args.join(" ")))?;
    let figure = out[field].as_f64().with_context(|| {
        format!(
            "{} bench {}: no number `{field}` in its JSON (an older build with another output?)",
            bin.display(),
            args.join(" ")
        )
    })?;
    Ok(Side { figure, out })
}

/// Measures `bench ARGS` of this binary against `baseline`'s, `pairs` times interleaved, by
/// `field` (in `unit`), and prints the pairs (JSON with `json`).
pub fn against_baseline(
    baseline: &Path,
    args: &[String],
    field: &str,
    unit: &str,
    pairs: usize,
    json: bool,
) -> Result<()> {
    crate::ensure!((1..=100).contains(&pairs), "--pairs {pairs} is outside 1..=100");
    crate::ensure!(
        baseline.is_file(),
        "--baseline {}: no such file (give the previous release's routeplex binary)",
        baseline.display()
    );
    let this = std::env::current_exe().context("this binary's path")?;
    let load_before = tester::pairs::load_average();
    let runs =
        tester::pairs::run(pairs, |_| side(&this, args, field), |_| side(baseline, args, field))?;
    let summary = tester::pairs::Summary::from_measured(
        "this build",
        "baseline",
        unit,
        &runs,
        |s| s.figure,
        |s| s.figure,
    );
    // What limited each run and where its threads ran stay in the text.
    let keep = |v: &Value| {
        format!(
            "limited by {}; {}{}",
            v["limited_by"].as_str().unwrap_or("?"),
            v["placement"]["summary"].as_str().unwrap_or("placement not reported"),
            v["note"].as_str().map_or(String::new(), |n| format!(" ({n})"))
        )
    };
    if json {
        println!(
            "{}",
            json!({
                "command": format!("bench {}", args.join(" ")),
                "this_build": this.display().to_string(),
                "baseline": baseline.display().to_string(),
                "field": field,
                "pairs": summary,
                "ratio_to_baseline": summary.ratio.median,
                "load_average_before": load_before,
                "load_average_after": tester::pairs::load_average(),
                "this_build_runs": runs.iter().map(|(a, _)| &a.value.out).collect::<Vec<_>>(),
                "baseline_runs": runs.iter().map(|(_, b)| &b.value.out).collect::<Vec<_>>(),
                "method": "interleaved pairs (this build, baseline, this build, ...; --pairs), each trial a child process running the same `bench` command with --json, a fixed memory probe (dependent random reads over 8 MiB) and compute probe timed in this process before each; ratio_to_baseline = median over the pairs of this build's figure / the baseline's (pairs.ratio has min and max); a pair is flagged when its two trials' probes differ by more than 10 %",
            })
        );
    } else {
        println!(
            "bench {}: {field} of this build ({}) against {} in {pairs} interleaved pairs, ratio = this / baseline:",
            args.join(" "),
            this.display(),
            baseline.display()
        );
        for (i, (a, b)) in runs.iter().enumerate() {
            println!(
                "  pair {}: this build {}; baseline {}",
                i + 1,
                keep(&a.value.out),
                keep(&b.value.out)
            );
        }
        for l in summary.lines() {
            println!("{l}");
        }
    }
    Ok(())
}
