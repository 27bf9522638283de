//! Replies as the JSON tree the wire carries, for tests that read them by key (as a client in
//! another language would): `node.execute(cmd).unwrap().json()["routes"]`.

/// Serialises a reply (or any part of one) to its JSON tree.
pub trait Json {
    fn json(&self) -> serde_json::Value;
}

impl<T: serde::Serialize> Json for T {
    fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("replies serialise")
    }
}
