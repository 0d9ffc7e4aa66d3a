//! The exact log (layout version 1): one i64 instant per action, ascending, after an
//! 8-byte header holding the count of dead entries at the front.

use super::{INVALID, Params, Verdict, buckets, emptied, leaves, read_i64};
use crate::error::{Error, Result};
use crate::time::{Instant, Nanos};
use crate::{Decision, Effect, Patch};

pub(super) const VERSION: u8 = 1;
const HEADER: usize = 8;
const HEAD_AT: usize = 4;
const ENTRY: usize = 8;

/// A log: entries `head..len` are live (some may have left the window since it was
/// written). `rebuilt`: converted from buckets by this call, not what the key holds, so any
/// write of it is a whole rewrite.
struct Log<'a> {
    bytes: &'a [u8],
    head: usize,
    len: usize,
    rebuilt: bool,
}

impl<'a> Log<'a> {
    const EMPTY: Log<'static> = Log { bytes: &[], head: 0, len: 0, rebuilt: true };

    fn parse(bytes: &'a [u8]) -> Result<Log<'a>> {
        let &[VERSION, 0, 0, 0, h0, h1, h2, h3, ..] = bytes else { return Err(INVALID) };
        let head = usize::try_from(u32::from_le_bytes([h0, h1, h2, h3])).map_err(|_| INVALID)?;
        let body = bytes.len() - HEADER;
        if !body.is_multiple_of(ENTRY) || head > body / ENTRY {
            return Err(INVALID);
        }
        Ok(Log { bytes, head, len: body / ENTRY, rebuilt: false })
    }

    fn at(&self, i: usize) -> Result<Instant> {
        let offset = i.checked_mul(ENTRY).and_then(|o| o.checked_add(HEADER)).ok_or_else(|| INVALID)?;
        read_i64(self.bytes, offset).map(Instant::from_nanos).ok_or_else(|| INVALID)
    }

    /// The first live entry after `horizon` (the entries are ascending). The horizon only moves
    /// forward, so on a long log the answer is almost always a few entries past the head: a
    /// galloping search from the head touches those few cache lines, where a plain binary
    /// search would miss the cache at every probe of a long log.
    fn first_after(&self, horizon: Instant) -> Result<usize> {
        let (mut lo, mut hi) = (self.head, self.len);
        let mut step = 1;
        while lo < hi {
            let probe = lo.saturating_add(step - 1).min(hi - 1);
            if self.at(probe)? > horizon {
                hi = probe;
                break;
            }
            lo = probe + 1;
            step = step.saturating_mul(2);
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.at(mid)? <= horizon { lo = mid + 1 } else { hi = mid }
        }
        Ok(lo)
    }

    /// The newest entry, if any.
    fn newest(&self) -> Result<Option<Instant>> {
        self.len.checked_sub(1).map(|i| self.at(i)).transpose()
    }

    /// The edit leaving entries `first..keep` of this log, followed by `appended`. Rewrites
    /// the whole string when the dead entries (`..first`) would outnumber the live ones, so
    /// that the string never holds more than two entries per live action.
    ///
    /// Entries after `now` (the clock stepped back) are rewritten as logged at `now`, so the
    /// log stays sorted and they leave one window from now.
    fn patch(&self, first: usize, keep: usize, appended: Vec<u8>, now: Instant) -> Result<Patch> {
        let live = keep - first + appended.len() / ENTRY;
        let future = keep > first && self.at(keep - 1)? > now;
        if self.rebuilt || first > live || future {
            let kept = match first == keep {
                true => &[][..],
                false => self.bytes.get(HEADER + first * ENTRY..HEADER + keep * ENTRY).ok_or_else(|| INVALID)?,
            };
            let mut whole = Vec::with_capacity(HEADER + kept.len() + appended.len());
            whole.extend_from_slice(&header(0));
            if future {
                for entry in kept.chunks_exact(ENTRY) {
                    let t = read_i64(entry, 0).ok_or_else(|| INVALID)?.min(now.as_nanos());
                    whole.extend_from_slice(&t.to_le_bytes());
                }
            } else {
                whole.extend_from_slice(kept);
            }
            whole.extend_from_slice(&appended);
            return Ok(Patch { len: whole.len(), chunks: vec![(0, whole)] });
        }
        let end = HEADER + keep * ENTRY;
        let len = end + appended.len();
        let mut chunks = Vec::with_capacity(2);
        if first != self.head {
            let head = u32::try_from(first).map_err(|_| INVALID)?;
            chunks.push((HEAD_AT, head.to_le_bytes().to_vec()));
        }
        if !appended.is_empty() {
            chunks.push((end, appended));
        }
        Ok(Patch { len, chunks })
    }
}

fn header(head: u32) -> [u8; HEADER] {
    let mut h = [VERSION, 0, 0, 0, 0, 0, 0, 0];
    h[HEAD_AT..].copy_from_slice(&head.to_le_bytes());
    h
}

/// A log of `entries` (ascending instants), as stored.
pub(super) fn image(entries: &[i64]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + entries.len() * ENTRY);
    bytes.extend_from_slice(&header(0));
    for t in entries {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    bytes
}

/// Calls `f` with each action of a stored log still counting at `now` in a window of
/// `window`, oldest first; an action stamped after `now` (the clock stepped back) as at `now`.
/// Whether there was such an action.
pub(super) fn for_each_live(
    bytes: &[u8],
    now: Instant,
    window: Nanos,
    mut f: impl FnMut(Instant) -> Result<()>,
) -> Result<bool> {
    let log = Log::parse(bytes)?;
    for i in log.first_after(now.checked_sub(window)?)?..log.len {
        f(log.at(i)?.min(now))?;
    }
    Ok(log.newest()?.is_some_and(|t| t > now))
}

/// How many of the live actions of a stored log a bounded refund (`HELD`) may stand for:
/// those logged at the taking instant `at − window` (`at`, the key's expiry then, is a whole
/// millisecond: the instant lies in the millisecond before it), none when the oldest of them
/// has left the window (or the key is not an exact log), at most `units`.
pub(super) fn held_units(stored: &[u8], now: Instant, params: &Params, units: i64, at: Instant) -> Result<i64> {
    if stored.first() != Some(&VERSION) {
        return Ok(0);
    }
    let log = Log::parse(stored)?;
    let taken = at.checked_sub(params.window)?;
    let (lo, hi) = (
        log.first_after(taken.checked_sub(Nanos::new(crate::time::NANOS_PER_MILLI).ok_or_else(|| INVALID)?)?)?,
        log.first_after(taken)?,
    );
    if lo >= hi || log.at(lo)? <= now.checked_sub(params.window)? {
        return Ok(0);
    }
    Ok(i64::try_from(hi - lo).map_err(|_| INVALID)?.min(units))
}

pub(super) fn decide(
    stored: Option<&[u8]>,
    now: Instant,
    params: &Params,
    quantity: i64,
    verdict: impl FnOnce(i64) -> Verdict,
) -> Result<Decision<Patch>> {
    // A ring of buckets (the key was written with PRECISION) becomes a log: see `buckets::to_log`.
    let rebuilt;
    let (log, ring_ahead) = match stored {
        None => (Log::EMPTY, false),
        Some(bytes) if bytes.first() == Some(&buckets::VERSION) => {
            let ahead;
            (rebuilt, ahead) = buckets::to_log(bytes, now, params)?;
            (Log { rebuilt: true, ..Log::parse(&rebuilt)? }, ahead)
        }
        Some(bytes) => (Log::parse(bytes)?, false),
    };
    let first = log.first_after(now.checked_sub(params.window)?)?;
    let in_window = log.len - first;
    // Any count of entries fits an i64; `used` may exceed a lowered limit.
    let used = i64::try_from(in_window).map_err(|_| INVALID)?;
    // An entry after `now` (stamped before the clock stepped back) counts as logged now; so
    // do the units of a ring stamped ahead.
    let stepped = ring_ahead || log.newest()?.is_some_and(|t| t > now);
    let newest = log.newest()?.map(|t| t.min(now));
    let full_at = match (in_window, newest) {
        (1.., Some(newest)) => Some(leaves(newest, params.window)?),
        _ => None,
    };

    match verdict(used) {
        Verdict::Refund(units) => {
            // Give back the oldest live actions: the log then only ever holds entries at or
            // after the real actions still counting, so it never admits more than the limit
            // whichever actions the refund stands for. Only `head` moves (a 4-byte edit); the
            // newest entry, and so the key's expiry, stays.
            let taken = usize::try_from(units).unwrap_or(usize::MAX).min(in_window);
            let Some(full_at) = full_at.filter(|_| taken < in_window) else {
                return Ok(emptied(now, params, in_window > 0));
            };
            let effect =
                Effect::Store { state: log.patch(first + taken, log.len, Vec::new(), now)?, expires_at: full_at };
            let used = used - taken as i64;
            Ok(Decision { reply: params.reply(now, false, used, Some(full_at), None), effect })
        }
        Verdict::Reply { limited, admittable } => {
            // Denied: the oldest `used + quantity − limit` actions must leave first.
            let retry_at = match admittable && limited {
                true => {
                    let oldest_needed = first + (used + quantity - params.limit - 1) as usize;
                    Some(leaves(log.at(oldest_needed)?.min(now), params.window)?)
                }
                false => None,
            };
            // A denial rewrites entries stamped in the future (a peek stays pure), so that
            // they leave one window from now rather than from every later call's now.
            let effect = match (stepped && quantity != 0, full_at) {
                (true, Some(full_at)) => {
                    Effect::Store { state: log.patch(first, log.len, Vec::new(), now)?, expires_at: full_at }
                }
                _ => Effect::Nothing,
            };
            Ok(Decision { reply: params.reply(now, limited, used, full_at, retry_at), effect })
        }
        Verdict::Admit { quantity, overdrawn } => {
            // A take logs at most its limit; a debit may log more, up to the same cap.
            if quantity > params.max_exact_debit {
                return Err(Error::DebitTooLong(params.max_exact_debit));
            }
            // Nor may debits pile up past twice the cap (a log at its limit, then one debit
            // at its cap): the string stays within 16 bytes per unit of that bound.
            let most = params.max_exact_debit.saturating_mul(2);
            if used.checked_add(quantity).is_none_or(|n| n > most) {
                return Err(Error::DebitTooDeep(most));
            }
            let stamp = newest.map_or(now, |newest| newest.max(now));
            // `quantity ≤ max-exact-limit ≤ Caps::CEILING`: a bounded allocation.
            let appended = stamp.as_nanos().to_le_bytes().repeat(quantity as usize);
            let full_at = leaves(stamp, params.window)?;
            let after = used + quantity;
            // Overdrawn: a take of as many units waits for the oldest `after + quantity −
            // limit` actions of the log the debit leaves (the old live ones, then its own).
            let retry_at = match overdrawn && quantity <= params.limit {
                true => {
                    let needed = after + quantity - params.limit - 1;
                    let at = if needed < used { log.at(first + needed as usize)?.min(now) } else { stamp };
                    Some(leaves(at, params.window)?)
                }
                false => None,
            };
            let effect = Effect::Store { state: log.patch(first, log.len, appended, now)?, expires_at: full_at };
            Ok(Decision { reply: params.reply(now, overdrawn, after, Some(full_at), retry_at), effect })
        }
    }
}
