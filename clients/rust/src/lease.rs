//! Leases as RAII guards (`CL.ACQUIRE` / `CL.RELEASE`): at most `limit` holders of a key at
//! once; a [`Lease`] is renewed in the background before it ends, released when dropped, and
//! usable across `.await`. A holder that dies (or a guard leaked with `mem::forget`) frees its
//! slot by itself when its lease runs out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::{Cmd, Value};

use crate::client::{Backend, Error, Failed, Throttle, five};
use crate::decision::{Decision, Numbers, Source};

/// A held lease. Dropping it releases the slot (in the background); [`Lease::release`] does so
/// and waits for the server's answer.
pub struct Lease {
    client: Throttle,
    key: Vec<u8>,
    id: String,
    /// Set by the renewal task when the server no longer holds the lease (it ran out while
    /// the server could not be reached, or the key was deleted).
    lost: Arc<AtomicBool>,
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

impl Throttle {
    /// Takes one of `limit` slots of `key` for `lease` (renewed in the background every third
    /// of it while the guard lives). `Err(decision)` when every slot is held (its
    /// `retry_after`: until the earliest lease ends) or the server cannot answer (degraded:
    /// leases fail closed whatever the failure policy). Needs the module.
    pub async fn acquire(&self, key: impl AsRef<[u8]>, limit: i64, lease: Duration) -> Result<Result<Lease, Decision>, Error> {
        if self.backend() != Backend::Module {
            return Err(Error::Invalid("leases need the module (CL.ACQUIRE); the Functions twin and the test kit have none".into()));
        }
        let key = key.as_ref().to_vec();
        let id = new_id();
        let value = match self.request(acquire_cmd(&key, limit, lease, &id), &key).await {
            Ok(v) => v,
            Err(Failed::Refused(e)) => return Err(Error::Server(e)),
            Err(Failed::Down(reason)) => {
                let numbers = Numbers { verdict: crate::Verdict::Denied { retry_after: self.config().breaker.probe_interval }, limit, remaining: 0, reset_after: Duration::ZERO };
                return Ok(Err(Decision::new(numbers, Source::Degraded { reason, policy: crate::FailurePolicy::FailClosed })));
            }
        };
        let decision = Decision::new(Numbers::from_reply(five(&value)?), Source::Server);
        if !decision.allowed() {
            return Ok(Err(decision));
        }
        let lost = Arc::new(AtomicBool::new(false));
        let renew = {
            let (client, key, id, lost) = (self.clone(), key.clone(), id.clone(), lost.clone());
            let every = (lease / 3).max(Duration::from_millis(1));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    match client.request(acquire_cmd(&key, limit, lease, &id), &key).await {
                        Ok(v) => {
                            let held = five(&v).is_ok_and(|r| r[0] == 0);
                            lost.store(!held, Ordering::Relaxed);
                            if !held {
                                tracing::warn!(key = %String::from_utf8_lossy(&key), "redis-throttle: lease lost");
                                return;
                            }
                        }
                        // Keep trying while the lease may still run: the next renewal may reach it.
                        Err(_) => continue,
                    }
                }
            })
        };
        Ok(Ok(Lease { client: self.clone(), key, id, lost, renew: Some(renew), released: false, remaining: decision.remaining }))
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

    /// Whether the server is known to no longer hold this lease (a renewal found it gone).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Releases the slot now; `true` if the server still held the lease.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.stop_renewing();
        self.released = true;
        let cmd = redis::cmd("CL.RELEASE").arg(&self.key).arg(&self.id).clone();
        match self.client.request(cmd, &self.key).await {
            Ok(Value::Int(n)) => Ok(n == 1),
            Ok(other) => Err(Error::Invalid(format!("CL.RELEASE replied {other:?}"))),
            Err(Failed::Refused(e)) => Err(Error::Server(e)),
            Err(Failed::Down(reason)) => Err(Error::Invalid(format!("the server could not be reached ({reason:?}); the lease frees itself when it ends"))),
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
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, key, id) = (self.client.clone(), std::mem::take(&mut self.key), std::mem::take(&mut self.id));
            runtime.spawn(async move {
                let cmd = redis::cmd("CL.RELEASE").arg(&key).arg(&id).clone();
                let _ = client.request(cmd, &key).await;
            });
        }
    }
}
