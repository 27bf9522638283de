use std::time::Duration;

use super::*;
use crate::runner::RunnerOptions;

const GOOD: &str = r#"# A test scenario.
# Second line of the header.
name: t-isolation
title: two classes, one overloaded
reproduces: nothing in particular
dut:
  kind: multi-wire
  vrs: 2
  ingress_ports: 2
  ring: 1024
axis:
  param: rate.c0
  values: [5k, 20k]
  label: c0 offered
traffic:
  flows: 16
  rates: { c0: 5k, c1: 5k }
method:
  kind: rate
  duration: 0.1
  repetitions: 2
quick:
  duration: 0.05
  warmup: 0
report:
  columns: [c0 offered, offered_pps, forwarded_pps, "*.forwarded_pps", "*.dut_forwarded"]
  plot: { y: ["*.forwarded_pps", forwarded_pps] }
  derived: [drop_vs_first, linear_fit]
"#;

fn err(text: &str) -> ScenarioError {
    Scenario::parse(text, "bad.yaml").expect_err("accepted a bad scenario")
}

fn with(find: &str, replace: &str) -> String {
    assert!(GOOD.contains(find), "{find}");
    GOOD.replacen(find, replace, 1)
}

#[test]
fn a_scenario_parses_with_its_header_axis_and_report() {
    let sc = Scenario::parse(GOOD, "good.yaml").unwrap();
    assert_eq!(sc.name, "t-isolation");
    assert_eq!(sc.about, "A test scenario.\nSecond line of the header.");
    assert_eq!(sc.axis.params, ["rate.c0"]);
    assert_eq!(sc.axis.values.iter().map(|v| v.number).collect::<Vec<_>>(), [Some(5e3), Some(2e4)]);
    assert_eq!(sc.axis.quick.len(), 2, "first and last by default");
    assert_eq!(sc.method.kind, MethodKind::Rate);
    assert_eq!(sc.method.duration, Duration::from_millis(100));
    assert_eq!(sc.quick.warmup, Duration::ZERO);
    let pts = sc.points(false);
    assert_eq!(pts.len(), 2);
    assert_eq!(
        pts[1].2.traffic.rates,
        [("c0".into(), RateSpec::Pps(2e4)), ("c1".into(), RateSpec::Pps(5e3))]
    );
    assert_eq!(sc.report.derived, [Derived::DropVsFirst, Derived::LinearFit]);
}

#[test]
fn bad_scenarios_name_file_line_field_and_value() {
    let e = err(&with("vrs: 2", "vrs: 0"));
    assert_eq!((e.file.as_str(), e.line, e.field.as_str()), ("bad.yaml", 8, "dut.vrs"));
    assert_eq!(e.value.as_deref(), Some("0"));
    assert!(e.to_string().starts_with("bad.yaml:8:8: dut.vrs: vrs 0 is out of range"), "{e}");
    let e = err(&with("values: [5k, 20k]", "values: [5k, fast]"));
    assert_eq!(
        (e.line, e.field.as_str(), e.value.as_deref()),
        (13, "axis.values[1]", Some("fast"))
    );
    let e = err(&with("  flows: 16", "  flow: 16"));
    assert!(e.message.contains("unknown key \"flow\""), "{e}");
    assert_eq!(e.field, "traffic.flow");
    let e = err(&with("kind: rate", "kind: fastest"));
    assert_eq!((e.field.as_str(), e.value.as_deref()), ("method.kind", Some("fastest")));
    let e = err(&with("\"*.dut_forwarded\"", "\"*.nonsense\""));
    assert!(e.message.contains("unknown column"), "{e}");
    let e = err(&with("kind: multi-wire", "kind: teleport"));
    assert!(e.message.contains("teleport"), "{e}");
    let e = err(&with("  ring: 1024", "  ring: 1000"));
    assert!(e.message.contains("power of two"), "{e}");
    let e = err(&with("name: t-isolation", "name: no/slashes"));
    assert_eq!(e.field, "name");
    let e = err(&with("  ring: 1024", "  reservation: 150%"));
    assert_eq!(
        (e.line, e.field.as_str(), e.value.as_deref()),
        (10, "dut.reservation", Some("150%"))
    );
    assert!(e.message.contains("(0, 100]"), "{e}");
    let e = err(&with("  ring: 1024", "  reservation: lots"));
    assert!(e.message.contains("packets:N"), "{e}");
    let e = err(&with("  ring: 1024", "  reserved_vrs: 3"));
    assert!(e.message.contains("reserved_vrs 3 is more than the 2 VRs"), "{e}");
    let e = err(&with("  ring: 1024", "  placement: auto"));
    assert!(e.message.contains("places VRs itself"), "{e}");
    let e = err(&with("derived: [drop_vs_first, linear_fit]", "derived: [vs_reservation]"));
    assert!(e.message.contains("needs points with a time reservation"), "{e}");
    let e = err(&with("dut:", "dut:\n  vrs: 3\n  vrs: 4\n"));
    assert!(e.message.contains("appears twice"), "{e}");
    // Checks across fields: rate without rates, too many active VRs, a rate for no VR.
    let e = err(&with("  rates: { c0: 5k, c1: 5k }", "  active_vrs: 1")
        .replace("param: rate.c0", "param: flows"));
    assert!(e.message.contains("method rate needs"), "{e}");
    let e = err(&with("kind: multi-wire", "kind: routeplex").replace("c0", "vr9"));
    assert!(e.message.contains("vr1..vr2"), "{e}");
    let e = err(&with("  flows: 16", "  flows: 16\n  active_vrs: 3"));
    assert!(e.message.contains("active_vrs 3 is more than the 2 VRs"), "{e}");
    let e = err(&with("vrs: 2", "vrs: 2\n  vifs: 2\n  ingress_ports: 3"));
    assert!(e.to_string().contains("appears twice") || e.message.contains("vifs"), "{e}");
    // Not a mapping at all, and a file that is not there.
    assert!(err("- a\n- b\n").message.contains("mapping"));
    let e = Scenario::load(std::path::Path::new("/nonexistent/x.yaml")).unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/x.yaml: cannot read it"), "{e}");
}

/// Only a regular file of at most 16 MiB is read: `/dev/zero` would never end, and a FIFO
/// would wait for a writer.
#[test]
fn scenario_files_are_regular_and_bounded() {
    let e = Scenario::load(std::path::Path::new("/dev/zero")).unwrap_err();
    assert_eq!(e.to_string(), "/dev/zero: cannot read it: not a regular file (a character device)");
    let dir = std::env::temp_dir().join(format!("tester-scenario-kinds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let e = Scenario::load(&dir).unwrap_err();
    assert!(e.message.ends_with("not a regular file (a directory)"), "{e}");
    let fifo = dir.join("fifo.yaml");
    if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        let e = Scenario::load(&fifo).unwrap_err();
        assert!(e.message.ends_with("not a regular file (a FIFO)"), "{e}");
    } else {
        eprintln!("skipping the FIFO case: mkfifo failed");
    }
    let big = dir.join("big.yaml");
    std::fs::File::create(&big).unwrap().set_len(MAX_SCENARIO_BYTES + 1).unwrap();
    let e = Scenario::load(&big).unwrap_err();
    assert!(e.message.ends_with("file too large (16777217 bytes): the limit is 16 MiB"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An error quotes at most 80 bytes of a value; nesting deeper than 64 levels is refused before
/// the YAML tree builder would recurse 40,000 times.
#[test]
fn hostile_scenarios_give_short_errors() {
    let long = "q".repeat(50 << 20);
    for (find, replace, field) in [
        ("vrs: 2", format!("vrs: {long}"), "dut.vrs"),
        ("kind: multi-wire", format!("kind: {long}"), "dut.kind"),
        ("kind: rate", format!("kind: {long}"), "method.kind"),
        ("  ring: 1024", format!("  reservation: {long}"), "dut.reservation"),
    ] {
        let e = err(&with(find, &replace));
        let shown = e.to_string();
        assert!(shown.len() < 300, "{} bytes: {}", shown.len(), &shown[..shown.len().min(400)]);
        assert!(shown.contains("…") && shown.contains(" (52428800 bytes)"), "{shown}");
        assert_eq!(e.field, field);
        assert!(e.value.as_ref().is_some_and(|v| v.len() <= 80), "{shown}");
    }
    let deep = with("  flows: 16", &format!("  flows:\n    {}x", "- ".repeat(40_000)));
    let e = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || err(&deep))
        .unwrap()
        .join()
        .unwrap();
    // Level 65: the top mapping, traffic, the flows list (the first "- "), then the 63rd.
    assert_eq!(
        e.to_string(),
        "bad.yaml:17:129: nesting is too deep: more than 64 levels of lists and mappings"
    );
}

/// Runs `sc` (its quick form if `quick`) on fake DUTs, with the options all the runs here
/// share: a short idle sleep for runner and DUTs alike, no progress lines, and a drain that
/// waits half a second of quiet rather than 10 ms. The fake DUT is a thread of this loaded
/// test process: CI once saw it off the CPU for the whole default quiet time after a trial,
/// and the wire's 250 frames counted as lost. A trial that gets everything back ends at once.
fn run_on_fakes(sc: &Scenario, quick: bool) -> ScenarioReport {
    let idle_sleep = Some(Duration::from_micros(20));
    let o = RunOptions {
        quick,
        runner: RunnerOptions {
            idle_sleep,
            quiet: Duration::from_millis(500),
            ..RunnerOptions::default()
        },
        progress: false,
        placement: serde_json::json!({}),
        tool: "test".into(),
        probes: !quick,
    };
    run(sc, &o, &mut FakeBuilder { idle_sleep }).unwrap()
}

#[test]
fn a_scenario_runs_on_fake_duts_with_exact_per_class_counts() {
    let sc = Scenario::parse(GOOD, "good.yaml").unwrap();
    let r = run_on_fakes(&sc, true);
    assert_eq!(r.points.len(), 2);
    for (p, c0) in r.points.iter().zip([5_000.0, 20_000.0]) {
        assert!(p.skipped.is_none());
        // 0.05 s at c0 + 5 kpps: exact frame counts per class, no warm-up, when the generator
        // kept up with the rate. On a machine loaded enough that it could not (CI once saw 213
        // of 250), what it offered still arrives whole, counted alike at every stage.
        let want = [(c0 * 0.05) as u64, 250];
        let kept_up = p.metrics["attempted_pps"] >= p.metrics["target_pps"];
        for (c, w) in p.classes.iter().zip(want) {
            let at = format!("{}: {}", p.label, c.name);
            if kept_up {
                assert_eq!(c.offered, w, "{at}");
            } else {
                eprintln!("{at}: the generator fell behind (a loaded machine): {} of {w} offered, exact counts of those", c.offered);
                assert!(c.offered > 0 && c.offered <= w, "{at}: {} of {w}", c.offered);
            }
            assert_eq!(c.received, c.offered, "{at}");
            assert_eq!(c.dut_received, Some(c.offered), "{at}");
            assert_eq!(c.dut_forwarded, Some(c.offered), "{at}");
        }
        assert_eq!(p.metrics["target_pps"], c0 + 5_000.0);
        assert_eq!(p.streams.len(), 2, "one port per class");
    }
    assert_eq!(r.points[0].metrics["vs_first"], 1.0);
    assert!(!r.points[0].metrics.contains_key("probe_memory_ns_per_read"), "quick: no probes");
    assert!(r.derived["linear_fits"][0]["fit"]["r_squared"].as_f64().is_some());
    let t = table(&r);
    assert!(t.contains("c0.forwarded_pps") && t.contains("c1.dut_forwarded"), "{t}");
    let csv = points_csv(&r);
    assert_eq!(csv.lines().count(), 3);
    assert!(csv.lines().next().unwrap().contains("c1.dut_forwarded"));
    assert_eq!(trials_csv(&r).lines().count(), 1 + r.trials.len());
    let dir = std::env::temp_dir().join(format!("tester-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    metric_plot(&r, &dir.join("m.png")).unwrap();
    assert!(!curves_plot(&r, &dir.join("c.png")).unwrap(), "no curves for method rate");
    assert_eq!(&std::fs::read(dir.join("m.png")).unwrap()[1..4], b"PNG");
    std::fs::remove_dir_all(&dir).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["points"][1]["classes"][0]["name"], "c0");
    assert_eq!(json["scenario"]["about"], sc.about);
}

#[test]
fn a_sweep_with_percent_steps_measures_the_capacity_once() {
    let text = r#"
name: t-sweep
dut: { kind: "capacity:50k", ring: 1024 }
axis: { param: flows, values: [4, 64], log: true }
traffic: { flows: 4 }
method: { kind: sweep, steps: [50%, 150%], duration: 0.1, repetitions: 1, warmup: 0 }
report: { derived: [drop_vs_first] }
"#;
    let sc = Scenario::parse(text, "s.yaml").unwrap();
    let r = run_on_fakes(&sc, false);
    let phases: Vec<&str> = r.trials.iter().map(|t| t.record.phase.as_str()).collect();
    // Once: one trial that counts (a trial the noisy host stalled is run again, not counted).
    let used = r.trials.iter().filter(|t| t.record.phase == "capacity" && t.record.used).count();
    assert_eq!(used, 1, "{phases:?}");
    let cap = r.points[0].capacity_pps.unwrap();
    assert_eq!(r.points[1].capacity_pps, Some(cap), "capacity: first");
    for (i, p) in r.points.iter().enumerate() {
        assert_eq!(p.curve.len(), 2);
        assert!((p.curve[0].target_pps - cap * 0.5).abs() < 1e-6 * cap);
        // A step whose every attempt the host stalled (the fake DUT's thread off the CPU for
        // the whole 0.1 s on a loaded machine) may have forwarded nothing: it proves nothing.
        let valid = r.trials.iter().any(|t| {
            t.point == i && t.record.phase == "step" && t.record.used && t.record.result.valid
        });
        if valid {
            assert!(p.metrics["peak_forwarded_pps"] > 0.0, "{phases:?}");
        } else {
            eprintln!("point {i}: every step trial stalled; its peak is not checked");
        }
        // Not a quick run: each point carries the probes timed before it.
        for k in ["probe_memory_ns_per_read", "probe_compute_ns_per_step"] {
            assert!(p.metrics.get(k).is_some_and(|&v| v > 0.0), "{k}: {:?}", p.metrics);
        }
    }
    let dir = std::env::temp_dir().join(format!("tester-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert!(curves_plot(&r, &dir.join("c.png")).unwrap());
    metric_plot(&r, &dir.join("m.png")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn linear_fits_are_exact_on_a_line() {
    let f = linear_fit(&[(1.0, 3.0), (2.0, 5.0), (4.0, 9.0)]);
    assert_eq!(f["slope"], 2.0);
    assert_eq!(f["intercept"], 1.0);
    assert_eq!(f["r_squared"], 1.0);
    assert!(linear_fit(&[(1.0, 1.0)]).is_null());
}

#[test]
fn reservations_parse_and_vary_on_an_axis() {
    assert_eq!(ReservationSpec::parse("none"), Ok(ReservationSpec::None));
    assert_eq!(ReservationSpec::parse("25%"), Ok(ReservationSpec::TimePercent(25.0)));
    assert_eq!(ReservationSpec::parse("packets:2k"), Ok(ReservationSpec::Packets(2000)));
    for bad in ["0%", "101%", "packets:0", "fast", "25"] {
        assert!(ReservationSpec::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(ReservationSpec::TimePercent(25.0).fraction(), Some(0.25));
    let text = GOOD
        .replace("  ring: 1024", "  ring: 1024\n  period_us: 500\n  weight: 10\n  reserved_vrs: 1")
        .replace("param: rate.c0", "param: reservation")
        .replace("values: [5k, 20k]", "values: [none, 20%, 40%]")
        .replace("derived: [drop_vs_first, linear_fit]", "derived: [linear_fit, vs_reservation]");
    let sc = Scenario::parse(&text, "r.yaml").unwrap();
    let pts = sc.points(false);
    assert_eq!(pts.len(), 3);
    assert_eq!(pts[0].2.dut.reservation, ReservationSpec::None);
    assert_eq!(pts[2].2.dut.reservation, ReservationSpec::TimePercent(40.0));
    assert_eq!((pts[2].2.dut.period_us, pts[2].2.dut.weight), (500, 10));
    assert_eq!(pts[2].2.dut.reserved_vrs, Some(1));
    assert_eq!(pts[1].0.number, Some(20.0), "a percentage is the x value");
    assert_eq!(pts[0].0.number, None);
    assert_eq!(pts[1].2.get("reservation"), "20%");
    assert_eq!(sc.axis.quick.len(), 2);
}

#[test]
fn points_are_compared_with_reservation_times_peak() {
    let text = GOOD
        .replace("param: rate.c0", "param: reservation")
        .replace("values: [5k, 20k]", "values: [none, 25%, 50%]")
        .replace("derived: [drop_vs_first, linear_fit]", "derived: [linear_fit, vs_reservation]");
    let sc = Scenario::parse(&text, "r.yaml").unwrap();
    // A fake DUT ignores reservations: every point forwards what it is offered, so each
    // reserved point is 1 / reservation of its expectation.
    let r = run_on_fakes(&sc, false);
    let peak = r.points[0].metrics["forwarded_pps"];
    assert!(!r.points[0].metrics.contains_key("vs_reservation"), "the peak is not reserved");
    for (p, f) in r.points[1..].iter().zip([0.25, 0.5]) {
        assert!((p.metrics["expected_pps"] - f * peak).abs() < 1e-9 * peak);
        let v = p.metrics["vs_reservation"];
        assert!((v - p.metrics["forwarded_pps"] / (f * peak)).abs() < 1e-12, "{v}");
    }
    let fit = &r.derived["linear_fits"][0]["fit"];
    assert_eq!(fit["n"], 2, "the fit leaves the unreserved point out: {fit}");
    assert!(fit["r_squared"].as_f64().is_some());
}

#[test]
fn goals_parse_and_are_reported_met_or_not_per_point() {
    let g = Goal::parse("c1.loss_ratio <= 1% at rate.c0=20000, kind=multi-wire").unwrap();
    assert_eq!((g.metric.as_str(), g.at_least, g.value), ("c1.loss_ratio", false, 0.01));
    assert_eq!(g.at.len(), 2);
    for bad in ["loss_ratio < 1", "loss_ratio >= fast", "loss_ratio >= 1 at kind"] {
        assert!(Goal::parse(bad).is_err(), "{bad}");
    }
    let text = with(
        "  derived: [drop_vs_first, linear_fit]\n",
        "  derived: [drop_vs_first, linear_fit]\n  goals: [\"c1.loss_ratio <= 1% at rate.c0=20k\", \"vs_first >= 1.5\", \"r_squared >= 0\"]\n",
    )
    .replace("  rates: { c0: 5k, c1: 5k }\n", "  rates: { c0: 5k, c1: 5k }\n  generator: replay\n");
    assert!(err(&text.replace("vs_first >= 1.5", "nonsense >= 1"))
        .to_string()
        .contains("nonsense"));
    let sc = Scenario::parse(&text, "goals.yaml").unwrap();
    assert!(sc.base.traffic.replay);
    let r = run_on_fakes(&sc, true);
    let goals = r.derived["goals"].as_array().unwrap();
    // The wire loses nothing: met at the one point it applies to (c0 at 20k, written 20000
    // after parsing); vs_first is 1 at the first point, so not met there.
    assert_eq!(goals[0]["met"], true, "{goals:?}");
    assert_eq!(goals[0]["points"].as_array().unwrap().len(), 1);
    assert_eq!(goals[1]["met"], false);
    assert_eq!(goals[2]["met"], true);
    // Replayed frames carry no TX time: no latency figures.
    assert!(r.points.iter().all(|p| !p.metrics.contains_key("p50_us")));
    let t = table(&r);
    assert!(t.contains("goal vs_first >= 1.5: NOT met"), "{t}");
    assert!(t.contains("goal c1.loss_ratio <= 1% at rate.c0=20k: met"), "{t}");
}

#[test]
fn replicas_pinning_and_msr_parse_vary_and_are_checked() {
    let text = GOOD
        .replace("kind: multi-wire", "kind: routeplex")
        .replace("vrs: 2", "vrs: 1")
        .replace("  ring: 1024", "  ring: 1024\n  workers: 1\n  pin: false")
        .replace("param: rate.c0", "param: [replicas, workers]")
        .replace("values: [5k, 20k]", "values: [1, 2, 4]")
        .replace("  rates: { c0: 5k, c1: 5k }", "  rate: 10k")
        .replace("derived: [drop_vs_first, linear_fit]", "derived: [drop_vs_first]");
    let sc = Scenario::parse(&text, "pvr.yaml").unwrap();
    let pts = sc.points(false);
    assert_eq!(pts.len(), 3);
    assert_eq!((pts[2].2.dut.replicas, pts[2].2.dut.workers), (4, 4));
    assert!(!pts[2].2.dut.pin && !pts[2].2.dut.msr);
    assert_eq!(pts[1].2.get("replicas"), "2");
    assert_eq!(pts[1].2.get("pin"), "false");
    assert_eq!(DutParams::default().replicas, 1);
    assert!(DutParams::default().pin, "pinned unless a file says otherwise");

    // Bad values name file, line, field and value.
    let e = Scenario::parse(&text.replace("  pin: false", "  pin: maybe"), "pvr.yaml").unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.line, e.field.as_str(), e.value.as_deref()),
        ("pvr.yaml", 12, "dut.pin", Some("maybe"))
    );
    assert!(e.message.contains("pin must be true or false"), "{e}");
    let e =
        Scenario::parse(&text.replace("  pin: false", "  replicas: 65"), "pvr.yaml").unwrap_err();
    assert_eq!((e.line, e.field.as_str(), e.value.as_deref()), (12, "dut.replicas", Some("65")));
    assert!(e.message.contains("out of range 1..=64"), "{e}");
    let e = Scenario::parse(&text.replace("  pin: false", "  msr: yes"), "pvr.yaml").unwrap_err();
    assert_eq!((e.field.as_str(), e.value.as_deref()), ("dut.msr", Some("yes")));
    // Across fields: more replicas than workers, an MSR without back-ends, shared ports.
    let e = err(&text.replace("param: [replicas, workers]", "param: replicas"));
    assert!(e.message.contains("replicas 2 needs workers 2 or more"), "{e}");
    assert!(e.message.contains("at c0 offered = 2: replicas 2"), "{e}");
    let e = err(&text.replace("  pin: false", "  msr: true"));
    assert!(e.message.contains("msr true needs replicas 2 or more"), "{e}");
    let e = err(&text.replace("vrs: 1", "vrs: 2"));
    assert!(e.message.contains("needs its ports to itself"), "{e}");
    let msr = text
        .replace("  pin: false", "  msr: true\n  replicas: 2\n  workers: 2")
        .replace("  workers: 1\n", "")
        .replace("param: [replicas, workers]", "param: pin")
        .replace("values: [1, 2, 4]", "values: [true, false]");
    let sc = Scenario::parse(&msr, "msr.yaml").unwrap();
    assert!(sc.points(false).iter().all(|(_, _, p)| p.dut.msr && p.dut.replicas == 2));
    assert!(!sc.points(false)[1].2.dut.pin);
}

#[test]
fn backend_and_path_keys_parse_vary_and_refuse_what_cannot_be_built() {
    let text = GOOD
        .replace("  kind: multi-wire\n  vrs: 2\n  ingress_ports: 2\n", "  kind: routeplex\n")
        .replace("  ring: 1024", "  ring: 1024\n  path: switch-vr")
        .replace("param: rate.c0", "param: backend")
        .replace("values: [5k, 20k]", "values: [mem, memif]")
        .replace("  rates: { c0: 5k, c1: 5k }", "  rate: 10k")
        .replace("\"*.forwarded_pps\", \"*.dut_forwarded\"", "p50_us")
        .replace("derived: [drop_vs_first, linear_fit]", "derived: [drop_vs_first]")
        .replace("[\"*.forwarded_pps\", forwarded_pps]", "[p50_us]");
    let sc = Scenario::parse(&text, "lat.yaml").unwrap();
    let pts = sc.points(false);
    assert_eq!(pts.len(), 2);
    assert_eq!((pts[0].2.dut.backend, pts[1].2.dut.backend), (Backend::Mem, Backend::Memif));
    assert!(pts.iter().all(|(_, _, p)| p.dut.path == DutPath::SwitchVr));
    assert_eq!(
        (pts[1].2.get("backend"), pts[1].2.get("path")),
        ("memif".into(), "switch-vr".into())
    );
    assert_eq!(
        (DutParams::default().backend, DutParams::default().path),
        (Backend::Mem, DutPath::Vr)
    );

    // A bad value names file, line, field and value.
    let e =
        Scenario::parse(&text.replace("path: switch-vr", "path: bridge"), "lat.yaml").unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.line, e.field.as_str(), e.value.as_deref()),
        ("lat.yaml", 9, "dut.path", Some("bridge"))
    );
    assert!(e.message.contains("vr, switch or switch-vr"), "{e}");
    let e =
        Scenario::parse(&text.replace("values: [mem, memif]", "values: [mem, shm]"), "lat.yaml")
            .unwrap_err();
    assert_eq!((e.field.as_str(), e.value.as_deref()), ("axis.values[1]", Some("shm")));
    assert!(e.message.contains("backend must be mem or memif"), "{e}");
    // Across fields: memif and the switch are built for one worker, one VR, two ports.
    let e = err(&text.replace("  path: switch-vr", "  path: switch-vr\n  workers: 2"));
    assert!(e.message.contains("path switch-vr: one worker"), "{e}");
    let e = err(&text.replace("  path: switch-vr", "  path: switch\n  vrs: 2"));
    assert!(e.message.contains("path switch: one generator port and one sink port"), "{e}");
    let e = err(&text.replace("  ring: 1024\n  path: switch-vr", "  ring: 32768\n  path: vr"));
    assert!(e.message.contains("over memif's 16384 slots"), "{e}");
    let e = err(&text.replace("  kind: routeplex", "  kind: wire"));
    assert!(e.message.contains("only the routeplex DUT"), "{e}");
}

#[test]
fn ingress_queues_is_a_dut_parameter_off_by_default() {
    let sc = Scenario::parse(GOOD, "g.yaml").unwrap();
    assert!(!sc.points(false)[0].2.dut.ingress_queues, "off by default");
    let text = GOOD
        .replace("param: rate.c0", "param: ingress_queues")
        .replace("values: [5k, 20k]", "values: [false, true]")
        .replace("derived: [drop_vs_first, linear_fit]", "derived: [drop_vs_first]");
    let sc = Scenario::parse(&text, "iq.yaml").unwrap();
    let pts = sc.points(false);
    assert_eq!((pts[0].2.dut.ingress_queues, pts[1].2.dut.ingress_queues), (false, true));
    assert_eq!(pts[1].2.get("ingress_queues"), "true");
    let e = err(&with("  ring: 1024", "  ingress_queues: on"));
    assert_eq!((e.field.as_str(), e.value.as_deref()), ("dut.ingress_queues", Some("on")));
    assert!(e.message.contains("true or false"), "{e}");
}

#[test]
fn a_goal_met_only_on_stalled_trials_is_not_shown() {
    use super::run::{overall_verdict, point_verdict};
    // 3 trials, all stalled: a met goal cannot rest on them; a missed one stays missed.
    assert_eq!(point_verdict(true, 3.0, 3.0), None);
    assert_eq!(point_verdict(false, 3.0, 3.0), Some(false));
    // One good trial is enough to judge; no trials counted: judged on the figures.
    assert_eq!(point_verdict(true, 3.0, 2.0), Some(true));
    assert_eq!(point_verdict(true, 0.0, 0.0), Some(true));
    assert_eq!(overall_verdict(&[Some(true), Some(true)]), Some(true));
    assert_eq!(overall_verdict(&[Some(true), None]), None);
    assert_eq!(overall_verdict(&[None, Some(false)]), Some(false));
    assert_eq!(overall_verdict(&[]), None);
}
