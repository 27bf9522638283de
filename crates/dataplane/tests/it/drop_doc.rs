//! docs/dataplane.md has a row for every drop reason (the VR's, the port's, the impaired
//! link's and the vxlan port's), and no row for a reason that is gone.

use dataplane::impair::ImpairDrop;
use dataplane::{PortDrop, VrDrop};

const DOC: &str = include_str!("../../../../docs/dataplane.md");

#[test]
fn every_drop_reason_is_documented() {
    let names: Vec<&str> = VrDrop::ALL
        .iter()
        .map(|r| r.name())
        .chain(PortDrop::ALL.iter().map(|r| r.name()))
        .chain(ImpairDrop::ALL.iter().map(|r| r.name()))
        .chain(ports::vxlan::Reason::ALL.iter().map(|r| r.name()))
        .collect();
    for n in &names {
        assert!(DOC.contains(&format!("| `{n}` | ")), "docs/dataplane.md has no row for `{n}`");
    }
    let rows: Vec<&str> = DOC
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    for r in &rows {
        assert!(names.contains(r), "docs/dataplane.md documents `{r}`, which is no drop reason");
    }
    assert_eq!(rows.len(), names.len(), "one row per reason");
}
