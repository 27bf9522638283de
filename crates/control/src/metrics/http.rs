//! The metrics endpoint's HTTP side: `hyper`'s HTTP/1 server, driven without an async runtime.
//!
//! One thread accepts; each connection gets a short-lived thread of its own, which hands the
//! connection to `hyper::server::conn::http1` and polls the returned future to its end (a
//! thread-parking waker; there is no tokio runtime and no task to spawn). Hyper parses the
//! request head, checks it (a bad request line or header gets hyper's own 400 or 431), writes
//! the response (status line, headers, `Content-Length`, no body for `HEAD`) and closes: one
//! request per connection, keep-alive off.
//!
//! Hyper reads and writes through [`Wire`], which does plain blocking reads and writes on the
//! std socket (every poll is ready at once) and keeps the bounds hyper has no way to keep:
//! the head must come whole within [`READ_DEADLINE`] however the client spreads it out (one
//! deadline for the whole head, not one per read) and within [`MAX_REQUEST`] bytes. When
//! either bound stops the read, hyper has no request to answer, so the endpoint answers
//! itself (`408`, `431`, as HTTP/1.0) once hyper has given up. Until its head is read a
//! connection holds a place in the [`Pending`] set, whose oldest member is cut when one more
//! comes ([`crate::admit`]); at most [`MAX_CONNECTIONS`] requests are answered at once.

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE as CONTENT_TYPE_H};
use hyper::rt::ReadBufCursor;
use hyper::{Method, Request, Response, StatusCode};

use super::{Sample, Shared, CONTENT_TYPE, FRESH_WAIT, MAX_CONNECTIONS, MAX_PENDING};
use super::{MAX_REQUEST, READ_DEADLINE};
use crate::admit::{self, Pending};

/// How long writing an answer may block.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) fn accept_loop(
    l: TcpListener,
    shared: &Arc<Shared>,
    pending: &Arc<Pending>,
    stop: &AtomicBool,
) {
    for conn in l.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let Ok(s) = conn else {
            // Out of descriptors and the like: do not spin.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
        let slot = match pending.admit(&s) {
            Ok((slot, cut)) => {
                if let Some(peer) = cut {
                    shared.counts.cut.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%peer, limit = MAX_PENDING, "metrics: cut the oldest connection still sending its request");
                }
                slot
            }
            Err(_) => continue,
        };
        let shared = shared.clone();
        // Not made (out of threads): the connection and its slot go with the closure.
        let _ = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || serve_one(&s, slot, &shared));
    }
    pending.cut_all();
}

/// Where a connection's request head is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Head {
    /// Being read.
    Reading,
    /// Read whole: hyper called the service.
    Read,
    /// Longer than [`MAX_REQUEST`].
    TooLarge,
    /// Not whole within [`READ_DEADLINE`].
    TimedOut,
    /// The client closed (or was cut) before sending it whole.
    Closed,
}

/// Gives an answering place back when the answer is done.
struct Answering<'a>(&'a AtomicUsize);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn serve_one(s: &TcpStream, slot: admit::Slot, shared: &Shared) {
    let head = Cell::new(Head::Reading);
    let slot = Cell::new(Some(slot));
    // Held from the request's admission until the connection is done with.
    let answering: Cell<Option<Answering>> = Cell::new(None);
    let service = hyper::service::service_fn(|req: Request<hyper::body::Incoming>| {
        head.set(Head::Read);
        drop(slot.take());
        let (res, place) = answer(shared, req.method(), req.uri().path());
        answering.set(place);
        std::future::ready(Ok::<_, Infallible>(res))
    });
    let wire =
        Wire { s, deadline: Instant::now() + READ_DEADLINE, budget: MAX_REQUEST, head: &head };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        // A client that shuts its side after the request still gets the answer, and hyper
        // does not read past the head to look for that.
        .half_close(true)
        .title_case_headers(true)
        .auto_date_header(false)
        // The head's deadline is `Wire`'s (hyper's own needs a timer, i.e. a runtime).
        .header_read_timeout(None)
        .serve_connection(wire, service);
    // Every poll is ready at once (the wire blocks); the deadline only guards against a
    // future that would wait for a wake-up that never comes.
    let _ = run(conn, READ_DEADLINE + FRESH_WAIT + 2 * WRITE_TIMEOUT);
    drop(answering.take());
    let status = match head.get() {
        Head::Reading | Head::Read => return,
        Head::TooLarge => "431 Request Header Fields Too Large",
        Head::TimedOut => {
            shared.counts.timed_out.fetch_add(1, Ordering::Relaxed);
            "408 Request Timeout"
        }
        Head::Closed => "400 Bad Request",
    };
    respond_raw(s, status);
}

/// The answer to a request whose head was read, and the answering place it holds.
fn answer<'a>(
    shared: &'a Shared,
    method: &Method,
    path: &str,
) -> (Response<Full<Bytes>>, Option<Answering<'a>>) {
    if shared.answering.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
        shared.answering.fetch_sub(1, Ordering::AcqRel);
        shared.counts.busy.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(limit = MAX_CONNECTIONS, "metrics: too many requests at once; answered 503");
        return (text(StatusCode::SERVICE_UNAVAILABLE, "too many connections\n".into()), None);
    }
    let place = Some(Answering(&shared.answering));
    if method != Method::GET && method != Method::HEAD {
        return (text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD only\n".into()), place);
    }
    let (render, ctype): (fn(&Arc<Sample>) -> String, _) = match path {
        "/metrics" => (Sample::render, CONTENT_TYPE),
        "/" => (|s| s.page(), "text/html; charset=utf-8"),
        "/api/graph" => {
            (|s| serde_json::to_string(&s.graph_page()).unwrap_or_default(), "application/json")
        }
        _ => {
            let body = "routeplex serves GET /metrics, / (the live topology page), /api/graph\n";
            return (text(StatusCode::NOT_FOUND, body.into()), place);
        }
    };
    let res = match shared.sample() {
        Ok(sample) => reply(StatusCode::OK, ctype, render(&sample)),
        Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    };
    (res, place)
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    reply(status, "text/plain", body)
}

/// A response hyper completes with `Content-Length` (and drops the body of for `HEAD`).
fn reply(status: StatusCode, ctype: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE_H, HeaderValue::from_static(ctype));
    r.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

/// An answer written by hand, for a connection hyper got no request from.
fn respond_raw(mut s: &TcpStream, status: &str) {
    let body = format!("{status}\n");
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(body.as_bytes());
    let _ = s.flush();
    let _ = s.shutdown(Shutdown::Write);
}

/// A connection as hyper reads and writes it: blocking, the request head bounded.
struct Wire<'a> {
    s: &'a TcpStream,
    /// When the whole head must be in.
    deadline: Instant,
    /// Bytes the head may still take.
    budget: usize,
    head: &'a Cell<Head>,
}

impl Wire<'_> {
    fn read_head(&mut self, buf: &mut ReadBufCursor<'_>) -> std::io::Result<()> {
        if self.head.get() != Head::Reading {
            // GET and HEAD have no body, and the answer needs nothing more: the end.
            return Ok(());
        }
        if self.budget == 0 {
            self.head.set(Head::TooLarge);
            return Err(ErrorKind::InvalidData.into());
        }
        let mut chunk = [0u8; 1024];
        let want = chunk.len().min(self.budget).min(buf.remaining());
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.head.set(Head::TimedOut);
                return Err(ErrorKind::TimedOut.into());
            }
            self.s.set_read_timeout(Some(left))?;
            match (&mut &*self.s).read(&mut chunk[..want]) {
                Ok(n) => {
                    if n == 0 {
                        self.head.set(Head::Closed);
                    }
                    self.budget -= n;
                    buf.put_slice(&chunk[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    self.head.set(Head::TimedOut);
                    return Err(e);
                }
                Err(e) => {
                    self.head.set(Head::Closed);
                    return Err(e);
                }
            }
        }
    }
}

impl hyper::rt::Read for Wire<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(self.get_mut().read_head(&mut buf))
    }
}

impl hyper::rt::Write for Wire<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            match (&mut &*self.s).write(buf) {
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.head.get() != Head::Read {
            // Hyper gave up on the head: the answer (408, 431) is still to be written.
            return Poll::Ready(Ok(()));
        }
        Poll::Ready(self.s.shutdown(Shutdown::Write))
    }
}

/// Wakes the thread that polls.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` on this thread until it is done, or `limit` has passed (`None`; `f` is dropped).
fn run<F: Future>(f: F, limit: Duration) -> Option<F::Output> {
    let deadline = Instant::now() + limit;
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return Some(out);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        std::thread::park_timeout(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_waits_for_a_wake_and_gives_up_at_its_limit() {
        // Pending once, waking itself: done on the second poll.
        let mut polled = 0;
        let f = std::future::poll_fn(|cx| {
            polled += 1;
            if polled < 2 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(7)
            }
        });
        assert_eq!(run(f, Duration::from_secs(5)), Some(7));
        // Never woken, never ready: given up.
        assert_eq!(run(std::future::pending::<()>(), Duration::from_millis(50)), None);
    }
}
