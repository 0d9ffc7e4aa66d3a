//! `LOCAL_CACHE_SIZE_IN_BYTES`: upstream's local cache of keys known to be over their limit. A
//! key Redis reported over is answered `OVER_LIMIT` here, without a round trip, until its window
//! ends (fixed windows, any number of hits: past the limit every hit is over) or its
//! `retry_after` runs out (our algorithms, for at least the hits that were refused). Bounded by
//! bytes (the keys' and the entries'); the `ratelimit.localcache.*` gauges count as upstream's
//! freecache counts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// What an entry costs besides its key's bytes (the map's slot and bookkeeping).
const ENTRY_OVERHEAD: usize = 64;

struct Entry {
    until: Instant,
    /// The fewest hits the entry answers for (0: any).
    hits: u64,
    /// When it was last stored or found (Unix seconds), for `averageAccessTime`.
    accessed: u64,
}

#[derive(Default)]
struct Map {
    entries: HashMap<Box<[u8]>, Entry>,
    bytes: usize,
    /// The sum of the entries' `accessed`.
    accessed: u64,
}

impl Map {
    fn remove(&mut self, key: &[u8]) -> bool {
        match self.entries.remove_entry(key) {
            Some((k, e)) => {
                self.bytes = self.bytes.saturating_sub(k.len() + ENTRY_OVERHEAD);
                self.accessed = self.accessed.saturating_sub(e.accessed);
                true
            }
            None => false,
        }
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The cache and upstream's counters of it.
pub struct LocalCache {
    map: Mutex<Map>,
    max_bytes: usize,
    pub lookups: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Entries dropped for room before their time.
    pub evacuated: AtomicU64,
    /// Entries found or dropped after their time.
    pub expired: AtomicU64,
    /// Entries replaced by a newer one of the same key.
    pub overwritten: AtomicU64,
}

impl LocalCache {
    pub fn new(max_bytes: usize) -> LocalCache {
        LocalCache {
            map: Mutex::new(Map::default()),
            max_bytes,
            lookups: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evacuated: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            overwritten: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `key` is known to be over its limit for `hits` at `now` (counted as a lookup).
    pub fn over(&self, key: &[u8], hits: u64, now: Instant) -> bool {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        let found = match map.entries.get_mut(key) {
            Some(e) if now >= e.until => {
                map.remove(key);
                self.expired.fetch_add(1, Ordering::Relaxed);
                false
            }
            Some(e) if hits >= e.hits => {
                let (before, after) = (e.accessed, unix_now());
                e.accessed = after;
                map.accessed = map.accessed.saturating_sub(before).saturating_add(after);
                true
            }
            _ => false,
        };
        drop(map);
        if found {
            self.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Remembers that `key` is over its limit (for `hits` or more) until `until`.
    pub fn insert(&self, key: &[u8], hits: u64, until: Instant, now: Instant) {
        let cost = key.len() + ENTRY_OVERHEAD;
        if cost > self.max_bytes || until <= now {
            return;
        }
        let mut map = self.lock();
        if map.remove(key) {
            self.overwritten.fetch_add(1, Ordering::Relaxed);
        }
        if map.bytes + cost > self.max_bytes {
            let before = map.entries.len();
            map.entries.retain(|_, e| e.until > now);
            self.expired.fetch_add((before - map.entries.len()) as u64, Ordering::Relaxed);
            map.bytes = map.entries.keys().map(|k| k.len() + ENTRY_OVERHEAD).sum();
            map.accessed = map.entries.values().map(|e| e.accessed).sum();
        }
        while map.bytes + cost > self.max_bytes {
            let Some(victim) = map.entries.keys().next().cloned() else { break };
            map.remove(&victim);
            self.evacuated.fetch_add(1, Ordering::Relaxed);
        }
        let accessed = unix_now();
        map.entries.insert(key.into(), Entry { until, hits, accessed });
        map.bytes += cost;
        map.accessed = map.accessed.saturating_add(accessed);
    }

    /// freecache's `AverageAccessTime`: the mean of the entries' last access (Unix seconds).
    pub fn average_access_time(&self) -> u64 {
        let map = self.lock();
        map.accessed.checked_div(map.entries.len() as u64).unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn answers_until_its_time_for_enough_hits_and_stays_within_its_bytes() {
        let c = LocalCache::new(512 * 1024);
        let now = Instant::now();
        assert!(!c.over(b"k", 1, now));
        c.insert(b"k", 0, now + Duration::from_secs(1), now);
        c.insert(b"five", 5, now + Duration::from_secs(1), now);
        assert!(c.over(b"k", 0, now) && c.over(b"k", 9, now));
        assert!(!c.over(b"five", 4, now) && c.over(b"five", 5, now));
        let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assert!(c.average_access_time().abs_diff(unix) <= 1, "{}", c.average_access_time());
        assert!(!c.over(b"k", 1, now + Duration::from_secs(1)), "expired");
        assert_eq!(
            (c.lookups.load(Ordering::Relaxed), c.hits.load(Ordering::Relaxed), c.misses.load(Ordering::Relaxed)),
            (6, 3, 3)
        );
        let small = LocalCache::new(10 * (ENTRY_OVERHEAD + 8));
        for i in 0u64..100 {
            small.insert(&i.to_be_bytes(), 0, now + Duration::from_secs(60), now);
        }
        assert_eq!(small.len(), 10);
        assert_eq!(small.evacuated.load(Ordering::Relaxed), 90);
    }
}
