//! `msrs:`: multistage software routers (seed 000 §5). Each names a replicated VR (its
//! back-ends, one per worker, forwarding by the one route table control keeps for it: the
//! control processor's RIB, static routes and a `control_plane: linux` daemon's alike) and
//! says how its load balancers pin flows, detect failed back-ends and switch back-ends on and
//! off with the load (`dataplane::msr`).
//!
//! ```yaml
//! msrs:
//!   - vr: r1                  # a vrs[] entry with replicas: N (N >= 2): its N back-ends
//!     active: 1               # back-ends active at start, 1..=N (default 1)
//!     flows: 65536            # flow-table slots per load balancer, power of two 64..=4194304
//!     idle_ms: 100            # a flow silent this long is unpinned; a drain lasts at least
//!                             # this long (1..=60000, default 100)
//!     fail_ms: 50             # a back-end that takes nothing for this long is failed and
//!                             # bypassed (1..=60000, default 50)
//!     policy:                 # when back-ends are switched on and off
//!       on_above_pps: 1000000 # one more when the load exceeds this per active back-end
//!       off_below_pps: 500000 # one fewer when the rest would each stay under this
//!                             # (less than on_above_pps: the hysteresis)
//!       hold_ms: 100          # at least this between changes; the load's window
//!       min_active: 1         # kept active whatever the load, 1..=active
//! ```

use std::collections::HashMap;

use dataplane::config::VrConfig;
use dataplane::msr::{LbConfig, Policy};

use super::yaml::{Result, Value};
use super::VrSchedule;

const MSR_KEYS: &[&str] = &["vr", "active", "flows", "idle_ms", "fail_ms", "policy"];
const POLICY_KEYS: &[&str] = &["on_above_pps", "off_below_pps", "hold_ms", "min_active"];

/// One multistage software router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MsrSpec {
    /// The replicated VR whose replicas are the back-ends (index into `Topology::vrs`).
    pub vr: usize,
    /// Its back-ends (the VR's replicas).
    pub backends: usize,
    /// Back-ends active at start.
    pub active: usize,
    /// The load balancers' flow table, idle and failure times.
    pub lb: LbConfig,
    /// The control processor's load policy.
    pub policy: Policy,
}

/// Reads one `msrs[]` entry; `claimed` holds the VRs earlier entries named, with their lines.
pub(super) fn msr(
    v: &Value,
    vrs: &[VrConfig],
    schedule: &[VrSchedule],
    claimed: &mut HashMap<usize, usize>,
) -> Result<MsrSpec> {
    let m = v.map(MSR_KEYS)?;
    let vv = m.req("vr")?;
    let name = vv.text()?;
    let Some(i) = vrs.iter().position(|c| c.name == name) else {
        let names: Vec<&str> = vrs.iter().map(|c| c.name.as_str()).collect();
        return Err(vv.bad(
            name,
            format_args!("no vr named {name:?} (vrs: {})", super::list_or_none(&names)),
        ));
    };
    let backends = schedule[i].copies();
    if backends < 2 {
        return Err(vv.bad(
            name,
            format_args!("vr {name} has no replicas: give it replicas: N (N >= 2), its back-ends"),
        ));
    }
    if let Some(line) = claimed.insert(i, vv.line()) {
        return Err(vv.bad(name, format_args!("vr {name} is already an MSR's (line {line})")));
    }
    let int = |key: &str, what: &str, lo: u64, hi: u64, default: u64| -> Result<u64> {
        m.get(key).map(|x| x.int::<u64>(what, lo, hi)).transpose().map(|x| x.unwrap_or(default))
    };
    let active = int("active", "active back-ends", 1, backends as u64, 1)? as usize;
    let flows = int("flows", "flow-table slots", 64, 1 << 22, 65536)?;
    if !flows.is_power_of_two() {
        let fv = m.get("flows").expect("a non-default value was given");
        return Err(
            fv.bad(fv.text()?, format_args!("{flows} flow-table slots is not a power of two"))
        );
    }
    let idle_ms = int("idle_ms", "idle time (ms)", 1, 60_000, 100)?;
    let fail_ms = int("fail_ms", "failure time (ms)", 1, 60_000, 50)?;
    let lb = LbConfig {
        flow_slots: flows as usize,
        idle_ns: idle_ms * 1_000_000,
        fail_ns: fail_ms * 1_000_000,
    };
    let policy = match m.get("policy") {
        None => {
            Policy { min_active: active.min(Policy::default().min_active), ..Policy::default() }
        }
        Some(pv) => policy(&pv, active)?,
    };
    Ok(MsrSpec { vr: i, backends, active, lb, policy })
}

fn policy(v: &Value, active: usize) -> Result<Policy> {
    let m = v.map(POLICY_KEYS)?;
    let d = Policy::default();
    let pps = |key: &str, default: u64| -> Result<u64> {
        m.get(key)
            .map(|x| x.int::<u64>("packets per second", 1, 1_000_000_000))
            .transpose()
            .map(|x| x.unwrap_or(default))
    };
    let on = pps("on_above_pps", d.on_above_pps)?;
    let off = pps("off_below_pps", d.off_below_pps.min(on / 2))?;
    if off >= on {
        let (ov, text) = match m.get("off_below_pps") {
            Some(ov) => {
                let t = ov.text()?;
                (ov, t)
            }
            None => (v.clone(), ""),
        };
        return Err(ov.bad(text, format_args!("off_below_pps {off} is not below on_above_pps {on}: without that gap a back-end switched on would be switched off again at once")));
    }
    let hold_ms = m
        .get("hold_ms")
        .map(|x| x.int::<u64>("hold time (ms)", 1, 3_600_000))
        .transpose()?
        .unwrap_or(d.hold_ns / 1_000_000);
    let min_active = match m.get("min_active") {
        None => d.min_active.min(active),
        Some(x) => x.int::<usize>("back-ends", 1, active as u64)?,
    };
    Ok(Policy { on_above_pps: on, off_below_pps: off, hold_ns: hold_ms * 1_000_000, min_active })
}

/// `routeplex show`'s lines for one MSR.
pub(super) fn summary(t: &super::Topology, m: &MsrSpec) -> String {
    let p = &m.policy;
    format!(
        "MSR {}: {} back-ends ({} active at start), flow table {} per balancer, flows unpinned after {} ms idle, a back-end failed after {} ms\n  policy: one more above {} pps per active back-end, one fewer below {} pps per remaining one, {} ms between changes, at least {} active\n",
        t.vrs[m.vr].name,
        m.backends,
        m.active,
        m.lb.flow_slots,
        m.lb.idle_ns / 1_000_000,
        m.lb.fail_ns / 1_000_000,
        p.on_above_pps,
        p.off_below_pps,
        p.hold_ns / 1_000_000,
        p.min_active
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Topology;

    const BASE: &str = "\
workers: 2
ports:
  - { name: in, kind: mem }
  - { name: out, kind: mem }
vrs:
  - name: r1
    replicas: 2
    interfaces:
      - { name: a, port: in, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: out, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
";

    fn parse(msrs: &str) -> Result<Topology, crate::TopologyError> {
        Topology::parse(&format!("{BASE}msrs:\n{msrs}"), "t.yaml", Path::new("."))
    }

    /// The error's `file:line:col: field: message` and its value.
    fn err(msrs: &str) -> (String, Option<String>) {
        let e = parse(msrs).unwrap_err();
        (e.to_string(), e.value().map(String::from))
    }

    #[test]
    fn an_msr_names_a_replicated_vr_and_gets_defaults() {
        let t = parse("  - { vr: r1 }\n").unwrap();
        let m = &t.msrs[0];
        assert_eq!((m.vr, m.backends, m.active), (0, 2, 1));
        assert!(t.summary().contains("MSR r1: 2 back-ends (1 active at start)"), "{}", t.summary());
        assert_eq!(m.lb, dataplane::msr::LbConfig::default());
        let t = parse(
            "  - vr: r1\n    active: 2\n    flows: 1024\n    idle_ms: 5\n    fail_ms: 7\n    policy: { on_above_pps: 100, off_below_pps: 10, hold_ms: 3, min_active: 2 }\n",
        )
        .unwrap();
        let m = &t.msrs[0];
        assert_eq!(
            (m.active, m.lb.flow_slots, m.lb.idle_ns, m.lb.fail_ns),
            (2, 1024, 5_000_000, 7_000_000)
        );
        assert_eq!(
            (m.policy.on_above_pps, m.policy.off_below_pps, m.policy.hold_ns, m.policy.min_active),
            (100, 10, 3_000_000, 2)
        );
    }

    #[test]
    fn every_bad_value_is_named_with_file_line_field_and_value() {
        // (entries, line, "field: message" start, value)
        let cases = [
            ("  - { vr: r9 }\n", 12, "msrs[0].vr: no vr named \"r9\" (vrs: r1)", "r9"),
            ("  - { vr: r1, active: 3 }\n", 12, "msrs[0].active: ", "3"),
            (
                "  - { vr: r1, flows: 1000 }\n",
                12,
                "msrs[0].flows: 1000 flow-table slots is not a power of two",
                "1000",
            ),
            ("  - { vr: r1, fail_ms: 0 }\n", 12, "msrs[0].fail_ms: ", "0"),
            ("  - { vr: r1, idle_ms: x }\n", 12, "msrs[0].idle_ms: ", "x"),
            (
                "  - { vr: r1, policy: { on_above_pps: 10, off_below_pps: 10 } }\n",
                12,
                "msrs[0].policy.off_below_pps: off_below_pps 10 is not below on_above_pps 10",
                "10",
            ),
            ("  - { vr: r1, policy: { min_active: 2 } }\n", 12, "msrs[0].policy.min_active: ", "2"),
            ("  - { vr: r1, polcy: {} }\n", 12, "msrs[0].polcy: unknown key", "polcy"),
            (
                "  - { vr: r1 }\n  - { vr: r1 }\n",
                13,
                "msrs[1].vr: vr r1 is already an MSR's (line 12)",
                "r1",
            ),
        ];
        for (text, line, want, value) in cases {
            let (got, v) = err(text);
            let (pos, rest) = got.split_once(": ").unwrap();
            assert!(pos.starts_with(&format!("t.yaml:{line}:")), "{text:?}: {got}");
            assert!(rest.starts_with(want), "{text:?}\n got: {got}\nwant: {want}");
            assert_eq!(v.as_deref(), Some(value), "{got}");
        }
    }

    #[test]
    fn a_vr_without_replicas_cannot_be_an_msr() {
        let text = BASE.replace("    replicas: 2\n", "") + "msrs:\n  - { vr: r1 }\n";
        let e = Topology::parse(&text, "t.yaml", Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("msrs[0].vr: vr r1 has no replicas"), "{e}");
    }
}
