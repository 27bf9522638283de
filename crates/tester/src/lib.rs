//! The routeplex router tester: offers test traffic to a device under test (DUT) through any
//! [`ports::Port`], counts what comes back, and runs the standard measurements over it.
//!
//! Job: the router tester of seed 000 §3.1 (offered against forwarded load, repeated runs,
//! 99 % confidence intervals, 64-byte frames), RFC 2544 (throughput by binary search, latency,
//! frame loss rate, back-to-back) and CSIT-style NDR/PDR search, against any [`Dut`].
//! [`scenario`] runs a whole experiment described in a file (a DUT built per point from a few
//! parameters, an axis, the traffic and the method) and writes its table, JSON, CSV and plots.
//! [`pairs`] runs the benchmarks' comparisons as interleaved pairs with memory and compute
//! probes before each trial, so a change of the machine's speed shows instead of skewing a
//! ratio.
//!
//! Contract:
//! - Frames are built once, before a run. Sending copies a prepared frame into a batch buffer
//!   and stamps it (flow sequence number, trial tag, TX time, flow id; see [`frames`]) with
//!   the UDP checksum kept right by an incremental update; receiving reads the stamp and
//!   counts. Neither allocates nor formats per packet.
//! - Counts are exact. A frame is *offered* once a port has accepted it; *refused* frames are
//!   counted apart and, on ports where a refusal is the DUT dropping at ingress (`mem`), as
//!   loss. *Lost* = offered − received, per flow and per class; reordering and duplicates come
//!   from per-flow sequence numbers. Tests assert counts exactly.
//! - Times are measured, never assumed: a trial reports the rate it actually offered and how
//!   late the pacer's releases were. Latency is RX time − TX stamp on one monotonic clock,
//!   read once per burst on each side.
//! - A [`Dut`] exposes the two ports the generator and the sink use, where to address frames,
//!   and a report; the tester knows nothing else about it.

pub mod analyzer;
pub mod clock;
pub mod dut;
pub mod fake;
pub mod frames;
#[doc(hidden)]
pub mod fuzzing;
mod gen;
pub mod linkmeasure;
pub mod method;
pub mod pacer;
pub mod pairs;
pub mod plot;
pub mod progress;
pub mod report;
pub mod runner;
pub mod scenario;
mod stall;
pub mod stats;
pub mod traffic;
pub mod vm;

pub use analyzer::Analyzer;
pub use clock::Clock;
pub use dut::{Dut, DutCounters, DutPorts, DutReport, DutSnapshot, PortSet, Refusal, Target};
pub use gen::{GenFrame, Generator, Sink};
pub use pacer::{Pacer, Rate};
pub use runner::{Load, Runner, RunnerOptions, TrialResult, Until};

/// Tells the CPU that `p` will soon be read (`write`: written). A hint only: it never faults,
/// whatever `p` is. Frames cross CPUs between the generator, the DUT and the sink, so their
/// first touch is a cache miss; hinting a burst's frames ahead overlaps those misses.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8, write: bool) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 / PREFETCHW have no architectural effect besides caching and do not
    // fault on any address; SSE is part of the x86_64 baseline and PREFETCHW decodes as a NOP
    // where it is missing.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
        if write {
            _mm_prefetch::<_MM_HINT_ET0>(p.cast::<i8>());
        } else {
            _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, write);
}

/// A tester error: one line saying what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    /// An error saying `msg`.
    pub fn new(msg: impl Into<String>) -> Error {
        Error(msg.into())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Error {
        Error(s.to_string())
    }
}

/// Parses a rate or count: `200000`, `200k`, `1.5M`, `2e6`, `1G` (k, M, G: powers of 1000).
pub fn parse_rate(s: &str) -> Result<f64, crate::Error> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        Some((i, 'g' | 'G')) => (&t[..i], 1e9),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * mult),
        _ => Err(format!("{s:?} is not a rate (e.g. 250000, 250k, 1.5M)").into()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rates_parse_with_suffixes() {
        assert_eq!(super::parse_rate("200k"), Ok(200_000.0));
        assert_eq!(super::parse_rate("1.5M"), Ok(1_500_000.0));
        assert_eq!(super::parse_rate("2e6"), Ok(2_000_000.0));
        assert_eq!(super::parse_rate("750"), Ok(750.0));
        assert!(super::parse_rate("fast").is_err());
        assert!(super::parse_rate("-1k").is_err());
    }
}
