//! The exact log (layout version 1): one i64 instant per action, ascending, after an
//! 8-byte header holding the count of dead entries at the front.

use super::{INVALID, Params, Verdict, emptied, leaves, read_i64};
use crate::error::Result;
use crate::time::Instant;
use crate::{Decision, Effect, Patch};

const VERSION: u8 = 1;
const HEADER: usize = 8;
const HEAD_AT: usize = 4;
const ENTRY: usize = 8;

/// A stored log, borrowed: entries `head..len` are live (some may have left the window
/// since it was written).
struct Log<'a> {
    bytes: &'a [u8],
    head: usize,
    len: usize,
}

impl<'a> Log<'a> {
    const EMPTY: Log<'static> = Log { bytes: &[], head: 0, len: 0 };

    fn parse(bytes: &'a [u8]) -> Result<Log<'a>> {
        let &[VERSION, 0, 0, 0, h0, h1, h2, h3, ..] = bytes else { return Err(INVALID) };
        let head = usize::try_from(u32::from_le_bytes([h0, h1, h2, h3])).map_err(|_| INVALID)?;
        let body = bytes.len() - HEADER;
        if !body.is_multiple_of(ENTRY) || head > body / ENTRY {
            return Err(INVALID);
        }
        Ok(Log { bytes, head, len: body / ENTRY })
    }

    fn at(&self, i: usize) -> Result<Instant> {
        let offset = i.checked_mul(ENTRY).and_then(|o| o.checked_add(HEADER)).ok_or_else(|| INVALID)?;
        read_i64(self.bytes, offset).map(Instant::from_nanos).ok_or_else(|| INVALID)
    }

    /// The first live entry after `horizon` (binary search; the entries are ascending).
    fn first_after(&self, horizon: Instant) -> Result<usize> {
        let (mut lo, mut hi) = (self.head, self.len);
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
    fn patch(&self, first: usize, keep: usize, appended: &[u8], now: Instant) -> Result<Patch> {
        let live = keep - first + appended.len() / ENTRY;
        let future = keep > first && self.at(keep - 1)? > now;
        if self.bytes.is_empty() || first > live || future {
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
            whole.extend_from_slice(appended);
            return Ok(Patch { len: whole.len(), chunks: vec![(0, whole)] });
        }
        let end = HEADER + keep * ENTRY;
        let mut chunks = Vec::with_capacity(2);
        if first != self.head {
            let head = u32::try_from(first).map_err(|_| INVALID)?;
            chunks.push((HEAD_AT, head.to_le_bytes().to_vec()));
        }
        if !appended.is_empty() {
            chunks.push((end, appended.to_vec()));
        }
        Ok(Patch { len: end + appended.len(), chunks })
    }
}

fn header(head: u32) -> [u8; HEADER] {
    let mut h = [VERSION, 0, 0, 0, 0, 0, 0, 0];
    h[HEAD_AT..].copy_from_slice(&head.to_le_bytes());
    h
}

pub(super) fn decide(stored: Option<&[u8]>, now: Instant, params: &Params, quantity: i64) -> Result<Decision<Patch>> {
    let log = stored.map_or(Ok(Log::EMPTY), Log::parse)?;
    let first = log.first_after(now.checked_sub(params.window)?)?;
    let in_window = log.len - first;
    // Any count of entries fits an i64; `used` may exceed a lowered limit.
    let used = i64::try_from(in_window).map_err(|_| INVALID)?;
    // An entry after `now` (stamped before the clock stepped back) counts as logged now.
    let stepped = log.newest()?.is_some_and(|t| t > now);
    let newest = log.newest()?.map(|t| t.min(now));
    let full_at = match (in_window, newest) {
        (1.., Some(newest)) => Some(leaves(newest, params.window)?),
        _ => None,
    };

    match Verdict::of(quantity, used, params) {
        Verdict::Refund(units) => {
            let keep = log.len - usize::try_from(units).unwrap_or(usize::MAX).min(in_window);
            if keep == first {
                return Ok(emptied(now, params, in_window > 0));
            }
            let newest = leaves(log.at(keep - 1)?.min(now), params.window)?;
            let effect = Effect::Store { state: log.patch(first, keep, &[], now)?, expires_at: newest };
            let used = used - (log.len - keep) as i64;
            Ok(Decision { reply: params.reply(now, false, used, Some(newest), None), effect })
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
                (true, Some(full_at)) => Effect::Store { state: log.patch(first, log.len, &[], now)?, expires_at: full_at },
                _ => Effect::Nothing,
            };
            Ok(Decision { reply: params.reply(now, limited, used, full_at, retry_at), effect })
        }
        Verdict::Admit(quantity) => {
            let stamp = newest.map_or(now, |newest| newest.max(now));
            // `quantity ≤ limit ≤ MAX_EXACT_LIMIT`: a bounded allocation.
            let appended = stamp.as_nanos().to_le_bytes().repeat(quantity as usize);
            let full_at = leaves(stamp, params.window)?;
            let effect = Effect::Store { state: log.patch(first, log.len, &appended, now)?, expires_at: full_at };
            Ok(Decision { reply: params.reply(now, false, used + quantity, Some(full_at), None), effect })
        }
    }
}
