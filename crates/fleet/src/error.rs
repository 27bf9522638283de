//! The crate's one error type.

/// What can go wrong in the fleet crate.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The `fleet:` section is invalid: file, line, column, field and value.
    #[error("{file}{at}")]
    Config { file: String, at: yamlpath::Located },
    /// etcd refused or could not be reached.
    #[cfg(feature = "etcd")]
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// An etcd call did not answer in time.
    #[error("etcd: no answer within {ms} ms ({what})")]
    Timeout { what: &'static str, ms: u64 },
    /// The lease ended (expired or revoked) before it could be renewed.
    #[error("etcd: lease {0:x} is gone")]
    LeaseLost(i64),
    /// The local host's control API refused or could not be reached.
    #[error("local host: {0}")]
    Local(#[from] control::ControlError),
    /// A record (ours or one read from etcd) could not be encoded or decoded.
    #[error("{what}: {msg}")]
    Record { what: String, msg: String },
    /// A host or group name that cannot be part of a key: why.
    #[error("{0}")]
    Name(String),
    /// A unit of VRs that fits on no host: why (`placement`).
    #[error("{0}")]
    Unplaced(String),
    /// A file the agent writes or reads.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}
