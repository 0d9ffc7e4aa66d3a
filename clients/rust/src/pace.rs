//! Pacing (`CL.PACE`): callers are scheduled, one unit every `period / count`, instead of
//! refused. Either the client sleeps until its slot (with a little jitter, never earlier than
//! the slot), or the server holds the reply (`BLOCK`) on a connection of its own, never the
//! shared multiplexed one, whose other calls would all wait behind it.

use std::time::Duration;

use redis::Value;

use crate::client::Throttle;
use crate::error::Error;
use crate::policy::Rate;
use crate::wire::Backend;

/// How a paced call waits for its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Reserve the slot, then sleep here until it comes (plus up to a millisecond of jitter).
    Sleep,
    /// As `Sleep`, plus a random jitter up to this long (never earlier than the slot), so
    /// processes given neighbouring slots do not wake in lockstep.
    SleepWithJitter(Duration),
    /// `CL.PACE … BLOCK` on a dedicated connection: the server replies when the slot comes.
    Block,
}

/// A paced call's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paced {
    /// The slot has come: act now. `waited` is how long the call waited for it.
    Go { waited: Duration, queued: i64 },
    /// No slot within `max_wait`: one frees after `retry_after`.
    Refused { retry_after: Duration },
}

fn ms(v: i64) -> Duration {
    Duration::from_millis(u64::try_from(v).unwrap_or(0))
}

/// A random duration below `most` (whole microseconds; zero when `most` is under one).
fn jitter(most: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let most_us = u64::try_from(most.as_micros()).unwrap_or(u64::MAX);
    if most_us == 0 {
        return Duration::ZERO;
    }
    // A randomly keyed hasher (std's per-process random keys, stepped per instance).
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    Duration::from_micros(h.finish() % most_us)
}

impl Throttle {
    /// Waits for `key`'s next slot at `rate`, refusing when it is more than `max_wait` away.
    /// Needs the module. Not bound by the per-call deadline (it waits by design): its server
    /// call is bound by `max_wait` plus the deadline.
    pub async fn pace(&self, key: impl AsRef<[u8]>, rate: Rate, max_wait: Duration, how: Wait) -> Result<Paced, Error> {
        match self.backend() {
            Backend::Module => {}
            Backend::Unknown => {
                return Err(Error::Invalid("CL.PACE: the server has not been reached yet (started degraded)".into()));
            }
            Backend::Twin | Backend::Memory => return Err(Error::Invalid("pacing needs the module (CL.PACE)".into())),
        }
        let key = key.as_ref();
        let period = u64::try_from(rate.period().as_millis()).unwrap_or(u64::MAX);
        let max_wait_ms = u64::try_from(max_wait.as_millis()).unwrap_or(u64::MAX);
        let mut cmd = redis::cmd("CL.PACE");
        cmd.arg(key).arg(rate.count()).arg(period).arg("MAXWAIT").arg(max_wait_ms).arg("MS");
        let started = std::time::Instant::now();
        let limit = max_wait + self.config().deadline;
        let value = match how {
            Wait::Sleep | Wait::SleepWithJitter(_) => {
                tokio::time::timeout(self.config().deadline, self.send_shared(cmd, key)).await
            }
            Wait::Block => {
                cmd.arg("BLOCK");
                let mut conn = self.blocking_connection().await?;
                tokio::time::timeout(limit, async move { cmd.query_async::<Value>(&mut conn).await }).await
            }
        }
        .map_err(|_| Error::Invalid("CL.PACE: no reply within its deadline".into()))?
        .map_err(Error::Server)?;
        let reply = crate::wire::five(&value)?;
        if reply[0] != 0 {
            return Ok(Paced::Refused { retry_after: ms(reply[3]) });
        }
        let wait = ms(reply[1]);
        let most = match how {
            Wait::Sleep => Duration::from_millis(1),
            Wait::SleepWithJitter(most) => most,
            Wait::Block => Duration::ZERO,
        };
        if how != Wait::Block && !wait.is_zero() {
            tokio::time::sleep(wait + jitter(most)).await;
        }
        Ok(Paced::Go { waited: started.elapsed(), queued: reply[2] })
    }
}
