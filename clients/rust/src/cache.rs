//! The local deny cache: a denial is remembered under (policy, key) until its `retry_after`
//! runs out, so a repeat inside it is denied without a round trip.
//!
//! It can never admit what the server would deny: it only ever denies, and only a request of
//! at least the denied quantity, until the denial's own `retry_after` (counted from when the
//! request was *sent*, so it ends no later than the server's). It may deny, until then, a
//! request the server would admit because another process refunded units meanwhile, or because
//! an operator deleted the key (`DEL`): [`DenyCache::clear`] and [`DenyCache::forget`] (the
//! client's `clear_deny_cache` and `forget_denial`) end that at once.
//!
//! Bounded twice, whatever the number of distinct keys or their length: by entries, and by
//! bytes (each entry's cost counts its key's bytes, see [`entry_cost`]).

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

#[derive(Default)]
struct Shard {
    map: HashMap<u64, Denial>,
    /// The sum of the entries' [`entry_cost`]s.
    bytes: usize,
}

impl Shard {
    fn remove(&mut self, hash: u64) {
        if let Some(d) = self.map.remove(&hash) {
            self.bytes = self.bytes.saturating_sub(entry_cost(d.key.len()));
        }
    }

    /// The map's table (slots of a hash and a denial, one control byte each, at most 8/7 of
    /// the entries: what `HashMap` allocates) beyond the entries' own costs.
    fn table_bytes(&self) -> usize {
        self.map.capacity().saturating_mul(8).div_ceil(7).saturating_mul(size_of::<(u64, Denial)>() + 1)
    }
}

/// What one entry costs in memory: its slot in the table and its key's bytes on the heap (with
/// the allocator's rounding to 16 bytes).
pub(crate) fn entry_cost(key_len: usize) -> usize {
    size_of::<(u64, Denial)>() + 1 + key_len.div_ceil(16).saturating_mul(16)
}

pub(crate) struct DenyCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    bytes_per_shard: usize,
    hasher: std::hash::RandomState,
}

impl DenyCache {
    /// A cache of at most `capacity` denials (at least one per shard) and about `bytes` bytes
    /// (keys included; a key longer than a shard's share of `bytes` is never cached).
    pub(crate) fn new(capacity: usize, bytes: usize) -> DenyCache {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        let bytes_per_shard = (bytes / SHARDS).max(1);
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard,
            bytes_per_shard,
            hasher: std::hash::RandomState::new(),
        }
    }

    fn slot(&self, params: &Params, key: &[u8]) -> (u64, &Mutex<Shard>) {
        let mut h = self.hasher.build_hasher();
        params.hash(&mut h);
        key.hash(&mut h);
        let hash = h.finish();
        (hash, &self.shards[(hash as usize) % SHARDS])
    }

    /// The numbers of a remembered denial that covers this request at `now`, if any.
    pub(crate) fn lookup(&self, params: &Params, key: &[u8], quantity: i64, now: Instant) -> Option<Numbers> {
        let (hash, shard) = self.slot(params, key);
        let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        let d = shard.map.get(&hash)?;
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
        let cost = entry_cost(key.len());
        if cost > self.bytes_per_shard {
            return; // a key this long would crowd out the rest: not cached
        }
        let (hash, shard) = self.slot(params, key);
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        shard.remove(hash);
        let full = |s: &Shard| s.map.len() >= self.per_shard || s.bytes + cost > self.bytes_per_shard;
        if full(&shard) {
            let now = Instant::now();
            let expired: Vec<u64> = shard.map.iter().filter(|(_, d)| d.until <= now).map(|(h, _)| *h).collect();
            for h in expired {
                shard.remove(h);
            }
            // Still full of live denials (each only costs a round trip to forget): by entries,
            // forget a tenth of them; by bytes, as many as this one needs.
            if shard.map.len() >= self.per_shard {
                let drop: Vec<u64> = shard.map.keys().take(self.per_shard / 10 + 1).copied().collect();
                for h in drop {
                    shard.remove(h);
                }
            }
            while full(&shard) {
                let Some(&h) = shard.map.keys().next() else { break };
                shard.remove(h);
            }
            // Give back the table of entries swept away (a shard once full of long keys).
            if shard.map.capacity() > 2 * shard.map.len() + 16 {
                shard.map.shrink_to_fit();
            }
        }
        let denial = Denial {
            params: *params,
            key: key.into(),
            quantity,
            until: sent + retry_after,
            limit: numbers.limit,
            reset_at: sent + numbers.reset_after,
        };
        shard.bytes += cost;
        shard.map.insert(hash, denial);
    }

    /// Forgets the denial of (policy, key): after a refund through this client.
    pub(crate) fn forget(&self, params: &Params, key: &[u8]) {
        let (hash, shard) = self.slot(params, key);
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        if shard.map.get(&hash).is_some_and(|d| d.params == *params && *d.key == *key) {
            shard.remove(hash);
        }
    }

    /// Forgets every denial.
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            *shard.lock().unwrap_or_else(|e| e.into_inner()) = Shard::default();
        }
    }

    /// Denials held now (expired ones included until they are swept).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).map.len()).sum()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    /// The bytes the cache holds now: its entries (keys included) and its tables.
    pub(crate) fn bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(|e| e.into_inner());
                s.bytes.saturating_sub(s.map.len() * (size_of::<(u64, Denial)>() + 1)) + s.table_bytes()
            })
            .sum()
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
        Numbers {
            verdict: Verdict::Denied { retry_after: Duration::from_millis(ms) },
            limit: 5,
            remaining: 0,
            reset_after: Duration::from_millis(ms * 2),
        }
    }

    #[test]
    fn a_denial_covers_larger_requests_until_its_retry_after() {
        let cache = DenyCache::new(100, 1 << 20);
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
        let cache = DenyCache::new(1000, usize::MAX);
        let p = Params::Counter { limit: 5, window_ms: 1000 };
        let t = Instant::now();
        for i in 0..100_000u32 {
            cache.insert(&p, &i.to_le_bytes(), 1, t, &denied(60_000));
        }
        assert!(cache.len() <= cache.capacity(), "{} > {}", cache.len(), cache.capacity());
        assert!(cache.capacity() < 1100);
    }

    #[test]
    fn bounded_by_bytes_with_long_keys() {
        let budget = 4 << 20;
        let cache = DenyCache::new(100_000, budget);
        let p = Params::Counter { limit: 5, window_ms: 1000 };
        let t = Instant::now();
        let mut key = vec![b'k'; 32 * 1024];
        for i in 0..2_000u32 {
            key[..4].copy_from_slice(&i.to_le_bytes());
            cache.insert(&p, &key, 1, t, &denied(60_000));
        }
        let per_entry = entry_cost(key.len());
        assert!(cache.len() * per_entry <= budget, "{} entries of {per_entry} bytes", cache.len());
        assert!(cache.len() >= budget / per_entry / 2, "the budget is used: {} entries", cache.len());
        assert!(cache.bytes() <= budget + budget / 8, "{} bytes held, budget {budget}", cache.bytes());
        // Short keys fill it by entries again once the long ones are forgotten.
        cache.clear();
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
        // A key longer than a shard's share is never cached.
        let huge = vec![b'h'; budget];
        cache.insert(&p, &huge, 1, t, &denied(60_000));
        assert!(cache.lookup(&p, &huge, 1, t).is_none());
    }
}
