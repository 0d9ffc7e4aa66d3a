//! Per-command counters of `INFO throttle`: what each call of a limiter command was.
//!
//! The counters are exact: every command, and the INFO callback, runs on the server's main
//! thread (module commands called from other threads hold the global lock), so each counter
//! has one writer at a time and a plain load-add-store loses nothing. They are atomics only so
//! that sharing them is sound Rust; `Relaxed` loads and stores compile to plain moves (no
//! locked instruction on the hot path).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What a call of a limiter command was, for its counters. Every call is exactly one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Consumed units (quantity > 0) and was admitted.
    Admitted,
    /// Was denied (a refused take, an overdrawn debit or a refused check), and answered so.
    Denied,
    /// Was denied, but answered as admitted (shadow mode or `SHADOW`).
    ShadowDenied,
    /// Quantity 0 and not refused: a read of the limiter, neither admitted nor denied.
    Peek,
    /// Quantity < 0: units given back.
    Refund,
    /// Answered with an error (nothing written).
    Error,
}

impl Class {
    pub const ALL: [(Class, &'static str); 6] = [
        (Class::Admitted, "admitted"),
        (Class::Denied, "denied"),
        (Class::ShadowDenied, "shadow_denied"),
        (Class::Peek, "peeks"),
        (Class::Refund, "refunds"),
        (Class::Error, "errors"),
    ];

    /// The class of a successful call consuming `quantity` (CL.ALL: the call's) that was
    /// `denied` (a refused check too: see `Reply::denies`), answered in `shadow`.
    pub fn of(quantity: i64, denied: bool, shadow: bool) -> Class {
        match quantity {
            _ if denied && shadow => Class::ShadowDenied,
            _ if denied => Class::Denied,
            0 => Class::Peek,
            q if q < 0 => Class::Refund,
            _ => Class::Admitted,
        }
    }
}

/// One command's counters, by [`Class`] (`calls` is their sum), and its debits: calls with
/// `DEBIT` that charged units (each also counted admitted or denied, by its `limited`).
pub struct Counters {
    classes: [AtomicU64; Class::ALL.len()],
    debits: AtomicU64,
}

impl Counters {
    #[allow(clippy::new_without_default)] // only ever a static
    pub const fn new() -> Counters {
        Counters { classes: [const { AtomicU64::new(0) }; Class::ALL.len()], debits: AtomicU64::new(0) }
    }

    #[inline]
    pub fn count(&self, class: Class) {
        increment(&self.classes[class as usize]);
    }

    /// A call with `DEBIT` that charged units.
    #[inline]
    pub fn count_debit(&self) {
        increment(&self.debits);
    }

    pub fn get(&self, class: Class) -> u64 {
        self.classes[class as usize].load(Relaxed)
    }

    pub fn debits(&self) -> u64 {
        self.debits.load(Relaxed)
    }
}

#[inline]
fn increment(counter: &AtomicU64) {
    // One writer (see the module comment): not a read-modify-write instruction.
    counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
}
