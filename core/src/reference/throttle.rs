//! CL.THROTTLE: the contract's formulas over the stored TAT.

/// Whether the contract accepts these parameters: a nanosecond or more per unit, and every
/// count and span within 10^18 ns (about 31.7 years).
pub fn valid(max_burst: i64, count: i64, period: i64) -> bool {
    const MAX: i128 = 1_000_000_000_000_000_000;
    let (max_burst, count, period) = (i128::from(max_burst), i128::from(count), i128::from(period));
    let ei = if count > 0 { period / count } else { 0 };
    (0..MAX).contains(&max_burst) && (1..=MAX).contains(&count) && ei >= 1 && ei * (max_burst + 1) <= MAX
}

/// The stored state after a call: `None` unchanged, `Some(None)` deleted, `Some(Some(tat))`.
pub type Write = Option<Option<i128>>;

/// The reply and write of a call at `now` against `tat`, a `debit` or a take; `None` where
/// the module must report the parameters as too large. A TAT however far ahead is read as it
/// is (a debit leaves one past `now + DVT`; a clock step back cannot be told from it).
#[allow(clippy::too_many_arguments)]
pub fn call(
    tat: Option<i64>,
    now: i64,
    max_burst: i64,
    count: i64,
    period: i64,
    q: i64,
    debit: bool,
) -> Option<([i128; 5], Write)> {
    const MAX: i128 = 1_000_000_000_000_000_000;
    let (now, ei) = (now as i128, (period / count) as i128);
    let limit = max_burst as i128 + 1;
    let dvt = ei * limit;
    let fits = |v: i128| v >= i64::MIN as i128 && v <= i64::MAX as i128;
    if ei == 0 || !fits(dvt) {
        return None;
    }
    let tat = tat.map_or(now, |t| (t as i128).max(now));
    let remaining = |ttl: i128| ((dvt - ttl).div_euclid(ei)).clamp(0, limit);
    if q < 0 {
        let new_tat = (tat + ei * q as i128).max(now);
        let ttl = new_tat - now;
        let write = if new_tat == now { Some(None) } else { Some(Some(new_tat)) };
        return Some(([0, limit, remaining(ttl), -1, ttl], write));
    }
    let inc = ei * q as i128;
    if debit && q > 0 {
        // Counted whatever the limit says: the TAT moves on by the units.
        let new_tat = tat + inc;
        if inc > MAX || !fits(new_tat) {
            return None;
        }
        let fitted = q as i128 <= limit && now >= new_tat - dvt;
        let retry = if fitted || q as i128 > limit { -1 } else { new_tat + inc - dvt - now };
        let ttl = new_tat - now;
        return Some(([i128::from(!fitted), limit, remaining(ttl), retry, ttl], Some(Some(new_tat))));
    }
    if q as i128 > limit {
        return Some(([1, limit, remaining(tat - now), -1, tat - now], None));
    }
    let new_tat = tat + inc;
    if !fits(new_tat) || !fits(new_tat - dvt) {
        return None;
    }
    if now < new_tat - dvt {
        let ttl = tat - now;
        return Some(([1, limit, remaining(ttl), new_tat - dvt - now, ttl], None));
    }
    let ttl = new_tat - now;
    Some(([0, limit, remaining(ttl), -1, ttl], if q == 0 { None } else { Some(Some(new_tat)) }))
}
