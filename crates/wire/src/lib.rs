//! Zero-copy header views (placeholder: being written).
#![deny(unsafe_code)]

mod mac;
pub use mac::MacAddr;
