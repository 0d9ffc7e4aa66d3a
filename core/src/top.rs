//! CL.TOP: the keys denied most since the last reset, counted by a Space-Saving sketch
//! (Metwally, Agrawal and El Abbadi, 2005) in fixed memory, whatever the number of keys.
//!
//! The sketch holds at most [`SLOTS`] keys, each with a count and an error. A denial of a key
//! it holds adds one to that key's count; a denial of a key it does not hold takes a free slot
//! (count 1, error 0) or, when every slot is taken, replaces the key with the smallest count
//! `m`: the newcomer inherits `count = m + 1` and `error = m`. So, after `N` recorded denials:
//!
//! - the counts sum to exactly `N`, so the smallest one is at most `N / SLOTS`;
//! - a key's reported count is never below its true count, and exceeds it by at most its
//!   error, which is at most the smallest count when it entered: `true ≤ count ≤ true + N / SLOTS`;
//! - every key denied more than `N / SLOTS` times is in the sketch.
//!
//! A slot keeps the first [`KEY_BYTES`] bytes of a key: longer keys are counted (and
//! reported) by that prefix. Recording copies a key only when it enters the sketch, and never
//! allocates: every array is part of the sketch.

use crate::command::{Arg, ArgKind, Command, Keys, Tail};
use crate::error::{Error, Range, Result};

/// The keys the sketch tracks at once.
pub const SLOTS: usize = 1024;
/// The bytes of a key a slot keeps.
pub const KEY_BYTES: usize = 128;
/// Keys CL.TOP lists when no count is given.
pub const DEFAULT_COUNT: usize = 10;

/// The open-addressing index from a key's hash to its slot: twice the slots, so probes stay short.
const TABLE: usize = 2 * SLOTS;
const MASK: usize = TABLE - 1;

pub static COMMAND: Command = Command {
    name: "cl.top",
    summary: "Lists the keys denied most on this node since the last reset, with their denial counts; RESET starts a new count.",
    complexity: "O(1): the sketch holds at most 1024 keys",
    since: "1.1.0",
    // It reads and resets the module's own memory, never the keyspace: allowed on replicas,
    // while loading and with a stale master link; an operator's command (`@admin`), since
    // the keys it lists may name users.
    flags: "readonly admin allow-loading allow-stale",
    acl_categories: "admin slow dangerous",
    keys: Keys::None,
    args: &[
        Arg { name: "count", kind: ArgKind::Quantity, optional: true, multiple: false },
        Arg::flag("reset", "RESET"),
    ],
};

/// A parsed `CL.TOP [count] [RESET]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The most keys to list.
    pub count: usize,
    /// Clear the sketch after reading it.
    pub reset: bool,
}

impl Request {
    pub fn parse(args: &[&[u8]]) -> Result<Request> {
        if COMMAND.max_words().is_some_and(|max| args.len() > max) {
            return Err(Error::WrongArity(COMMAND.name));
        }
        let tail = Tail::parse(args, COMMAND.args.iter())?;
        let count = match tail.quantity {
            None => DEFAULT_COUNT,
            Some(n) => usize::try_from(n)
                .ok()
                .filter(|n| (1..=SLOTS).contains(n))
                .ok_or(Error::OutOfRange { name: "count", range: Range::Integer { min: 1, max: SLOTS as i64 } })?,
        };
        Ok(Request { count, reset: tail.has("RESET") })
    }
}

/// One key as CL.TOP reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The key (its first [`KEY_BYTES`] bytes).
    pub key: &'a [u8],
    /// Denials counted: at least the true number, at most `error` more.
    pub count: u64,
    /// How much `count` may overestimate.
    pub error: u64,
}

/// The Space-Saving sketch. Slots `0..used` are taken; `heap` orders them by count (the
/// smallest first) and `table` finds a key's slot by its hash.
pub struct Sketch {
    keys: [[u8; KEY_BYTES]; SLOTS],
    lens: [u8; SLOTS],
    counts: [u64; SLOTS],
    errors: [u64; SLOTS],
    hashes: [u64; SLOTS],
    /// A binary min-heap of slots by count.
    heap: [u16; SLOTS],
    /// Each slot's position in `heap`.
    pos: [u16; SLOTS],
    /// `slot + 1` at the key's probe position, 0 where empty.
    table: [u16; TABLE],
    used: usize,
    total: u64,
    seed: u64,
}

// The slot numbers fit the index types.
const _: () = assert!(SLOTS <= u16::MAX as usize && KEY_BYTES <= u8::MAX as usize && TABLE.is_power_of_two());

impl Default for Sketch {
    fn default() -> Self {
        Sketch::new()
    }
}

impl Sketch {
    pub const fn new() -> Sketch {
        Sketch {
            keys: [[0; KEY_BYTES]; SLOTS],
            lens: [0; SLOTS],
            counts: [0; SLOTS],
            errors: [0; SLOTS],
            hashes: [0; SLOTS],
            heap: [0; SLOTS],
            pos: [0; SLOTS],
            table: [0; TABLE],
            used: 0,
            total: 0,
            seed: 0x243F_6A88_85A3_08D3,
        }
    }

    /// Sets the hash seed (before the first record), so that which keys collide cannot be
    /// planned from outside.
    pub fn seed(&mut self, seed: u64) {
        if self.used == 0 {
            self.seed = seed | 1;
        }
    }

    /// Denials recorded since the last reset (`N`).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Keys tracked now.
    pub fn tracked(&self) -> usize {
        self.used
    }

    /// The most any reported count overestimates: the smallest count once every slot is
    /// taken (at most `total / SLOTS`), 0 before.
    pub fn error_bound(&self) -> u64 {
        if self.used < SLOTS { 0 } else { self.counts[usize::from(self.heap[0])] }
    }

    /// Forgets every key.
    pub fn reset(&mut self) {
        self.table = [0; TABLE];
        self.used = 0;
        self.total = 0;
    }

    /// Counts one denial of `key`.
    pub fn record(&mut self, key: &[u8]) {
        let key = &key[..key.len().min(KEY_BYTES)];
        let hash = self.hash(key);
        self.total = self.total.saturating_add(1);
        if let Some(slot) = self.find(key, hash) {
            self.counts[slot] = self.counts[slot].saturating_add(1);
            self.sift_down(usize::from(self.pos[slot]));
            return;
        }
        let slot = if self.used < SLOTS {
            let slot = self.used;
            self.used += 1;
            self.counts[slot] = 0;
            self.errors[slot] = 0;
            self.heap[slot] = slot as u16;
            self.pos[slot] = slot as u16;
            slot
        } else {
            // The key with the smallest count makes room; the newcomer may have been denied
            // up to that many times while it was not tracked.
            let slot = usize::from(self.heap[0]);
            self.unindex(slot);
            self.errors[slot] = self.counts[slot];
            slot
        };
        self.keys[slot][..key.len()].copy_from_slice(key);
        self.lens[slot] = key.len() as u8;
        self.hashes[slot] = hash;
        self.counts[slot] = self.counts[slot].saturating_add(1);
        self.index(slot);
        let at = usize::from(self.pos[slot]);
        self.sift_up(at);
        self.sift_down(usize::from(self.pos[slot]));
    }

    /// The `n` keys with the highest counts, highest first (ties by key).
    pub fn top(&self, n: usize) -> Vec<Entry<'_>> {
        let mut slots: Vec<usize> = (0..self.used).collect();
        slots.sort_unstable_by(|&a, &b| self.counts[b].cmp(&self.counts[a]).then_with(|| self.key(a).cmp(self.key(b))));
        slots
            .into_iter()
            .take(n)
            .map(|s| Entry { key: self.key(s), count: self.counts[s], error: self.errors[s] })
            .collect()
    }

    fn key(&self, slot: usize) -> &[u8] {
        &self.keys[slot][..usize::from(self.lens[slot])]
    }

    /// A seeded multiply-rotate hash over 8-byte words: cheap on short keys. A poor spread
    /// only lengthens probes, which the table's size bounds.
    fn hash(&self, key: &[u8]) -> u64 {
        let mut h = self.seed ^ (key.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for chunk in key.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(word)).wrapping_mul(0xFF51_AFD7_ED55_8CCD).rotate_left(31);
        }
        h ^ (h >> 29)
    }

    /// The slot holding `key`, if any.
    fn find(&self, key: &[u8], hash: u64) -> Option<usize> {
        let mut i = hash as usize & MASK;
        loop {
            let slot = usize::from(self.table[i]).checked_sub(1)?;
            if self.hashes[slot] == hash && self.key(slot) == key {
                return Some(slot);
            }
            i = (i + 1) & MASK;
        }
    }

    fn index(&mut self, slot: usize) {
        let mut i = self.hashes[slot] as usize & MASK;
        while self.table[i] != 0 {
            i = (i + 1) & MASK;
        }
        self.table[i] = slot as u16 + 1;
    }

    /// Removes `slot` from the index, shifting later entries of its probe run back so that
    /// every remaining key stays reachable from its home position.
    fn unindex(&mut self, slot: usize) {
        let mut i = self.hashes[slot] as usize & MASK;
        while usize::from(self.table[i]) != slot + 1 {
            i = (i + 1) & MASK;
        }
        let mut hole = i;
        self.table[hole] = 0;
        let mut j = hole;
        loop {
            j = (j + 1) & MASK;
            let Some(other) = usize::from(self.table[j]).checked_sub(1) else { return };
            let home = self.hashes[other] as usize & MASK;
            // The entry at `j` may move into the hole unless its home lies cyclically in (hole, j].
            if (j.wrapping_sub(home) & MASK) >= (j.wrapping_sub(hole) & MASK) {
                self.table[hole] = self.table[j];
                self.table[j] = 0;
                hole = j;
            }
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[usize::from(self.heap[a])] = a as u16;
        self.pos[usize::from(self.heap[b])] = b as u16;
    }

    fn count_at(&self, i: usize) -> u64 {
        self.counts[usize::from(self.heap[i])]
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.count_at(parent) <= self.count_at(i) {
                break;
            }
            self.swap(parent, i);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (left, right) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if left < self.used && self.count_at(left) < self.count_at(least) {
                least = left;
            }
            if right < self.used && self.count_at(right) < self.count_at(least) {
                least = right;
            }
            if least == i {
                return;
            }
            self.swap(i, least);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests;
