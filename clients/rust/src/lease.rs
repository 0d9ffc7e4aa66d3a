//! Leases as RAII guards (`CL.ACQUIRE` / `CL.RELEASE`): at most `limit` holders of a key at
//! once; a [`Lease`] is renewed in the background before it ends, released when dropped, and
//! usable across `.await`.
//!
//! - A holder that dies frees its slot by itself when its lease runs out.
//! - A guard leaked with `mem::forget` (never dropped, so never released) is renewed for at
//!   most `Config::lease_max_hold` after it was taken or last [`Lease::extend`]ed, then
//!   released: its slot is free again within that time (plus one renewal interval).
//! - A guard knows when it may have lost its slot: [`Lease::is_lost`] turns true once its last
//!   expiry the server confirmed has passed (renewals that could not reach the server, with the
//!   circuit breaker open, say), or a renewal found the lease gone.
//! - Cancel-safe: an `acquire` dropped after its command may have reached the server releases
//!   it in the background; a `release` dropped before its answer releases in the background too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use crate::client::Throttle;
use crate::decision::{Decision, Numbers, Source};
use crate::error::{Error, Failed};
use crate::wire::{Backend, five};

/// What a guard and its renewal task share.
struct State {
    /// The server no longer holds the lease (a renewal found it gone, or renewals ended).
    lost: AtomicBool,
    /// The instants below, as nanoseconds after `base`.
    base: Instant,
    /// The lease's last expiry the server confirmed (counted from when its call was sent, so
    /// never later than the server's own).
    held_until: AtomicU64,
    /// Renewals stop here unless the guard is extended (`Config::lease_max_hold`).
    renew_until: AtomicU64,
}

impl State {
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn at(&self, nanos: u64) -> Instant {
        self.base + Duration::from_nanos(nanos)
    }

    /// Records a confirmed expiry (never moving it back).
    fn confirm(&self, until: Instant) {
        self.held_until.fetch_max(self.nanos(until), Ordering::SeqCst);
    }
}

/// A held lease. Dropping it releases the slot (in the background); [`Lease::release`] does so
/// and waits for the server's answer.
pub struct Lease {
    client: Throttle,
    key: Vec<u8>,
    id: String,
    lease: Duration,
    state: Arc<State>,
    renew: Option<tokio::task::JoinHandle<()>>,
    released: bool,
    /// Slots left when it was taken (CL.ACQUIRE's `remaining`).
    remaining: i64,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &String::from_utf8_lossy(&self.key)).field("id", &self.id).finish()
    }
}

fn acquire_cmd(key: &[u8], limit: i64, lease: Duration, id: &str) -> Cmd {
    let mut cmd = redis::cmd("CL.ACQUIRE");
    cmd.arg(key).arg(limit).arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1)).arg(id).arg("MS");
    cmd
}

/// An id unique to this process and call: the process id, the time and a counter.
fn new_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{:x}-{nanos:x}-{:x}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Sends `CL.RELEASE` in the background on the shared connection (after any command this client
/// sent before on it; not through the breaker), for at most `within` (after which the lease has
/// ended anyway). Without a runtime the lease frees itself when it ends.
fn release_in_background(client: &Throttle, key: Vec<u8>, id: String, within: Duration) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let client = client.clone();
        runtime.spawn(async move {
            let cmd = redis::cmd("CL.RELEASE").arg(&key).arg(&id).clone();
            let _ = tokio::time::timeout(within, client.send_shared(cmd, &key)).await;
        });
    }
}

/// Releases a lease whose `acquire` was dropped after its command may have been sent.
struct Undo<'a> {
    client: &'a Throttle,
    key: &'a [u8],
    id: &'a str,
    within: Duration,
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if self.armed {
            release_in_background(self.client, self.key.to_vec(), self.id.to_string(), self.within);
        }
    }
}

impl Throttle {
    /// Takes one of `limit` slots of `key` for `lease` (renewed in the background every third
    /// of it while the guard lives, for at most `Config::lease_max_hold` unless
    /// [`Lease::extend`]ed). `Err(decision)` when every slot is held (its `retry_after`: until
    /// the earliest lease ends) or the server cannot answer (degraded: leases fail closed
    /// whatever the failure policy). Needs the module.
    pub async fn acquire(
        &self,
        key: impl AsRef<[u8]>,
        limit: i64,
        lease: Duration,
    ) -> Result<Result<Lease, Decision>, Error> {
        let degraded = |client: &Throttle, reason| {
            let numbers = Numbers {
                verdict: crate::Verdict::Denied { retry_after: client.config().breaker.probe_interval },
                limit,
                remaining: 0,
                reset_after: Duration::ZERO,
            };
            Ok(Err(Decision::new(numbers, Source::Degraded { reason, policy: crate::FailurePolicy::FailClosed })))
        };
        match self.backend() {
            Backend::Module => {}
            Backend::Unknown => {
                return degraded(
                    self,
                    crate::Reason::Connection("the server has not been reached yet (started degraded)".into()),
                );
            }
            Backend::Twin | Backend::Memory => {
                return Err(Error::Invalid(
                    "leases need the module (CL.ACQUIRE); the Functions twin and the test kit have none".into(),
                ));
            }
        }
        let key = key.as_ref().to_vec();
        let id = new_id();
        let within = lease.saturating_add(self.config().deadline);
        let mut undo = Undo { client: self, key: &key, id: &id, within, armed: true };
        let sent = Instant::now();
        let value = match self.request(acquire_cmd(&key, limit, lease, &id), &key).await {
            Ok(v) => v,
            Err(Failed::Refused(e)) => {
                undo.armed = false;
                return Err(Error::Server(e));
            }
            // No answer: the command may still reach a slow server; the undo releases it.
            Err(Failed::Down(reason)) => return degraded(self, reason),
        };
        undo.armed = false;
        drop(undo);
        let decision = Decision::new(Numbers::from_reply(five(&value)?), Source::Server);
        if !decision.allowed() {
            return Ok(Err(decision));
        }
        let base = sent;
        let state = Arc::new(State {
            lost: AtomicBool::new(false),
            base,
            held_until: AtomicU64::new(0),
            renew_until: AtomicU64::new(u64::try_from(self.config().lease_max_hold.as_nanos()).unwrap_or(u64::MAX)),
        });
        state.confirm(sent + lease);
        let renew = tokio::spawn(renew(self.clone(), key.clone(), id.clone(), limit, lease, state.clone()));
        Ok(Ok(Lease {
            client: self.clone(),
            key,
            id,
            lease,
            state,
            renew: Some(renew),
            released: false,
            remaining: decision.remaining,
        }))
    }
}

/// The renewal task: every third of the lease while the guard lives (it is aborted on drop),
/// until the hold ends (a leaked guard), the server says the lease is gone, or the lease may
/// have run out unrenewed. Once lost, always lost: the task releases what it may still hold
/// and stops.
async fn renew(client: Throttle, key: Vec<u8>, id: String, limit: i64, lease: Duration, state: Arc<State>) {
    let every = (lease / 3).max(Duration::from_millis(1));
    let within = lease.saturating_add(client.config().deadline);
    let give_up = |why: &str, key: Vec<u8>, id: String| {
        state.lost.store(true, Ordering::SeqCst);
        tracing::warn!(key = %String::from_utf8_lossy(&key), "redis-throttle: lease lost ({why})");
        release_in_background(&client, key, id, within);
    };
    loop {
        tokio::time::sleep(every).await;
        let sent = Instant::now();
        if sent >= state.at(state.renew_until.load(Ordering::SeqCst)) {
            return give_up("held for Config::lease_max_hold without Lease::extend: a leaked guard?", key, id);
        }
        if sent >= state.at(state.held_until.load(Ordering::SeqCst)) {
            return give_up("its renewals did not reach the server before it ran out", key, id);
        }
        match client.request(acquire_cmd(&key, limit, lease, &id), &key).await {
            Ok(v) if five(&v).is_ok_and(|r| r[0] == 0) => {
                // Held without a gap only if the answer came before the last confirmed expiry.
                if Instant::now() >= state.at(state.held_until.load(Ordering::SeqCst)) {
                    return give_up("renewed only after it may have run out", key, id);
                }
                state.confirm(sent + lease);
            }
            Ok(_) => {
                state.lost.store(true, Ordering::SeqCst);
                tracing::warn!(key = %String::from_utf8_lossy(&key), "redis-throttle: lease lost (the server no longer held it)");
                return;
            }
            // Keep trying while the lease may still run: the next renewal may reach it.
            Err(_) => continue,
        }
    }
}

impl Lease {
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The slots left when this lease was taken.
    pub fn remaining(&self) -> i64 {
        self.remaining
    }

    /// Whether this guard may no longer hold its slot: the last expiry the server confirmed
    /// has passed (renewals failed or were not sent, e.g. with the circuit breaker open:
    /// another holder may have the slot now), a renewal found the lease gone, or renewals
    /// ended at `Config::lease_max_hold`. Once true, always true (renewals stop). Work the slot
    /// guards should stop when it is true.
    pub fn is_lost(&self) -> bool {
        self.state.lost.load(Ordering::SeqCst) || Instant::now() >= self.held_until()
    }

    /// Until when the server surely holds this lease: its last confirmed expiry (counted from
    /// when the confirming call was sent).
    pub fn held_until(&self) -> Instant {
        self.state.at(self.state.held_until.load(Ordering::SeqCst))
    }

    /// A sign of life: keeps renewing for at least `hold` from now (beyond
    /// `Config::lease_max_hold` from the acquire). A guard never extended stops being renewed
    /// `lease_max_hold` after it was taken, so a leaked one frees its slot.
    pub fn extend(&self, hold: Duration) {
        let until = self.state.nanos(Instant::now()).saturating_add(u64::try_from(hold.as_nanos()).unwrap_or(u64::MAX));
        self.state.renew_until.fetch_max(until, Ordering::SeqCst);
    }

    /// [`Lease::extend`] by `Config::lease_max_hold` (the HTTP layer, on each body frame).
    #[cfg(feature = "http")]
    pub(crate) fn touch(&self) {
        self.extend(self.client.config().lease_max_hold);
    }

    /// The lease's length (each renewal runs it again from then).
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Releases the slot now; `true` if the server still held the lease. Dropped before the
    /// server's answer, it releases in the background (as a dropped guard does).
    pub async fn release(mut self) -> Result<bool, Error> {
        self.stop_renewing();
        let cmd = redis::cmd("CL.RELEASE").arg(&self.key).arg(&self.id).clone();
        let result = self.client.request(cmd, &self.key).await;
        self.released = !matches!(result, Err(Failed::Down(_)));
        match result {
            Ok(Value::Int(n)) => Ok(n == 1),
            Ok(other) => Err(Error::Invalid(format!("CL.RELEASE replied {other:?}"))),
            Err(Failed::Refused(e)) => Err(Error::Server(e)),
            Err(Failed::Down(reason)) => Err(Error::Invalid(format!(
                "the server could not be reached ({reason:?}); released in the background, or the lease frees itself when it ends"
            ))),
        }
    }

    fn stop_renewing(&mut self) {
        if let Some(task) = self.renew.take() {
            task.abort();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_renewing();
        if self.released {
            return;
        }
        // Release in the background; without a runtime the lease frees itself when it ends.
        let within = self.lease.saturating_add(self.client.config().deadline);
        release_in_background(&self.client, std::mem::take(&mut self.key), std::mem::take(&mut self.id), within);
    }
}
