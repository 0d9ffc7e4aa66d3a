//! Reservations for hot keys: `reserve(n)` takes `n` units in one server call and spends them
//! locally; what is unused goes back (a refund) when the reservation is dropped or expires. So
//! one global limit serves many requests from one process with one server call per `n`, and
//! never admits more than the server granted.
//!
//! Every refund is bounded (`HELD t`): the taking call reads, atomically, the instant the
//! limiter would be full again right after it, and the refund gives back at most what the
//! limiter still holds of the units then. A reservation dropped after its units were regained
//! by time (its window closed, its emission time passed) gives nothing back, so a late refund
//! never lets the limiter admit more than its limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::client::Throttle;
use crate::decision::{Decision, Source};
use crate::error::Error;
use crate::policy::Policy;

/// Units granted by the server, spent locally with [`Reservation::take`].
pub struct Reservation {
    client: Throttle,
    policy: Policy,
    key: Vec<u8>,
    left: Arc<AtomicU32>,
    until: Instant,
    /// The server's decision granting the units (a degraded one is not refunded).
    decision: Decision,
    /// The instant (Unix ms) the limiter would have been full again right after the taking
    /// call: every refund of this reservation is bounded by it (`None`: nothing is refunded).
    held: Option<i64>,
    expiry: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("left", &self.left())
            .finish()
    }
}

/// Gives `left`'s units back to the server, once (whoever swaps them out refunds them), bounded
/// by `held` (never more than the limiter still holds of them).
async fn give_back(client: &Throttle, policy: &Policy, key: &[u8], left: &AtomicU32, held: Option<i64>) {
    let n = left.swap(0, Ordering::SeqCst);
    if let (true, Some(held)) = (n > 0, held) {
        let _ = client.refund_held(policy, key, n, held).await;
    }
}

impl Throttle {
    /// Takes `n` units of `key` in one call, to spend within `valid_for`. `Err(decision)` when
    /// the server does not grant all `n` (or, degraded, the failure policy denies).
    pub async fn reserve(
        &self,
        policy: &Policy,
        key: impl AsRef<[u8]>,
        n: u32,
        valid_for: Duration,
    ) -> Result<Result<Reservation, Decision>, Error> {
        let key = key.as_ref().to_vec();
        let (decision, held) = self.check_held(policy, &key, n).await?;
        if !decision.allowed() {
            return Ok(Err(decision));
        }
        let left = Arc::new(AtomicU32::new(n));
        let until = Instant::now() + valid_for;
        // Units the server granted go back when the reservation expires unused.
        let expiry = (decision.source == Source::Server).then(|| {
            let (client, policy, key, left) = (self.clone(), *policy, key.clone(), left.clone());
            tokio::spawn(async move {
                tokio::time::sleep(valid_for).await;
                give_back(&client, &policy, &key, &left, held).await;
            })
        });
        Ok(Ok(Reservation { client: self.clone(), policy: *policy, key, left, until, decision, held, expiry }))
    }
}

impl Reservation {
    /// Spends one unit: `false` when none is left or the reservation has expired.
    pub fn take(&self) -> bool {
        if Instant::now() >= self.until {
            return false;
        }
        self.left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }

    /// Units not spent yet.
    pub fn left(&self) -> u32 {
        self.left.load(Ordering::SeqCst)
    }

    /// The decision that granted the units.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Gives the unused units back now and waits for the server.
    pub async fn finish(mut self) {
        if let Some(task) = self.expiry.take() {
            task.abort();
        }
        if self.decision.source == Source::Server {
            give_back(&self.client, &self.policy, &self.key, &self.left, self.held).await;
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let Some(task) = self.expiry.take() else { return };
        task.abort();
        if self.left() == 0 {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, policy, key, left, held) =
                (self.client.clone(), self.policy, std::mem::take(&mut self.key), self.left.clone(), self.held);
            runtime.spawn(async move { give_back(&client, &policy, &key, &left, held).await });
        }
    }
}
