//! The routeplex tester: builds test traffic, offers it to any [`ports::Port`] and counts what
//! comes back.
//!
//! Contract: frames are built once, before a run; sending copies a prepared frame into a batch
//! buffer and stamps a sequence number, so the generator neither allocates nor formats while
//! it runs. Counts are exact: a frame is "offered" only once a port has accepted it.

pub mod frames;
mod gen;

pub use gen::{Generator, Sink};
