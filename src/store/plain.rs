//! The keys this process has written as plain strings.
//!
//! `RedisModule_StringDMA`, the only way the module API reads a string in place, first
//! converts a value Redis keeps compactly (an integer, or a short string stored with its object)
//! into a plain string, even to read it: a denial or a peek would change how someone else's
//! value is stored. Reading through a nested `GET` leaves it as it is, but costs about a third
//! of a call. So the module remembers, in fixed memory, the keys whose value it wrote itself
//! (always a plain string) and reads those in place; any other short value is read through
//! `GET` once, and from its first write on it is one of these.
//!
//! A direct-mapped table of key fingerprints, each tagged with the length the module wrote: a
//! key pushed out by another is read through `GET` again, once. It is emptied when the dataset
//! is reloaded (an RDB or AOF load, a full sync, `DEBUG RELOAD`: values come back compact) or
//! flushed, and a key's entry is dropped when the key expires or is evicted, so a name another
//! application reuses later is read through `GET`. Another client's write over a value the
//! module wrote (`SET`, `INCR`, `RESTORE`, or after a `DEL`) is caught when it changed the
//! length; one of the same length is converted by the next call, as the module did before
//! this table existed (the value itself is never changed).

use std::sync::atomic::{AtomicU64, Ordering};

/// 2^16 fingerprints: 512 KiB, whatever the number of keys.
const SLOTS: usize = 1 << 16;

// Commands run on the server's main thread; relaxed atomics make the table `Sync` at no cost.
static SEEN: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// The fingerprint of key `name` in database `db`: never 0 (an empty slot).
pub fn fingerprint(db: i32, name: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (db as u64).wrapping_add(name.len() as u64).wrapping_mul(K);
    let mut chunks = name.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h.rotate_left(5) ^ u64::from_le_bytes(tail)).wrapping_mul(K);
    (h ^ (h >> 29)) | 1
}

fn slot(fingerprint: u64) -> &'static AtomicU64 {
    &SEEN[(fingerprint >> 40) as usize % SLOTS]
}

// An entry: the fingerprint's upper bits, bit 8 set (never 0, an empty slot), the length in
// the low byte (lengths above 255 are never read through this table: see `COMPACT_UP_TO`).
fn entry(fingerprint: u64, len: usize) -> u64 {
    (fingerprint & !0x1ff) | 0x100 | len.min(0xff) as u64
}

/// Whether the key of `fingerprint` holds a value of `len` bytes this process wrote.
pub fn contains(fingerprint: u64, len: usize) -> bool {
    slot(fingerprint).load(Ordering::Relaxed) == entry(fingerprint, len)
}

/// The key of `fingerprint` now holds a plain string of `len` bytes this process wrote.
pub fn insert(fingerprint: u64, len: usize) {
    slot(fingerprint).store(entry(fingerprint, len), Ordering::Relaxed);
}

/// The key of `fingerprint` is gone (expired or evicted).
pub fn forget(fingerprint: u64) {
    let slot = slot(fingerprint);
    if slot.load(Ordering::Relaxed) & !0x1ff == fingerprint & !0x1ff {
        slot.store(0, Ordering::Relaxed);
    }
}

/// Forgets every key (the dataset was reloaded or flushed).
pub fn clear() {
    for slot in &SEEN {
        slot.store(0, Ordering::Relaxed);
    }
}
