//! Where the fleet's state lives in etcd.
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `/routeplex/hosts/NAME` | [`crate::record::HostRecord`] (JSON) | on the host's lease: gone when the host is |
//! | `/routeplex/desired/NAME` | the topology (YAML) the host converges to; its etcd `mod_revision` is its revision | until a controller (or a person) changes it |
//! | `/routeplex/fleet/desired` | the fleet's desired state (`fleet apply`); its `mod_revision` is the fleet revision | until the next `fleet apply` |
//! | `/routeplex/fleet/placement` | [`crate::placement::Placement`] (JSON): VR -> host, VNIs | written by the leading controller |
//! | `/routeplex/fleet/leader` | the leading controller's name | on its lease |
//! | `/routeplex/fleet/cordon/NAME` | cordoned host (`fleet drain`) | until `fleet uncordon` |

use crate::FleetError;

/// The longest host name: it is part of every key of the host.
pub const MAX_HOST_NAME: usize = 63;

/// What a topology the controller wrote starts with (a host keeps its own settings only in
/// those, see `config`).
pub const HEADER: &str = "# written by the routeplex fleet controller: edit the fleet file and `routeplex fleet apply` it\n";

/// Every key of the fleet starts with this.
pub const ROOT: &str = "/routeplex/";
/// Hosts' registrations.
pub const HOSTS: &str = "/routeplex/hosts/";
/// Hosts' desired topologies.
pub const DESIRED: &str = "/routeplex/desired/";

/// The fleet's desired state.
pub const FLEET_DESIRED: &str = "/routeplex/fleet/desired";
/// Where the controller writes the placement.
pub const PLACEMENT: &str = "/routeplex/fleet/placement";
/// The controllers' election: the leader's name, on its lease.
pub const LEADER: &str = "/routeplex/fleet/leader";
/// Cordoned hosts.
pub const CORDON: &str = "/routeplex/fleet/cordon/";

/// The key that cordons a host.
pub fn cordon(name: &str) -> String {
    format!("{CORDON}{name}")
}

/// The key a host registers under.
pub fn host(name: &str) -> String {
    format!("{HOSTS}{name}")
}

/// The key a host's desired topology is read from.
pub fn desired(name: &str) -> String {
    format!("{DESIRED}{name}")
}

/// The host name in a key under `prefix`, if it is one (a key from etcd is not trusted).
pub fn name_in<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    key.strip_prefix(prefix).filter(|n| check_name(n).is_ok())
}

/// A host name is 1..=63 letters, digits, `.`, `_` or `-`, not `.` or `..`: it is part of a
/// key, and of file names on the host.
pub fn check_name(s: &str) -> Result<(), FleetError> {
    let max = MAX_HOST_NAME;
    if s.is_empty() || s.len() > max {
        return Err(FleetError::Name(format!("names are 1..={max} characters, not {}", s.len())));
    }
    if s == "." || s == ".." {
        return Err(FleetError::Name(format!("name {s:?} is reserved")));
    }
    match s.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        Some(c) => {
            Err(FleetError::Name(format!("names use letters, digits, '.', '_' and '-', not {c:?}")))
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        assert_eq!(host("h1"), "/routeplex/hosts/h1");
        assert_eq!(desired("h-2.a_b"), "/routeplex/desired/h-2.a_b");
        assert_eq!(name_in("/routeplex/hosts/h1", HOSTS), Some("h1"));
        assert_eq!(name_in("/routeplex/hosts/a/b", HOSTS), None);
        assert_eq!(name_in("/routeplex/desired/h1", HOSTS), None);
        assert_eq!(name_in("/routeplex/hosts/", HOSTS), None);
        assert!(check_name(&"a".repeat(63)).is_ok());
        assert!(check_name(&"a".repeat(64)).is_err());
        assert!(check_name("..").is_err());
        assert!(check_name("a b").unwrap_err().to_string().contains("' '"));
    }
}
