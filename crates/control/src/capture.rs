//! The client side of capture and trace: `routeplex capture` and `routeplex trace` over the
//! control API (`capture_start`/`capture_read`/`capture_stop`, `trace_start`/`trace_read`).
//! `ask` sends one command and returns its answer: the control socket for the CLI, a
//! [`crate::Node`] directly in tests.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::api::Command;
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
    ask: &mut dyn FnMut(Command) -> Result<Value, ControlError>,
    point: &str,
    count: u64,
    drops: bool,
    out: impl Write,
    stop: &AtomicBool,
) -> Result<Summary, ControlError> {
    let started = ask(Command::CaptureStart { point: point.into(), count, drops, ring: None })?;
    let id = started["id"].as_u64().unwrap_or(0);
    let r = write_frames(ask, id, started["port"].as_str().unwrap_or(point), out, stop);
    let stopped = ask(Command::CaptureStop { id });
    let mut s = r?;
    s.lost = stopped?["lost"].as_u64().unwrap_or(0);
    Ok(s)
}

fn write_frames(
    ask: &mut dyn FnMut(Command) -> Result<Value, ControlError>,
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
        let v = ask(Command::CaptureRead { id, max: Some(1024) })?;
        let frames = v["frames"].as_array().map(Vec::as_slice).unwrap_or_default();
        for f in frames {
            let data = from_hex(f["hex"].as_str().unwrap_or_default()).unwrap_or_default();
            let dir = match f["dir"].as_str() {
                Some("rx") | Some("drop") => Direction::Inbound,
                Some("tx") => Direction::Outbound,
                _ => Direction::Unknown,
            };
            let comment = f["reason"].as_str().map(|r| format!("dropped: {r}"));
            let ts = f["ts_ns"].as_u64().unwrap_or(0);
            let len = f["len"].as_u64().unwrap_or(data.len() as u64) as u32;
            w.packet(ifc, ts, len, &data, dir, comment.as_deref()).map_err(io)?;
            s.frames += 1;
        }
        w.flush().map_err(io)?;
        if v["done"].as_bool() == Some(true) {
            break;
        }
        if frames.is_empty() {
            std::thread::sleep(IDLE);
        }
    }
    Ok(s)
}

/// Traces the next `count` packets of `vr`, calling `each` with every packet's line as it
/// comes, until all are in or `stop`.
pub fn trace(
    ask: &mut dyn FnMut(Command) -> Result<Value, ControlError>,
    vr: &str,
    count: u32,
    stop: &AtomicBool,
    each: &mut dyn FnMut(String),
) -> Result<u32, ControlError> {
    ask(Command::TraceStart { vr: vr.into(), count })?;
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let v = ask(Command::TraceRead { vr: vr.into() })?;
        let packets = v["packets"].as_array().map(Vec::as_slice).unwrap_or_default();
        for p in packets {
            n += 1;
            each(format!("#{n} {}", trace_line(p)));
        }
        if v["left"].as_u64() == Some(0) {
            break;
        }
        if packets.is_empty() {
            std::thread::sleep(IDLE);
        }
    }
    Ok(n)
}

/// One traced packet, stage by stage.
pub fn trace_line(p: &Value) -> String {
    let s = |k: &str| p[k].as_str().unwrap_or("?").to_string();
    let mut line = format!(
        "rx {} {} B -> demux: interface {}, ethertype {}",
        s("port"),
        p["len"],
        s("interface"),
        s("ethertype")
    );
    if let Some(l) = p["lookup"].as_object() {
        line += &format!(
            " -> validate: ok -> lookup {}: next hop {} ({})",
            l["destination"].as_str().unwrap_or("?"),
            l["next_hop"],
            l["adjacency"].as_str().unwrap_or("?")
        );
    }
    match (p["egress"].as_str(), p["drop"].as_str()) {
        (_, Some(d)) => line += &format!(" -> drop: {d}"),
        (Some(e), None) if p["lookup"].is_object() => line += &format!(" -> rewrite -> egress {e}"),
        (Some(e), None) => line += &format!(" -> answered -> egress {e}"),
        (None, None) => line += " -> consumed (answered, or queued for a neighbor)",
    }
    line
}
