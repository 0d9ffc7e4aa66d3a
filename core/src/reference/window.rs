//! CL.WINDOW as plain data: the exact log as a list of instants, `PRECISION` as a map from
//! bucket number to count. A call of the other mode than the stored state converts it first,
//! as the module's documentation states (`crate::window`), and keeps the conversion only if
//! it writes. The key expires as Redis expires it: a write sets its expiry to the instant its
//! newest unit leaves (rounded up to a whole millisecond), and the key is gone once the
//! clock's millisecond is past that (a state regrouped by a call that does not write may
//! have counted longer: what the key held is what counts).

use std::collections::BTreeMap;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum State {
    #[default]
    Empty,
    /// Logged instants, ascending (those that left the window may linger at the front).
    Log(Vec<i128>),
    /// Counts per bucket `⌊t / p⌋`; the ring holds buckets `newest − slots < k ≤ newest`.
    Buckets { p: i128, slots: i128, newest: i128, counts: BTreeMap<i128, i128> },
}

#[derive(Debug, Default, Clone)]
pub struct Model {
    pub state: State,
    /// The key's expiry, in nanoseconds as written (Redis keeps its whole millisecond).
    pub expires_at: Option<i128>,
}

/// A call's parameters and instant.
#[derive(Clone, Copy)]
struct Call {
    now: i128,
    limit: i128,
    window: i128,
}

impl Call {
    fn reply(&self, limited: bool, used: i128, leaves: Option<i128>, retry_at: Option<i128>) -> [i128; 5] {
        let reset = if used > 0 { leaves.map_or(0, |at| (at - self.now).max(0)) } else { 0 };
        [
            limited as i128,
            self.limit,
            (self.limit - used).clamp(0, self.limit),
            retry_at.map_or(-1, |at| at - self.now),
            reset,
        ]
    }
}

impl Model {
    /// A call: a take, or a `debit` (counted whatever the limit says).
    pub fn call(
        &mut self,
        now: i128,
        limit: i128,
        window: i128,
        precision: Option<i128>,
        q: i128,
        debit: bool,
    ) -> [i128; 5] {
        if self.expires_at.is_some_and(|at| now.div_euclid(1_000_000) > super::ceil_ms(at)) {
            *self = Model::default();
        }
        let call = Call { now, limit, window };
        let (reply, write) = match precision {
            None => exact(&self.state, call, q, debit),
            Some(p) => buckets(&self.state, call, p, q, debit),
        };
        match write {
            None => {}
            Some(None) => *self = Model::default(),
            Some(Some((state, expires_at))) => *self = Model { state, expires_at: Some(expires_at) },
        }
        reply
    }

    /// The actions the exact log holds (for a test of its layout).
    pub fn log(&self) -> &[i128] {
        match &self.state {
            State::Log(log) => log,
            _ => &[],
        }
    }
}

/// The reply, and the write: `None` nothing, `Some(None)` the key goes, `Some(Some(..))` the
/// state stored and when it expires.
type Outcome = ([i128; 5], Option<Option<(State, i128)>>);

fn exact(state: &State, c: Call, q: i128, debit: bool) -> Outcome {
    if let (State::Buckets { p, .. }, true) = (state, q < 0) {
        // A refund on buckets is decided on them, in their own precision (or its smallest
        // multiple spanning the window in at most 100,000 buckets), and they stay buckets: a
        // log would keep only the newest `limit + 1` units to give back from.
        let most = 100_000;
        let spanned = (c.window + p - 1) / p;
        let need = (c.window + most - 1) / most;
        let p = if spanned <= most { *p } else { p * ((need + p - 1) / p) };
        return buckets(state, c, p, q, false);
    }
    let log: Vec<i128> = match state {
        State::Empty => Vec::new(),
        State::Log(log) => log.clone(),
        State::Buckets { p, counts, .. } => {
            // Each bucket still counting becomes its units at its last instant (or now).
            let mut log = Vec::new();
            for (&k, &n) in counts {
                let at = ((k + 1) * p - 1).min(c.now);
                if (k + 1) * p > c.now - c.window && at > c.now - c.window {
                    // Only the newest `limit + 1` are kept (below), and a bucket's units share
                    // one instant: more than `limit + 1` of them (a debit's) change nothing.
                    log.extend(std::iter::repeat_n(at, n.min(c.limit + 1) as usize));
                }
            }
            // Only the newest `limit + 1` (the older would leave first; until they have, the
            // log is over its limit, as the ring was).
            let excess = log.len().saturating_sub(c.limit as usize + 1);
            log.drain(..excess);
            log
        }
    };
    let leaves = |t: i128| t + c.window;
    let counted: Vec<i128> = log.iter().copied().filter(|&t| leaves(t) > c.now).collect();
    let used = counted.len() as i128;
    let newest = counted.last().map(|&t| leaves(t));
    if q < 0 {
        // The oldest units still counting go first.
        let taken = (-q).min(used);
        if used == 0 {
            return (c.reply(false, 0, None, None), None);
        }
        if taken == used {
            return (c.reply(false, 0, None, None), Some(None));
        }
        let kept = counted[taken as usize..].to_vec();
        return (c.reply(false, used - taken, newest, None), newest.map(|at| (State::Log(kept), at)).map(Some));
    }
    if debit && q > 0 {
        // Logged whatever the limit says; overdrawn, a take of `q` waits for the oldest
        // `used + 2q − limit` actions of the log after the debit.
        let stamp = log.last().map_or(c.now, |&t| t.max(c.now));
        let mut log = counted;
        log.extend(std::iter::repeat_n(stamp, q as usize));
        let fitted = used + q <= c.limit;
        let retry_at = (!fitted && q <= c.limit).then(|| leaves(log[(used + 2 * q - c.limit - 1) as usize]));
        let reply = c.reply(!fitted, used + q, Some(leaves(stamp)), retry_at);
        return (reply, Some(Some((State::Log(log), leaves(stamp)))));
    }
    if q > c.limit {
        return (c.reply(true, used, newest, None), None);
    }
    if used + q > c.limit {
        let retry_at = leaves(counted[(used + q - c.limit - 1) as usize]);
        return (c.reply(true, used, newest, Some(retry_at)), None);
    }
    if q == 0 {
        return (c.reply(false, used, newest, None), None);
    }
    let stamp = log.last().map_or(c.now, |&t| t.max(c.now));
    let mut log = counted;
    log.extend(std::iter::repeat_n(stamp, q as usize));
    (c.reply(false, used + q, Some(leaves(stamp)), None), Some(Some((State::Log(log), leaves(stamp)))))
}

fn buckets(state: &State, c: Call, p: i128, q: i128, debit: bool) -> Outcome {
    let spanned = (c.window + p - 1) / p;
    let slots = spanned + 1;
    let current = c.now.div_euclid(p);
    let oldest = (c.now - c.window).div_euclid(p);
    let cap = current + spanned;
    let (newest, mut counts) = match state {
        State::Empty => (current, BTreeMap::new()),
        State::Log(log) => {
            // Each action still counting goes to its own bucket.
            let mut counts = BTreeMap::new();
            for &t in log.iter().filter(|&&t| t > c.now - c.window) {
                *counts.entry(t.min(c.now).div_euclid(p)).or_insert(0) += 1;
            }
            (current, counts)
        }
        State::Buckets { p: p0, slots: s0, newest, counts } if *p0 == p && *s0 == slots && *newest <= cap => {
            (*newest, counts.clone())
        }
        State::Buckets { p: p0, counts: old, .. } => {
            // Each bucket moves to the one holding its last instant (never beyond `cap`), and
            // what would fall off the new ring's back to its oldest slot.
            let moved: Vec<(i128, i128)> = old
                .iter()
                .filter(|&(_, &n)| n > 0)
                .map(|(&k, &n)| ((((k + 1) * p0 - 1).div_euclid(p)).min(cap), n))
                .filter(|&(k, _)| k >= oldest)
                .collect();
            let newest = moved.iter().map(|&(k, _)| k).fold(current, i128::max);
            let mut counts = BTreeMap::new();
            for (k, n) in moved {
                *counts.entry(k.max(newest - slots + 1)).or_insert(0) += n;
            }
            (newest, counts)
        }
    };
    let leaves = |k: i128| (k + 1) * p + c.window;
    let counted: Vec<(i128, i128)> = counts.range(oldest..).map(|(&k, &n)| (k, n)).filter(|&(_, n)| n > 0).collect();
    let used: i128 = counted.iter().map(|&(_, n)| n).sum();
    let full_at = counted.last().map(|&(k, _)| leaves(k));
    let store = |newest: i128, counts: BTreeMap<i128, i128>, expires_at: i128| {
        let counts = counts.into_iter().filter(|&(k, _)| k > newest - slots).collect();
        Some(Some((State::Buckets { p, slots, newest, counts }, expires_at)))
    };
    if q < 0 {
        if used == 0 {
            return (c.reply(false, 0, None, None), None);
        }
        let taken = (-q).min(used);
        if taken == used {
            return (c.reply(false, 0, None, None), Some(None));
        }
        // From the oldest bucket still counting on.
        let mut left = taken;
        for (k, n) in counted {
            let t = n.min(left);
            *counts.entry(k).or_insert(0) -= t;
            left -= t;
        }
        let full_at = full_at.expect("units counting");
        return (c.reply(false, used - taken, Some(full_at), None), store(newest, counts, full_at));
    }
    if debit && q > 0 {
        // Counted in the current (or newest) bucket whatever the limit says; overdrawn, a
        // take of `q` waits for the bucket whose leaving frees `used + 2q − limit` units.
        let top = current.max(newest);
        *counts.entry(top).or_insert(0) += q;
        let fitted = used + q <= c.limit;
        let retry_at = (!fitted && q <= c.limit).then(|| {
            let need = used + 2 * q - c.limit;
            let mut freed = 0;
            let after = counts.range(oldest..).map(|(&k, &n)| (k, n));
            let freeing = after.filter(|&(_, n)| n > 0).find(|&(_, n)| {
                freed += n;
                freed >= need
            });
            leaves(freeing.expect("the debit's own units free enough").0)
        });
        return (c.reply(!fitted, used + q, Some(leaves(top)), retry_at), store(top, counts, leaves(top)));
    }
    if q > c.limit {
        return (c.reply(true, used, full_at, None), None);
    }
    if used + q > c.limit {
        let need = used + q - c.limit;
        let mut freed = 0;
        let freeing = counted.iter().find(|&&(_, n)| {
            freed += n;
            freed >= need
        });
        let retry_at = freeing.map(|&(k, _)| leaves(k));
        return (c.reply(true, used, full_at, retry_at), None);
    }
    if q == 0 {
        return (c.reply(false, used, full_at, None), None);
    }
    let top = current.max(newest);
    *counts.entry(top).or_insert(0) += q;
    (c.reply(false, used + q, Some(leaves(top)), None), store(top, counts, leaves(top)))
}

#[cfg(test)]
mod tests {
    use super::Model;

    /// A PRECISION bucket holding a debit far above the limit, read by a call without
    /// PRECISION: the model converts it as the module does (the newest `limit + 1` units), without
    /// building a log of every unit (a fuzzing seed once asked it for 2^60 entries).
    #[test]
    fn a_debited_bucket_converts_to_one_past_the_limit() {
        const S: i128 = 1_000_000_000;
        let now = 1_700_000_000 * S;
        let mut model = Model::default();
        let debited = model.call(now, 10, 60 * S, Some(S), 1 << 60, true);
        assert_eq!(debited[0], 1, "the debit overdrew");
        let reply = model.call(now + S, 10, 60 * S, None, 1, false);
        assert_eq!(&reply[..3], &[1, 10, 0], "a take after it is refused");
        let reply = model.call(now + S, 10, 60 * S, None, 0, false);
        assert_eq!(&reply[..3], &[1, 10, 0], "and so is a check: the log is over its limit");
    }
}
