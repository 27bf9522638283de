use std::path::Path;

use super::*;

const GOOD: &str = r#"# A square of four VRs.
name: sq
kind: timeline
topology: sq/topology.yaml
timers: { hello: 1s, dead: 4s }
daemons:
  r1: { bird: sq/r1.conf }
flows:
  - { name: ac, from: ha, to: 10.80.3.2, rate: 1000 }
  - { name: ca, from: hc, to: 10.80.1.2 }
converge: 30
settle: 1
duration: 10
events:
  - { at: 6, link_up: { vr: r1, interface: l12 } }
  - { at: 2, link_down: { vr: r1, interface: l12 } }
  - { at: 7, flap: { vr: r2, interface: l23, period: 1, count: 2 } }
  - { at: 9, impair: { port: pa, set: { delay: 20ms, loss: 1%, seed: 7 } } }
  - { at: 9.5, impair: { port: pa, set: none } }
  - { at: 3, vr_stop: r4 }
  - { at: 4, vr_start: r4 }
  - { at: 5, daemon_kill: r1 }
  - { at: 8.2, daemon_kill: { vr: r1, restart: 1.5 } }
  - { at: 8.3, daemon_kill: { vr: r1, restart: no } }
"#;

fn parse(text: &str) -> std::result::Result<Timeline, ScenarioError> {
    Timeline::parse(text, "t.yaml", Path::new("/s"))
}

fn err(text: &str) -> String {
    parse(text).expect_err("accepted a bad timeline").to_string()
}

#[test]
fn parses_every_event_kind_in_time_order() {
    let t = parse(GOOD).unwrap();
    assert_eq!(t.name, "sq");
    assert_eq!(t.about, "A square of four VRs.");
    assert_eq!(t.topology, Path::new("/s/sq/topology.yaml"));
    assert_eq!(t.timers["dead"], "4s");
    assert_eq!(t.daemons.len(), 1);
    assert_eq!(t.daemons[0].config, Path::new("/s/sq/r1.conf"));
    assert_eq!(t.daemons[0].kind, DaemonKind::Bird);
    let t2 = parse(&GOOD.replace("r1: { bird: sq/r1.conf }", "r1: { frr: sq/r1-bgpd.conf }"));
    assert_eq!(t2.unwrap().daemons[0].kind, DaemonKind::Frr);
    assert_eq!(t.flows[1].rate, 1000, "the default rate");
    assert_eq!((t.converge, t.settle, t.duration), (30.0, 1.0, 10.0));
    let at: Vec<f64> = t.actions.iter().map(|a| a.at).collect();
    assert_eq!(at, [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 7.5, 8.0, 8.2, 8.3, 8.5, 9.0, 9.5, 9.7]);
    let labels: Vec<String> = t.actions.iter().map(|a| a.what.label()).collect();
    assert_eq!(
        labels,
        [
            "r1.l12 down",
            "vr r4 stop",
            "vr r4 start",
            "kill r1's daemon",
            "r1.l12 up",
            "r2.l23 down",
            "r2.l23 up",
            "r2.l23 down",
            "kill r1's daemon",
            "kill r1's daemon",
            "r2.l23 up",
            "impair pa",
            "impair pa ends",
            "restart r1's daemon",
        ]
    );
    assert_eq!(t.actions[0].event, 1, "the event's index in the file");
    let ActionKind::Impair { set: Some(set), .. } = &t.actions[11].what else { panic!() };
    assert_eq!(set, &serde_json::json!({ "delay": "20ms", "loss": "1%", "seed": 7 }));
    assert_eq!(t.action_times_ns()[6], 7_500_000_000);
}

#[test]
fn bad_events_name_file_line_column_and_field() {
    let e = err(&GOOD.replace("{ at: 3, vr_stop: r4 }", "{ at: 3, vr_stop: r4, vr_start: r4 }"));
    assert!(e.starts_with("t.yaml:20:7: events[5]: an event is `at` and one of"), "{e}");
    assert!(e.contains("(2 given)"), "{e}");
    let e = err(&GOOD.replace("{ at: 5, daemon_kill: r1 }", "{ at: 5 }"));
    assert!(e.contains("(0 given)"), "{e}");
    let e = err(&GOOD.replace("at: 6,", "at: 11,"));
    assert!(e.starts_with("t.yaml:15:11: events[0].at: at must be seconds in 0..=10"), "{e}");
    let e = err(&GOOD.replace("period: 1, count: 2", "period: 2, count: 3"));
    assert!(e.starts_with("t.yaml:17:22: events[2].flap: the event runs past"), "{e}");
    assert!(e.contains("(10 s): r2.l23 down at 11 s"), "{e}");
    let e = err(&GOOD.replace("restart: 1.5", "restart: 2"));
    assert!(e.starts_with("t.yaml:23:31: events[8].daemon_kill: the event runs past"), "{e}");
    assert!(e.contains("(10 s): restart r1's daemon at 10.2 s"), "{e}");
    let e = err(&GOOD.replace("restart: 1.5", "restart: soon"));
    assert!(
        e.starts_with("t.yaml:23:48: events[8].daemon_kill.restart: restart must be seconds"),
        "{e}"
    );
    let e = err(&GOOD.replace("restart: 1.5", "restrat: 1.5"));
    assert!(e.contains("events[8].daemon_kill.restrat: unknown key"), "{e}");
    let e = err(&GOOD.replace("interface: l12 } }\n  - { at: 2", "iface: l12 } }\n  - { at: 2"));
    assert!(e.starts_with("t.yaml:15:33: events[0].link_up.iface: unknown key \"iface\""), "{e}");
    let e = err(&GOOD.replace("loss: 1%", "los: 1%"));
    assert!(e.contains("events[3].impair.set"), "{e}");
    let e = err(&GOOD.replace("rate: 1000", "rate: 20k"));
    assert!(
        e.starts_with("t.yaml:9:48: flows[0].rate: rate 20000 is out of range 1..=10000"),
        "{e}"
    );
    let e = err(&GOOD.replace("to: 10.80.3.2", "to: 10.80.3"));
    assert!(e.contains("flows[0].to"), "{e}");
    let e = err(&GOOD.replace("name: ca", "name: ac"));
    assert!(e.contains("flow \"ac\" is named twice"), "{e}");
    let e = err(&GOOD.replace("kind: timeline", "kind: sweep"));
    assert!(e.contains("kind: a timeline scenario has kind: timeline"), "{e}");
    let e = err(&GOOD.replace("r1: { bird: sq/r1.conf }", "r1: { quagga: x }"));
    assert!(e.contains("daemons.r1"), "{e}");
    let e = err(&GOOD.replace("r1: { bird: sq/r1.conf }", "r1: { bird: a, frr: b }"));
    assert!(e.contains("daemons.r1: a daemon is one of bird: CONFIG or frr: BGPD_CONFIG"), "{e}");
    let e = err(&GOOD.replace("duration: 10", "duration: 1000"));
    assert!(e.contains("duration must be seconds in 0.1..=300"), "{e}");
}

#[test]
fn a_long_flap_is_bounded() {
    let e = err(&GOOD
        .replace("duration: 10", "duration: 300")
        .replace("period: 1, count: 2", "period: 0.02, count: 100")
        .replace(
            "- { at: 9,",
            "- { at: 1, flap: { vr: r2, interface: l23, period: 0.02, count: 100 } }\n  - { at: 9,",
        )
        .replace(
            "- { at: 3,",
            "- { at: 2, flap: { vr: r2, interface: l23, period: 0.02, count: 100 } }\n  - { at: 3,",
        )
        .replace(
            "- { at: 4,",
            "- { at: 4, flap: { vr: r2, interface: l23, period: 0.02, count: 100 } }\n  - { at: 4,",
        )
        .replace(
            "- { at: 5,",
            "- { at: 5, flap: { vr: r2, interface: l23, period: 0.02, count: 100 } }\n  - { at: 5,",
        )
        .replace(
            "- { at: 6,",
            "- { at: 6, flap: { vr: r2, interface: l23, period: 0.02, count: 100 } }\n  - { at: 6,",
        ));
    assert!(e.contains("actions (at most 1024)"), "{e}");
}

/// Probes at 1 ms, `lost` the indices that did not arrive.
fn probes(n: usize, lost: &[usize]) -> (Vec<u64>, Vec<bool>) {
    let sent = (0..n as u64).map(|i| i * 1_000_000).collect();
    let mut got = vec![true; n];
    for &l in lost {
        got[l] = false;
    }
    (sent, got)
}

#[test]
fn outage_without_loss() {
    let (s, r) = probes(100, &[]);
    let w = outages(&s, &r, &[50_000_000], 100_000_000, 0);
    assert_eq!(w.len(), 2);
    assert_eq!((w[0].sent, w[0].lost, w[1].sent, w[1].lost), (50, 0, 50, 0));
    for x in &w {
        assert_eq!((x.gaps, x.outage_ms, x.back_ms, x.recovered), (0, None, None, true));
    }
    assert_eq!((w[1].start_ms, w[1].end_ms), (50.0, 100.0));
}

#[test]
fn outage_one_gap() {
    // Event at 40 ms; probes 45..=54 lost; 55 arrives.
    let (s, r) = probes(100, &(45..55).collect::<Vec<_>>());
    let w = outages(&s, &r, &[40_000_000], 100_000_000, 0);
    assert_eq!((w[0].sent, w[0].lost), (40, 0));
    let e = &w[1];
    assert_eq!((e.sent, e.lost, e.gaps), (60, 10, 1));
    assert_eq!((e.first_loss_ms, e.last_loss_ms), (Some(5.0), Some(14.0)));
    assert_eq!(e.outage_ms, Some(9.0));
    assert_eq!(e.back_ms, Some(15.0));
    assert!(e.recovered);
}

#[test]
fn outage_two_gaps_spans_both() {
    let lost: Vec<usize> = (12..15).chain(20..30).collect();
    let (s, r) = probes(60, &lost);
    let w = outages(&s, &r, &[10_000_000], 60_000_000, 0);
    let e = &w[1];
    assert_eq!((e.lost, e.gaps), (13, 2));
    assert_eq!((e.first_loss_ms, e.last_loss_ms, e.outage_ms), (Some(2.0), Some(19.0), Some(17.0)));
    assert_eq!(e.back_ms, Some(20.0), "back after the last gap, not the first");
}

#[test]
fn outage_loss_at_the_end_is_not_back() {
    let (s, r) = probes(30, &(25..30).collect::<Vec<_>>());
    let w = outages(&s, &r, &[20_000_000], 30_000_000, 0);
    let e = &w[1];
    assert_eq!((e.sent, e.lost, e.gaps, e.outage_ms), (10, 5, 1, Some(4.0)));
    assert_eq!((e.back_ms, e.recovered), (None, false));
}

#[test]
fn outage_windows_split_losses_and_count_every_probe() {
    // Two events; loss before the first, a gap across the second's start.
    let (s, r) = probes(100, &[3, 38, 39, 40, 41, 99]);
    let w = outages(&s, &r, &[20_000_000, 40_000_000], 90_000_000, 0);
    assert_eq!(w.len(), 3);
    assert_eq!(
        w.iter().map(|x| x.sent).sum::<u64>(),
        100,
        "probes sent after the end count in the last window"
    );
    assert_eq!(w.iter().map(|x| x.lost).sum::<u64>(), 6);
    assert_eq!((w[0].lost, w[1].lost, w[2].lost), (1, 2, 3));
    assert_eq!((w[1].back_ms, w[1].recovered), (None, false));
    // Back at 42 ms, but probe 99, the last, was lost: not back by the end.
    assert_eq!((w[2].first_loss_ms, w[2].last_loss_ms, w[2].gaps), (Some(0.0), Some(59.0), 2));
    assert_eq!((w[2].back_ms, w[2].recovered), (None, false));
}

#[test]
fn outage_with_no_probes_or_an_event_at_zero() {
    assert_eq!(outages(&[], &[], &[], 10, 0).len(), 1);
    let (s, r) = probes(10, &[0, 1]);
    let w = outages(&s, &r, &[0], 10_000_000, 0);
    assert_eq!((w[0].sent, w[1].sent, w[1].lost, w[1].back_ms), (0, 10, 2, Some(2.0)));
}

#[test]
fn outage_counts_probes_in_flight_at_an_action_in_its_window() {
    // Event at 20 ms, 5 ms in flight: probe 16 (sent at 16 ms) and 17 were lost by it.
    let (s, r) = probes(40, &[16, 17, 18, 19, 20, 21]);
    let w = outages(&s, &r, &[20_000_000], 40_000_000, 5_000_000);
    assert_eq!((w[0].sent, w[0].lost, w[0].end_ms), (15, 0, 15.0));
    let e = &w[1];
    assert_eq!((e.start_ms, e.from_ms, e.sent, e.lost), (20.0, 15.0, 25, 6));
    assert_eq!((e.first_loss_ms, e.last_loss_ms, e.outage_ms), (Some(-4.0), Some(1.0), Some(5.0)));
    assert_eq!((e.back_ms, e.recovered), (Some(2.0), true));
}
