//! The client side of capture and trace: `routeplex capture` and `routeplex trace` over the
//! control API (`capture_start`/`capture_read`/`capture_stop`, `trace_start`/`trace_read`).
//! `ask` sends one command and returns its answer: the control socket for the CLI, a
//! [`crate::Node`] directly in tests.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::api::Command;
use crate::api::{Answer, CaptureRead, CaptureStarted, CaptureStopped, TraceRead, TraceRow};
use crate::pcapng::{from_hex, Direction, Writer};
use crate::ControlError;

/// How long a reader waits between two reads that found nothing.
const IDLE: Duration = Duration::from_millis(20);

/// What a capture ended with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Frames written.
    pub frames: u64,
    /// Copies the data plane lost to a full ring.
    pub lost: u64,
}

/// Captures at `point` until `count` frames (0: until `stop`) and writes them to `out` as
/// pcapng, flushing after each read (so `-w - | tcpdump -r -` shows them as they come).
pub fn capture(
    ask: &mut dyn FnMut(Command) -> Result<Answer, ControlError>,
    point: &str,
    count: u64,
    drops: bool,
    out: impl Write,
    stop: &AtomicBool,
) -> Result<Summary, ControlError> {
    let started: CaptureStarted =
        ask(Command::CaptureStart { point: point.into(), count, drops, ring: None })?.try_into()?;
    let id = started.id;
    let r = write_frames(ask, id, &started.port, out, stop);
    let stopped = ask(Command::CaptureStop { id });
    let mut s = r?;
    s.lost = CaptureStopped::try_from(stopped?)?.lost;
    Ok(s)
}

fn write_frames(
    ask: &mut dyn FnMut(Command) -> Result<Answer, ControlError>,
    id: u64,
    port: &str,
    out: impl Write,
    stop: &AtomicBool,
) -> Result<Summary, ControlError> {
    let io = |e| ControlError::io("capture output", e);
    let mut w = Writer::new(out).map_err(io)?;
    let ifc = w.interface(port, ports::BUF_SIZE as u32).map_err(io)?;
    w.flush().map_err(io)?;
    let mut s = Summary::default();
    while !stop.load(Ordering::Relaxed) {
        let v: CaptureRead = ask(Command::CaptureRead { id, max: Some(1024) })?.try_into()?;
        for f in &v.frames {
            let data = from_hex(&f.hex).ok_or_else(|| {
                ControlError::State(format!("capture {id}: a frame's bytes are not hex"))
            })?;
            // An impairment drops frames on their way out of the port.
            let impaired = f.reason.as_deref().is_some_and(|r| r.starts_with("impair_"));
            let dir = match f.dir.as_str() {
                "drop" if impaired => Direction::Outbound,
                "rx" | "drop" => Direction::Inbound,
                "tx" => Direction::Outbound,
                _ => Direction::Unknown,
            };
            let comment = f.reason.as_ref().map(|r| format!("dropped: {r}"));
            w.packet(ifc, f.ts_ns, f.len, &data, dir, comment.as_deref()).map_err(io)?;
            s.frames += 1;
        }
        w.flush().map_err(io)?;
        if v.done {
            break;
        }
        if v.frames.is_empty() {
            std::thread::sleep(IDLE);
        }
    }
    Ok(s)
}

/// Traces the next `count` packets of `vr`, calling `each` with every packet's line as it
/// comes, until all are in or `stop`.
pub fn trace(
    ask: &mut dyn FnMut(Command) -> Result<Answer, ControlError>,
    vr: &str,
    count: u32,
    stop: &AtomicBool,
    each: &mut dyn FnMut(String),
) -> Result<u32, ControlError> {
    ask(Command::TraceStart { vr: vr.into(), count })?;
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let v: TraceRead = ask(Command::TraceRead { vr: vr.into() })?.try_into()?;
        for p in &v.packets {
            n += 1;
            each(format!("#{n} {}", trace_line(p)));
        }
        if v.left == 0 {
            break;
        }
        if v.packets.is_empty() {
            std::thread::sleep(IDLE);
        }
    }
    Ok(n)
}

/// One traced packet, stage by stage.
pub fn trace_line(p: &TraceRow) -> String {
    let mut line = format!(
        "rx {} {} B -> demux: interface {}, ethertype {}",
        p.port, p.len, p.interface, p.ethertype
    );
    if let Some(l) = &p.lookup {
        line += &format!(
            " -> validate: ok -> lookup {}: next hop {} ({})",
            l.destination, l.next_hop, l.adjacency
        );
    }
    match (&p.egress, &p.drop) {
        // Sent, then dropped by the impairment of the link it left by.
        (Some(e), Some(d)) if d.starts_with("impair_") => {
            line += &format!(" -> rewrite -> egress {e} -> drop: {d}")
        }
        (_, Some(d)) => line += &format!(" -> drop: {d}"),
        (Some(e), None) if p.lookup.is_some() => line += &format!(" -> rewrite -> egress {e}"),
        (Some(e), None) => line += &format!(" -> answered -> egress {e}"),
        (None, None) => line += " -> consumed (answered, or queued for a neighbor)",
    }
    line
}
