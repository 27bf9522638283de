//! One etcd call with a deadline, sent again when it reached a member that is down.
//!
//! The client balances calls over every endpoint it was given, and keeps a member that died
//! in its rotation: a call it sends there fails at once as `UNAVAILABLE` (connection refused,
//! no route). With one member of three down, a controller round (a dozen calls) then almost
//! never got through, so a dead host's VRs waited many ticks to be placed again. Such a call is
//! sent again, at most [`RETRIES`] times, within the same deadline; every other error, and a
//! call that does not answer in time, is the caller's.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, GetOptions};

use crate::FleetError;

/// Further tries of a call that found its member down (the client picks a member per call).
pub const RETRIES: usize = 4;

/// Whether `e` says the call never reached a live member, so sending it again is safe and
/// may land on another one.
pub fn unavailable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.code() == tonic::Code::Unavailable,
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// Runs `f()` until it answers with anything but [`unavailable`], at most `1 + RETRIES` times,
/// all within `d`. Every call made this way is one that may be sent twice (reads, puts of the
/// same value, guarded transactions, lease grants: a lease granted twice expires unused).
pub async fn timed<T, F, Fut>(d: Duration, what: &'static str, mut f: F) -> Result<T, FleetError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + d;
    let mut tries = 0;
    loop {
        match tokio::time::timeout_at(deadline, f()).await {
            Ok(Err(e)) if tries < RETRIES && unavailable(&e) => tries += 1,
            Ok(r) => return Ok(r?),
            Err(_) => return Err(FleetError::Timeout { what, ms: d.as_millis() as u64 }),
        }
    }
}

/// A read of `key` (with `opts`), on a clone of the client.
pub fn get(
    c: &Client,
    key: &'static str,
    opts: Option<GetOptions>,
) -> impl std::future::Future<Output = Result<etcd_client::GetResponse, etcd_client::Error>> {
    let mut c = c.clone();
    async move { c.get(key, opts).await }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// On a paused clock that jumps to the next timer when every task waits: the tries and
    /// deadlines below are exact, however the machine is loaded.
    fn run<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(f)
    }

    fn down() -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::unavailable("tcp connect error"))
    }

    #[test]
    fn only_a_member_down_is_unavailable() {
        assert!(unavailable(&down()));
        let refused = tonic::Status::failed_precondition("lease not found");
        assert!(!unavailable(&etcd_client::Error::GRpcStatus(refused)));
        assert!(!unavailable(&etcd_client::Error::LeaseKeepAliveError("gone".into())));
    }

    /// A call that lands on a dead member twice, then on a live one, answers.
    #[test]
    fn a_call_to_a_member_down_is_sent_again() {
        let n = Cell::new(0);
        let r = run(timed(Duration::from_secs(1), "read", || {
            n.set(n.get() + 1);
            let k = n.get();
            async move {
                if k < 3 {
                    Err(down())
                } else {
                    Ok(k)
                }
            }
        }));
        assert_eq!(r.unwrap(), 3);
    }

    /// Every member down: the error after 1 + RETRIES tries, not a loop.
    #[test]
    fn gives_up_after_the_retries() {
        let n = Cell::new(0);
        let r: Result<(), _> = run(timed(Duration::from_secs(1), "read", || {
            n.set(n.get() + 1);
            async { Err(down()) }
        }));
        assert!(matches!(r, Err(FleetError::Etcd(ref e)) if unavailable(e)), "{r:?}");
        assert_eq!(n.get(), 1 + RETRIES);
    }

    /// A refusal is an answer: never sent again.
    #[test]
    fn a_refusal_is_not_retried() {
        let n = Cell::new(0);
        let r: Result<(), _> = run(timed(Duration::from_secs(1), "put", || {
            n.set(n.get() + 1);
            async { Err(etcd_client::Error::InvalidArgs("bad".into())) }
        }));
        assert!(matches!(r, Err(FleetError::Etcd(etcd_client::Error::InvalidArgs(_)))), "{r:?}");
        assert_eq!(n.get(), 1);
    }

    /// Retries stay within the one deadline.
    #[test]
    fn the_deadline_covers_every_try() {
        let n = Cell::new(0);
        let r: Result<(), _> = run(timed(Duration::from_millis(50), "read", || {
            n.set(n.get() + 1);
            async {
                tokio::time::sleep(Duration::from_millis(30)).await;
                Err(down())
            }
        }));
        assert!(matches!(r, Err(FleetError::Timeout { what: "read", ms: 50 })), "{r:?}");
        assert_eq!(n.get(), 2);
    }
}
