//! Limiters decided in this process by `redis-throttle-core`, with keys held as Redis holds them
//! (the same stored bytes, expiring at the same millisecond). It serves two purposes with one
//! implementation: the [`crate::Throttle::in_memory`] test kit (driven by a [`ManualClock`]),
//! and the `Local` failure policy (driven by the system clock).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_throttle_core::limiter::{Limiter, Stored, Write};
use redis_throttle_core::time::{NANOS_PER_MILLI, Unit};
use redis_throttle_core::{Charge, Effect, Instant};

use crate::decision::Numbers;

/// A source of "now", in nanoseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Instant;
}

/// The system's real-time clock, as a server without a cached command time reads it.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        let ns =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        Instant::from_nanos(ns)
    }
}

/// A clock that moves only when told to, for tests. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock at `unix_ms` milliseconds since the Unix epoch.
    pub fn at_unix_ms(unix_ms: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(unix_ms.saturating_mul(NANOS_PER_MILLI))))
    }
    /// Moves the clock on by `d`.
    pub fn advance(&self, d: Duration) {
        let ns = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        self.0.fetch_add(ns, Ordering::SeqCst);
    }
    /// Sets the clock to `unix_ms`.
    pub fn set_unix_ms(&self, unix_ms: i64) {
        self.0.store(unix_ms.saturating_mul(NANOS_PER_MILLI), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.0.load(Ordering::SeqCst))
    }
}

struct Entry {
    value: Vec<u8>,
    /// Absolute expiry in Unix milliseconds.
    expires_ms: Option<i64>,
}

/// Keys and their values, as a server holds them, bounded by entries.
pub(crate) struct Store {
    keys: HashMap<Vec<u8>, Entry>,
    capacity: usize,
}

impl Store {
    pub(crate) fn new(capacity: usize) -> Store {
        Store { keys: HashMap::new(), capacity: capacity.max(1) }
    }

    fn live(&self, key: &[u8], now: Instant) -> Option<&Entry> {
        let now_ms = now.as_nanos().div_euclid(NANOS_PER_MILLI);
        // A key is gone once the server's clock passes its expiry millisecond.
        self.keys.get(key).filter(|e| e.expires_ms.is_none_or(|at| now_ms <= at))
    }

    /// Decides every limiter against its key at `now`, as CL.ALL does when `all` (all or
    /// nothing), else as the single command does (one call), applies the effects, and returns
    /// each one's numbers and the binding index.
    #[cfg(test)]
    pub(crate) fn decide(
        &mut self,
        calls: &[(&Limiter, &[u8], i64)],
        now: Instant,
        all: bool,
    ) -> Result<(Vec<Numbers>, usize), redis_throttle_core::Error> {
        self.decide_charged(calls, &[], now, all, Charge::Take)
    }

    /// [`Store::decide`], each refund bounded by its `held` (`HELD t`), as the module bounds it.
    pub(crate) fn decide_held(
        &mut self,
        calls: &[(&Limiter, &[u8], i64)],
        held: &[Option<Instant>],
        now: Instant,
        all: bool,
    ) -> Result<(Vec<Numbers>, usize), redis_throttle_core::Error> {
        self.decide_charged(calls, held, now, all, Charge::Take)
    }

    /// [`Store::decide_held`], the units charged as `charge` says (`DEBIT`: counted whatever
    /// the limit says), with core's own decision, as the module makes it.
    pub(crate) fn decide_charged(
        &mut self,
        calls: &[(&Limiter, &[u8], i64)],
        held: &[Option<Instant>],
        now: Instant,
        all: bool,
        charge: Charge,
    ) -> Result<(Vec<Numbers>, usize), redis_throttle_core::Error> {
        let outcome = {
            let stored: Vec<Option<Stored<'_>>> = calls
                .iter()
                .map(|(_, key, _)| self.live(key, now).map(|e| Stored { value: &e.value, expires_at_ms: e.expires_ms }))
                .collect();
            match (all, calls, stored.as_slice()) {
                // The single command keeps the effect of a denial (a GCRA TAT clamped after its
                // parameters changed); CL.ALL writes nothing when any limiter denies.
                (false, [(limiter, _, quantity)], [stored]) => redis_throttle_core::all::Outcome {
                    decisions: vec![limiter.decide_charge(
                        *stored,
                        now,
                        *quantity,
                        held.first().copied().flatten(),
                        charge,
                    )?],
                    binding: 0,
                },
                _ => {
                    let limiters: Vec<(Limiter, i64)> = calls.iter().map(|(l, _, q)| (**l, *q)).collect();
                    // Replies are in milliseconds (the client's calls use MS): ties are judged as replied.
                    redis_throttle_core::all::decide_charge(&limiters, held, &stored, now, Unit::Millis, charge)?
                }
            }
        };
        let numbers = outcome.decisions.iter().map(|d| Numbers::from_core(&d.reply)).collect();
        for ((_, key, _), decision) in calls.iter().zip(outcome.decisions) {
            match decision.effect {
                Effect::Nothing => {}
                Effect::Delete => {
                    self.keys.remove(*key);
                }
                Effect::Store { state, expires_at } => {
                    let expires_ms = Some(expires_at.ceil_millis());
                    let value = match state {
                        Write::Integer(v) => v.to_string().into_bytes(),
                        // CL.PACE's form: the tag byte, then the integer.
                        Write::Tagged(tag, v) => [&[tag][..], v.to_string().as_bytes()].concat(),
                        Write::Patch(patch) => {
                            let mut value = self.live(key, now).map(|e| e.value.clone()).unwrap_or_default();
                            patch.apply(&mut value);
                            value
                        }
                    };
                    self.make_room(now);
                    self.keys.insert(key.to_vec(), Entry { value, expires_ms });
                }
            }
        }
        Ok((numbers, outcome.binding))
    }

    /// Before an insert at the bound: forget expired keys, and if that is not enough, a tenth
    /// of the rest (a local limiter forgetting a key admits as if it were full again).
    fn make_room(&mut self, now: Instant) {
        if self.keys.len() < self.capacity {
            return;
        }
        let now_ms = now.as_nanos().div_euclid(NANOS_PER_MILLI);
        self.keys.retain(|_, e| e.expires_ms.is_none_or(|at| now_ms <= at));
        if self.keys.len() >= self.capacity {
            let drop: Vec<Vec<u8>> = self.keys.keys().take(self.capacity / 10 + 1).cloned().collect();
            for k in drop {
                self.keys.remove(&k);
            }
        }
    }

    /// The stored bytes of a key (for tests comparing with a server).
    pub(crate) fn get(&self, key: &[u8], now: Instant) -> Option<(Vec<u8>, Option<i64>)> {
        self.live(key, now).map(|e| (e.value.clone(), e.expires_ms))
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
}
