//! Bucketed counting (layout version 2, `PRECISION p`): a ring of `m = ⌈window / p⌉ + 1`
//! counts after a 24-byte header holding `p` and the newest bucket written.

use std::borrow::Cow;

use super::{INVALID, Params, Verdict, emptied, exact, leaves, read_i64};
use crate::caps::Caps;
use crate::error::{Error, Result};
use crate::time::{Instant, Nanos};
use crate::{Decision, Effect, Patch};

pub(super) const VERSION: u8 = 2;
const HEADER: usize = 24;
const PRECISION_AT: usize = 8;
const NEWEST_AT: usize = 16;
const SLOT: usize = 8;

/// `⌈window / p⌉`: the buckets a window spans (one more can count at once, partly).
pub(super) fn spanned(window: Nanos, p: Nanos) -> i64 {
    let (w, p) = (window.as_nanos(), p.as_nanos());
    w / p + i64::from(w % p != 0)
}

/// The bucket of precision `p` holding `now`.
fn current_of(now: Instant, p: i64) -> i64 {
    now.as_nanos().div_euclid(p)
}

/// The ring's length for these parameters: the most buckets that can count at once.
fn slots_for(params: &Params, p: Nanos) -> usize {
    // At most the bucket cap + 1 (checked by `Params::with_caps`).
    (spanned(params.window, p) + 1) as usize
}

/// The ring: the whole string, borrowed from the store or, when the call had to build it
/// (no key, or a key of other parameters), owned.
struct Ring<'a> {
    image: Cow<'a, [u8]>,
    p: i64,
    newest: i64,
    slots: usize,
}

impl<'a> Ring<'a> {
    fn empty(p: i64, newest: i64, slots: usize) -> Ring<'static> {
        let mut image = vec![0; HEADER + slots * SLOT];
        image[0] = VERSION;
        image[PRECISION_AT..NEWEST_AT].copy_from_slice(&p.to_le_bytes());
        image[NEWEST_AT..HEADER].copy_from_slice(&newest.to_le_bytes());
        Ring { image: Cow::Owned(image), p, newest, slots }
    }

    fn parse(bytes: &'a [u8]) -> Result<Ring<'a>> {
        let &[VERSION, 0, 0, 0, 0, 0, 0, 0, ..] = bytes else { return Err(INVALID) };
        let p = read_i64(bytes, PRECISION_AT).filter(|&p| p >= 1).ok_or_else(|| INVALID)?;
        let newest = read_i64(bytes, NEWEST_AT).ok_or_else(|| INVALID)?;
        let body = bytes.len() - HEADER;
        let slots = body / SLOT;
        // Any ring the largest cap allows is valid, whatever the cap is now (it may have
        // been lowered since the ring was written): the call regroups it into its own.
        if !body.is_multiple_of(SLOT) || slots == 0 || slots as i64 > Caps::CEILING.max_buckets + 1 {
            return Err(INVALID);
        }
        Ok(Ring { image: Cow::Borrowed(bytes), p, newest, slots })
    }

    fn is_stored(&self) -> bool {
        matches!(self.image, Cow::Borrowed(_))
    }

    fn offset(&self, k: i64) -> usize {
        HEADER + k.rem_euclid(self.slots as i64) as usize * SLOT
    }

    /// The count of bucket `k`, one the ring holds (`newest − slots < k ≤ newest`).
    fn count(&self, k: i64) -> Result<i64> {
        read_i64(&self.image, self.offset(k)).filter(|&c| c >= 0).ok_or_else(|| INVALID)
    }

    /// Adds `count` to bucket `k` of a ring this call built (one it holds).
    fn add(&mut self, k: i64, count: i64) -> Result<()> {
        let offset = self.offset(k);
        let image = self.image.to_mut();
        let sum = read_i64(image, offset).ok_or_else(|| INVALID)?.saturating_add(count);
        image[offset..offset + SLOT].copy_from_slice(&sum.to_le_bytes());
        Ok(())
    }

    /// The buckets from `oldest` to the newest, oldest first, with their counts.
    fn from(&self, oldest: i64) -> impl DoubleEndedIterator<Item = Result<(i64, i64)>> + '_ {
        let held = (i128::from(self.newest) - i128::from(oldest) + 1).clamp(0, self.slots as i128) as i64;
        (0..held).map(move |i| self.newest - (held - 1) + i).map(|k| Ok((k, self.count(k)?)))
    }

    /// The ring of a call with precision `p` and `slots` buckets, from a stored one of other
    /// parameters: each stored count moves to the bucket holding the last instant its own
    /// bucket covered, so that nothing leaves earlier than it would have. Counts that no
    /// longer count at `now` are dropped; the ring's newest bucket is `now`'s, or a later
    /// one for a state stamped in the future.
    /// No bucket moves beyond `cap`: see [`decide`].
    fn regroup(&self, p: i64, slots: usize, oldest: i64, current: i64, cap: i64) -> Result<Ring<'static>> {
        let moved = |(k, count): (i64, i64)| -> Result<Option<(i64, i64)>> {
            let last = (i128::from(k) + 1) * i128::from(self.p) - 1;
            let k = i64::try_from(last.div_euclid(i128::from(p))).map_err(|_| INVALID)?.min(cap);
            Ok((count > 0 && k >= oldest).then_some((k, count)))
        };
        let old_oldest = self.newest.saturating_sub(self.slots as i64 - 1);
        let mut newest = current;
        for entry in self.from(old_oldest) {
            if let Some((k, _)) = moved(entry?)? {
                newest = newest.max(k);
            }
        }
        let mut ring = Ring::empty(p, newest, slots);
        let first_held = newest.saturating_sub(slots as i64 - 1);
        for entry in self.from(old_oldest) {
            if let Some((k, count)) = moved(entry?)? {
                // Later, never earlier: a bucket that would fall off the ring's back moves
                // to its oldest slot.
                ring.add(k.max(first_held), count)?;
            }
        }
        Ok(ring)
    }

    /// The ring of a call with precision `p` and `slots` buckets from a stored exact log:
    /// each action still counting goes to its own bucket `⌊t / p⌋` (so it counts at least
    /// as long as it did), all of them between `oldest` and `current`. Whether the log held
    /// actions stamped after now (they count as at now).
    fn from_log(
        log: &[u8],
        now: Instant,
        params: &Params,
        p: i64,
        slots: usize,
        current: i64,
    ) -> Result<(Ring<'static>, bool)> {
        let mut ring = Ring::empty(p, current, slots);
        let ahead = exact::for_each_live(log, now, params.window, |t| ring.add(t.as_nanos().div_euclid(p), 1))?;
        Ok((ring, ahead))
    }

    /// Whether the ring is stamped further ahead than a call at `now` could have left it
    /// (the clock stepped back): compared in its own buckets, as a ring of another precision
    /// is not ahead merely because its bucket numbers are larger.
    fn is_ahead(&self, now: Instant, window: Nanos) -> bool {
        let own_cap = Nanos::new(self.p).and_then(|own| current_of(now, self.p).checked_add(spanned(window, own)));
        own_cap.is_some_and(|own_cap| self.newest > own_cap)
    }

    /// The edit setting the buckets in `edits` (ascending) and the newest bucket.
    fn patch(self, newest: i64, edits: &[(i64, i64)]) -> Patch {
        let offsets: Vec<(usize, i64)> = edits.iter().map(|&(k, count)| (self.offset(k), count)).collect();
        let len = self.image.len();
        if !self.is_stored() {
            let mut image = self.image.into_owned();
            image[NEWEST_AT..HEADER].copy_from_slice(&newest.to_le_bytes());
            for (offset, count) in offsets {
                image[offset..offset + SLOT].copy_from_slice(&count.to_le_bytes());
            }
            return Patch { len, chunks: vec![(0, image)] };
        }
        let mut chunks: Vec<(usize, Vec<u8>)> = Vec::new();
        if newest != self.newest {
            chunks.push((NEWEST_AT, newest.to_le_bytes().to_vec()));
        }
        for (offset, count) in offsets {
            // Adjacent slots (the ring's order, but for its wrap) share one chunk.
            match chunks.last_mut() {
                Some((at, bytes)) if *at + bytes.len() == offset => bytes.extend_from_slice(&count.to_le_bytes()),
                _ => chunks.push((offset, count.to_le_bytes().to_vec())),
            }
        }
        Patch { len, chunks }
    }
}

/// The exact log (its stored bytes) of a call without `PRECISION` from a stored ring: each
/// bucket `k` still counting at `now` (under the ring's own precision) becomes as many
/// entries at its last instant `(k + 1)·p − 1`, or at `now` for a bucket not over yet, so
/// that no unit leaves earlier than its bucket would have. Only the newest `limit + 1` entries
/// are kept: the rest are older and would leave first; until they have, the log holds more
/// than its limit, so a take is denied and a check (a debt: a debit, or a lowered limit) is
/// refused, at the very instants the whole ring's units would say.
/// Also whether the ring was stamped ahead (see `Ring::is_ahead`).
pub(super) fn to_log(bytes: &[u8], now: Instant, params: &Params) -> Result<(Vec<u8>, bool)> {
    let ring = Ring::parse(bytes)?;
    let horizon = now.checked_sub(params.window)?.as_nanos();
    let oldest = horizon.div_euclid(ring.p);
    // `limit ≤ max-exact-limit ≤ Caps::CEILING` without PRECISION: a bounded allocation.
    let most = usize::try_from(params.limit).map_err(|_| INVALID)?.checked_add(1).ok_or(INVALID)?;
    let mut newest_first: Vec<i64> = Vec::new();
    for entry in ring.from(oldest).rev() {
        let (k, count) = entry?;
        let last = ((i128::from(k) + 1) * i128::from(ring.p) - 1).min(i128::from(now.as_nanos()));
        // (`last` is at most `now`, and at least `horizon` for a bucket from `oldest` on.)
        let at = i64::try_from(last).map_err(|_| INVALID)?;
        if at <= horizon || newest_first.len() == most {
            break;
        }
        let n = usize::try_from(count).unwrap_or(usize::MAX).min(most - newest_first.len());
        newest_first.extend(std::iter::repeat_n(at, n));
    }
    newest_first.reverse();
    Ok((exact::image(&newest_first), ring.is_ahead(now, params.window)))
}

/// The precision a refund without `PRECISION` decides a stored ring in (see `super::decide`):
/// the ring's own, or where the call's `window` would span more buckets than the largest cap
/// allows, its smallest multiple that spans no more (regrouping into it loses no unit).
pub(super) fn refund_precision(bytes: &[u8], window: Nanos) -> Result<Nanos> {
    let own = Ring::parse(bytes)?.p;
    let most = Caps::CEILING.max_buckets;
    let p = Nanos::new(own).ok_or_else(|| INVALID)?;
    if spanned(window, p) <= most {
        return Ok(p);
    }
    // `own < window` here (else one bucket spans it), so the multiple is at most `2·window`.
    let need = spanned(window, Nanos::new(most).ok_or_else(|| INVALID)?);
    let coarse = own.checked_mul(need / own + i64::from(need % own != 0)).ok_or_else(|| INVALID)?;
    Nanos::new(coarse).ok_or_else(|| INVALID)
}

/// How many units of a stored ring a bounded refund (`HELD`) may stand for: those of the
/// bucket the taking call wrote (its end is `at − window`, `at` the key's expiry then), if it
/// still counts and the ring has this call's precision, at most `units`.
pub(super) fn held_units(
    stored: &[u8],
    now: Instant,
    params: &Params,
    p: Nanos,
    units: i64,
    at: Instant,
) -> Result<i64> {
    if stored.first() != Some(&VERSION) {
        return Ok(0);
    }
    let ring = Ring::parse(stored)?;
    let precision = p.as_nanos();
    let end = at.checked_sub(params.window)?.as_nanos();
    if ring.p != precision || ring.slots != slots_for(params, p) || end.rem_euclid(precision) != 0 {
        return Ok(0);
    }
    let k = end.div_euclid(precision).checked_sub(1).ok_or(Error::TooLarge)?;
    let oldest = now.checked_sub(params.window)?.as_nanos().div_euclid(precision);
    if k < oldest || k > ring.newest || k <= ring.newest.saturating_sub(ring.slots as i64) {
        return Ok(0);
    }
    Ok(ring.count(k)?.min(units))
}

pub(super) fn decide(
    stored: Option<&[u8]>,
    now: Instant,
    params: &Params,
    p: Nanos,
    quantity: i64,
    verdict: impl FnOnce(i64) -> Verdict,
) -> Result<Decision<Patch>> {
    let slots = slots_for(params, p);
    let precision = p.as_nanos();
    let current = current_of(now, precision);
    // The oldest bucket that still counts: its end `(k + 1)·p` is after `now − window`.
    let oldest = now.checked_sub(params.window)?.as_nanos().div_euclid(precision);

    // The newest bucket a ring may hold: regrouping to a finer precision may put counts up
    // to one window of buckets ahead of now. A ring stamped further ahead (the clock stepped
    // back) is pulled back there, so no user is locked out for the size of the step.
    let cap = current.checked_add(spanned(params.window, p)).ok_or_else(|| Error::TooLarge)?;
    // An exact log (the key was written without PRECISION) becomes buckets: see `from_log`.
    let (ring, stepped) = match stored {
        None => (Ring::empty(precision, current, slots), false),
        Some(log) if log.first() == Some(&exact::VERSION) => {
            Ring::from_log(log, now, params, precision, slots, current)?
        }
        Some(bytes) => {
            let ring = Ring::parse(bytes)?;
            let stepped = ring.is_ahead(now, params.window);
            match ring {
                ring if ring.p == precision && ring.slots == slots && !stepped => (ring, false),
                ring => (ring.regroup(precision, slots, oldest, current, cap)?, stepped),
            }
        }
    };
    let bucket_leaves = |k: i64| -> Result<Instant> {
        let end = k.checked_add(1).and_then(|k| k.checked_mul(precision)).ok_or_else(|| Error::TooLarge)?;
        leaves(Instant::from_nanos(end), params.window)
    };

    // Debits may leave the counting buckets summing past i64::MAX: the retry times below are
    // decided on the exact sum (`used_exact`), the reply's `remaining` (0 past the limit
    // anyway) on the saturated one.
    let mut used_exact = 0i128;
    let mut newest_used = None;
    for entry in ring.from(oldest) {
        let (k, count) = entry?;
        used_exact += i128::from(count);
        if count > 0 {
            newest_used = Some(k);
        }
    }
    let used = i64::try_from(used_exact).unwrap_or(i64::MAX);
    let full_at = newest_used.map(bucket_leaves).transpose()?;

    match verdict(used) {
        Verdict::Refund(units) => {
            // Give back the oldest units first (see `exact::decide`): the newest bucket in
            // use, and so the key's expiry, stays unless every unit is given back.
            let (mut left, mut edits) = (i128::from(units), Vec::new());
            for entry in ring.from(oldest) {
                let (k, count) = entry?;
                if left == 0 {
                    break;
                }
                // `taken ≤ count`: it fits an i64.
                let taken = i128::from(count).min(left);
                if taken > 0 {
                    left -= taken;
                    edits.push((k, count - taken as i64));
                }
            }
            let (Some(newest_used), Some(full_at)) = (newest_used, full_at) else {
                return Ok(emptied(now, params, false));
            };
            if edits.last() == Some(&(newest_used, 0)) {
                return Ok(emptied(now, params, true));
            }
            let used = i64::try_from(used_exact - (i128::from(units) - left)).unwrap_or(i64::MAX);
            let reply = params.reply(now, false, used, Some(full_at), None);
            let newest = ring.newest;
            Ok(Decision { reply, effect: Effect::Store { state: ring.patch(newest, &edits), expires_at: full_at } })
        }
        Verdict::Reply { limited, admittable } => {
            let retry_at = match admittable && limited {
                true => {
                    // The bucket whose leaving frees enough units.
                    let need = used_exact - i128::from(params.limit - quantity);
                    let mut freed = 0i128;
                    let mut freeing = None;
                    for entry in ring.from(oldest) {
                        let (k, count) = entry?;
                        freed += i128::from(count);
                        if freed >= need {
                            freeing = Some(k);
                            break;
                        }
                    }
                    Some(bucket_leaves(freeing.ok_or_else(|| INVALID)?)?)
                }
                false => None,
            };
            // A denial stores a pulled-back ring (a peek stays pure): see `exact::decide`.
            let effect = match (stepped && quantity != 0, full_at) {
                (true, Some(full_at)) => {
                    let newest = ring.newest;
                    Effect::Store { state: ring.patch(newest, &[]), expires_at: full_at }
                }
                _ => Effect::Nothing,
            };
            Ok(Decision { reply: params.reply(now, limited, used, full_at, retry_at), effect })
        }
        Verdict::Admit { quantity, overdrawn } => {
            // Actions go to `now`'s bucket, or to the newest for a ring stamped in the future.
            let top = current.max(ring.newest);
            // Saturating: a hostile stored `newest` far in the past must start a new ring, not
            // wrap around into a walk over every bucket in between.
            let ring =
                if top.saturating_sub(ring.newest) >= slots as i64 { Ring::empty(precision, top, slots) } else { ring };
            let mut edits = Vec::new();
            // Buckets between the newest and `top` reuse slots of buckets long gone.
            let mut k = ring.newest;
            while k < top {
                k += 1;
                edits.push((k, 0));
            }
            let count = if top == ring.newest { ring.count(top)? } else { 0 };
            // (A take's sum is at most its limit; a debit's must fit the bucket's i64.)
            let count = count.checked_add(quantity).ok_or_else(|| Error::DebitTooLarge(i64::MAX))?;
            match edits.last_mut() {
                Some(last) => last.1 = quantity,
                None => edits.push((top, count)),
            }
            let full_at = bucket_leaves(top)?;
            let after = used.saturating_add(quantity);
            // Overdrawn: a take of as many units waits for the bucket whose leaving frees
            // `after − (limit − quantity)` units of the ring the debit leaves (its own
            // units are in the newest, `top`).
            let retry_at = match overdrawn && quantity <= params.limit {
                true => {
                    let need = used_exact + i128::from(quantity) - i128::from(params.limit - quantity);
                    let mut freed = 0i128;
                    let mut freeing = top;
                    for entry in ring.from(oldest) {
                        let (k, count) = entry?;
                        freed += i128::from(count);
                        if freed >= need {
                            freeing = k;
                            break;
                        }
                    }
                    Some(bucket_leaves(freeing)?)
                }
                false => None,
            };
            let reply = params.reply(now, overdrawn, after, Some(full_at), retry_at);
            Ok(Decision { reply, effect: Effect::Store { state: ring.patch(top, &edits), expires_at: full_at } })
        }
    }
}
