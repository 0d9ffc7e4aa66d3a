//! The local deny cache: a denial is remembered under (policy, key) until its `retry_after`
//! runs out, so a repeat inside it is denied without a round trip.
//!
//! It can never admit what the server would deny: it only ever denies, and only a request of
//! at least the denied quantity, until the denial's own `retry_after` (counted from when the
//! request was *sent*, so it ends no later than the server's). It may deny, until then, a
//! request the server would admit because another process refunded units meanwhile.
//! Bounded by entries whatever the number of distinct keys.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::decision::{Numbers, Verdict};
use crate::policy::Params;

const SHARDS: usize = 16;

struct Denial {
    params: Params,
    key: Box<[u8]>,
    quantity: i64,
    until: Instant,
    limit: i64,
    /// When the limiter is full again, as the denial said.
    reset_at: Instant,
}

pub(crate) struct DenyCache {
    shards: Vec<Mutex<HashMap<u64, Denial>>>,
    per_shard: usize,
    hasher: std::hash::RandomState,
}

impl DenyCache {
    /// A cache of at most `capacity` denials (at least one per shard).
    pub(crate) fn new(capacity: usize) -> DenyCache {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        DenyCache { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(), per_shard, hasher: std::hash::RandomState::new() }
    }

    fn slot(&self, params: &Params, key: &[u8]) -> (u64, &Mutex<HashMap<u64, Denial>>) {
        let mut h = self.hasher.build_hasher();
        params.hash(&mut h);
        key.hash(&mut h);
        let hash = h.finish();
        (hash, &self.shards[(hash as usize) % SHARDS])
    }

    /// The numbers of a remembered denial that covers this request at `now`, if any.
    pub(crate) fn lookup(&self, params: &Params, key: &[u8], quantity: i64, now: Instant) -> Option<Numbers> {
        let (hash, shard) = self.slot(params, key);
        let map = shard.lock().unwrap_or_else(|e| e.into_inner());
        let d = map.get(&hash)?;
        // A quantity above the limit is never admitted: the server says so (`Verdict::Never`),
        // not a wait.
        if d.params != *params || *d.key != *key || quantity < d.quantity || quantity > d.limit || now >= d.until {
            return None;
        }
        Some(Numbers {
            verdict: Verdict::Denied { retry_after: ceil_millis(d.until - now) },
            limit: d.limit,
            remaining: 0,
            reset_after: ceil_millis(d.reset_at.saturating_duration_since(now)),
        })
    }

    /// Remembers a denial of `quantity` units by a request sent at `sent`.
    pub(crate) fn insert(&self, params: &Params, key: &[u8], quantity: i64, sent: Instant, numbers: &Numbers) {
        let Verdict::Denied { retry_after } = numbers.verdict else { return };
        let (hash, shard) = self.slot(params, key);
        let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.per_shard && !map.contains_key(&hash) {
            let now = Instant::now();
            map.retain(|_, d| d.until > now);
            if map.len() >= self.per_shard {
                // Still full of live denials: forget a tenth of them (each only costs a round trip).
                let drop: Vec<u64> = map.keys().take(self.per_shard / 10 + 1).copied().collect();
                for h in drop {
                    map.remove(&h);
                }
            }
        }
        let denial = Denial { params: *params, key: key.into(), quantity, until: sent + retry_after, limit: numbers.limit, reset_at: sent + numbers.reset_after };
        map.insert(hash, denial);
    }

    /// Forgets the denial of (policy, key): after a refund through this client.
    pub(crate) fn forget(&self, params: &Params, key: &[u8]) {
        let (hash, shard) = self.slot(params, key);
        let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&hash).is_some_and(|d| d.params == *params && *d.key == *key) {
            map.remove(&hash);
        }
    }

    /// Denials held now (expired ones included until they are swept).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len()).sum()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }
}

/// A duration rounded up to the next whole millisecond (as the module's `MS` replies are).
fn ceil_millis(d: Duration) -> Duration {
    let ms = d.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(ms: u64) -> Numbers {
        Numbers { verdict: Verdict::Denied { retry_after: Duration::from_millis(ms) }, limit: 5, remaining: 0, reset_after: Duration::from_millis(ms * 2) }
    }

    #[test]
    fn a_denial_covers_larger_requests_until_its_retry_after() {
        let cache = DenyCache::new(100);
        let p = Params::Counter { limit: 5, window_ms: 1000 };
        let t = Instant::now();
        cache.insert(&p, b"k", 2, t, &denied(100));
        assert!(cache.lookup(&p, b"k", 2, t).is_some());
        assert!(cache.lookup(&p, b"k", 3, t + Duration::from_millis(99)).is_some());
        assert!(cache.lookup(&p, b"k", 1, t).is_none(), "a smaller request may be admitted");
        assert!(cache.lookup(&p, b"k", 6, t).is_none(), "above the limit: never admitted, which the server answers");
        assert!(cache.lookup(&p, b"k", 2, t + Duration::from_millis(100)).is_none());
        assert!(cache.lookup(&p, b"other", 2, t).is_none());
        let raised = Params::Counter { limit: 6, window_ms: 1000 };
        assert!(cache.lookup(&raised, b"k", 2, t).is_none(), "changed parameters are another cache key");
        let n = cache.lookup(&p, b"k", 2, t + Duration::from_micros(40_500)).unwrap();
        assert_eq!(n.verdict, Verdict::Denied { retry_after: Duration::from_millis(60) });
        cache.forget(&p, b"k");
        assert!(cache.lookup(&p, b"k", 2, t).is_none());
    }

    #[test]
    fn bounded_by_entries() {
        let cache = DenyCache::new(1000);
        let p = Params::Counter { limit: 5, window_ms: 1000 };
        let t = Instant::now();
        for i in 0..100_000u32 {
            cache.insert(&p, &i.to_le_bytes(), 1, t, &denied(60_000));
        }
        assert!(cache.len() <= cache.capacity(), "{} > {}", cache.len(), cache.capacity());
        assert!(cache.capacity() < 1100);
    }
}
