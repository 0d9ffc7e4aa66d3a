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
//! A direct-mapped table of key fingerprints (a keyed hash: see [`fingerprint`]), each tagged
//! with the length the module wrote: a key pushed out by another is read through `GET` again,
//! once. It is emptied when the dataset is reloaded (an RDB or AOF load, a full sync, `DEBUG
//! RELOAD`: values come back compact), flushed or swapped (`SWAPDB`); a key's entry is dropped
//! when the key expires, is evicted or is deleted by the module (a refund to full), so a value
//! put under that name later is read through `GET`. What it does not see (it would cost every
//! call a keyspace-event callback: measured, +4,000 instructions a call) is another client
//! replacing the value: a write over it (`SET`, `INCR`, `RESTORE`, `RENAME`/`COPY` onto it),
//! or a removal (`DEL`, `UNLINK`, `GETDEL`, `RENAME`/`MOVE` away, `MIGRATE`) and a new value.
//! Such a value of another length is caught; one of the very length the module wrote is
//! converted by the next call (the value itself never changes). The docs list these cases.

use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// 2^16 fingerprints: 512 KiB, whatever the number of keys.
const SLOTS: usize = 1 << 16;

// Commands run on the server's main thread; relaxed atomics make the table `Sync` at no cost.
static SEEN: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// The per-process key of [`fingerprint`]'s hash: two words from the standard library's
/// randomly keyed hasher (seeded from the operating system's randomness), drawn once.
static KEY: OnceLock<(u64, u64)> = OnceLock::new();

fn key() -> (u64, u64) {
    *KEY.get_or_init(|| {
        let random = RandomState::new();
        (random.hash_one(0u8), random.hash_one(1u8))
    })
}

/// The fingerprint of key `name` in database `db`: never 0 (an empty slot). A keyed hash,
/// SipHash-1-3 with a random key drawn once per process, so which key names collide cannot
/// be worked out from outside the process. (Written out rather than through `Hasher`, whose
/// buffering costs twice as much on this path, taken by every call.)
#[inline]
pub fn fingerprint(db: i32, name: &[u8]) -> u64 {
    let (k0, k1) = key();
    // The database is part of the key: each database hashes names with a key of its own.
    sip13((k0, k1 ^ u64::from(db as u32)), name) | 1
}

/// SipHash-1-3 (one compression round per word, three finalization rounds) of `bytes`.
#[inline(always)]
fn sip13((k0, k1): (u64, u64), bytes: &[u8]) -> u64 {
    let (mut v0, mut v1, mut v2, mut v3) = (
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    );
    macro_rules! round {
        () => {
            v0 = v0.wrapping_add(v1);
            v1 = v1.rotate_left(13) ^ v0;
            v0 = v0.rotate_left(32);
            v2 = v2.wrapping_add(v3);
            v3 = v3.rotate_left(16) ^ v2;
            v0 = v0.wrapping_add(v3);
            v3 = v3.rotate_left(21) ^ v0;
            v2 = v2.wrapping_add(v1);
            v1 = v1.rotate_left(17) ^ v2;
            v2 = v2.rotate_left(32);
        };
    }
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let m = u64::from_le_bytes(w);
        v3 ^= m;
        round!();
        v0 ^= m;
    }
    // The last 0 to 7 bytes, and the length in the top byte, as SipHash pads.
    let mut m = (bytes.len() as u64) << 56;
    for (i, &b) in words.remainder().iter().enumerate() {
        m |= u64::from(b) << (8 * i);
    }
    v3 ^= m;
    round!();
    v0 ^= m;
    v2 ^= 0xff;
    round!();
    round!();
    round!();
    v0 ^ v1 ^ v2 ^ v3
}

fn slot(fingerprint: u64) -> &'static AtomicU64 {
    &SEEN[(fingerprint >> 40) as usize % SLOTS]
}

// An entry: the fingerprint's upper bits, bit 8 set (never 0, an empty slot), the length in
// the low byte (lengths above 255 are never read through this table: see `COMPACT_UP_TO`).
fn entry(fingerprint: u64, len: usize) -> u64 {
    (fingerprint & !0x1ff) | 0x100 | len.min(0xff) as u64
}

/// Starts fetching the slot of `fingerprint` into the cache ([`contains`] reads it soon).
#[inline(always)]
pub fn prefetch(fingerprint: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        let at: *const AtomicU64 = slot(fingerprint);
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and cannot fault;
        // the address is a slot of `SEEN`, and SSE (which has the instruction) is part of
        // x86_64's baseline.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = fingerprint;
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
