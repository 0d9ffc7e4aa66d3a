//! CL.PACE: the contract's scheduling over the stored TAT, in i128.

const MAX: i128 = 1_000_000_000_000_000_000;

/// Whether the contract accepts these parameters (durations in ns): a nanosecond or more per
/// unit, a period and a maxwait within 10^18 ns, and a reservation spanning at most that.
pub fn valid(count: i64, period: i64, max_wait: i64, q: i64) -> bool {
    let (count, period, max_wait, q) = (i128::from(count), i128::from(period), i128::from(max_wait), i128::from(q));
    let ei = if count > 0 { period / count } else { 0 };
    (1..=MAX).contains(&count)
        && (1..=MAX).contains(&period)
        && (0..=MAX).contains(&max_wait)
        && ei >= 1
        && (0..=MAX).contains(&q)
        && q * ei <= MAX
}

/// The units a span of `ahead` ns holds, one under way counting as one.
fn ceil(ahead: i128, ei: i128) -> i128 {
    (ahead + ei - 1).div_euclid(ei)
}

/// The reply `[limited, wait, queued, retry_after, reset_after]` (ns, `-1` for none) of a
/// call at `now` against `tat`, and the TAT it stores (`None`: nothing written).
pub fn call(tat: Option<i64>, now: i64, count: i64, period: i64, max_wait: i64, q: i64) -> ([i128; 5], Option<i128>) {
    let (now, ei, max_wait, q) = (i128::from(now), i128::from(period / count), i128::from(max_wait), i128::from(q));
    // The next free slot: now, or when the reservations already made end.
    let slot = tat.map_or(now, |t| i128::from(t).max(now));
    let wait = slot - now;
    if wait > max_wait {
        return ([1, -1, ceil(wait, ei), wait - max_wait, wait], None);
    }
    let new_tat = slot + q * ei;
    let ahead = new_tat - now;
    ([0, wait, ceil(ahead, ei), -1, ahead], (q > 0).then_some(new_tat))
}

/// The reply of a blocked call released at `now` (its slot at `slot`, its reservation ending at
/// `end`), the key holding `tat` then (`None`: gone or not a pacer's): the wait left, and the
/// schedule counted to the later of the TAT and its own end.
pub fn released(slot: i64, end: i64, tat: Option<i64>, now: i64, count: i64, period: i64) -> [i128; 5] {
    let (slot, end, now, ei) = (i128::from(slot), i128::from(end), i128::from(now), i128::from(period / count));
    let idle = tat.map_or(end, |t| i128::from(t).max(end));
    let ahead = (idle - now).max(0);
    [0, (slot - now).max(0), ceil(ahead, ei), -1, ahead]
}
