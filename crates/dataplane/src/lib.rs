//! The routeplex data plane (placeholder: being written).

pub mod config;
