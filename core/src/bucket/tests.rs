use super::*;
use crate::limits::testing::{IntegerKey, T0, carry, reply_i128};
use crate::reference::bucket::Model;
use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC, Unit};
use proptest::prelude::*;

const MS: i64 = NANOS_PER_MILLI;

fn secs(s: i64) -> Nanos {
    Nanos::new(s * NANOS_PER_SEC).unwrap()
}

/// Runs a call at `now`, carrying the state through its stored form.
fn run(stored: &mut IntegerKey, now: i64, p: &Params, q: i64) -> Reply {
    let state = stored.map(|(d, ms)| decode(d.to_string().as_bytes(), Some(ms)).unwrap());
    let d = decide(state, Instant::from_nanos(now), p, q, Charge::Take).unwrap();
    carry(stored, d.effect);
    d.reply
}

fn at(s: i64) -> i64 {
    T0 + s * NANOS_PER_SEC
}

fn arr(r: Reply) -> [i64; 5] {
    r.to_array(Unit::Seconds)
}

#[test]
fn drains_then_refills_on_the_grid() {
    // 5 tokens, 2 more every 10 s.
    let p = Params::new(5, 2, secs(10)).unwrap();
    let mut s = None;
    assert_eq!(arr(run(&mut s, at(0), &p, 1)), [0, 5, 4, -1, 10]);
    assert_eq!(arr(run(&mut s, at(1), &p, 4)), [0, 5, 0, -1, 29]);
    assert_eq!(s, Some((-5, at(30) / MS)), "stored as minus the deficit");
    assert_eq!(arr(run(&mut s, at(2), &p, 1)), [1, 5, 0, 8, 28]);
    assert_eq!(arr(run(&mut s, at(2), &p, 3)), [1, 5, 0, 18, 28], "needs two refills");
    assert_eq!(arr(run(&mut s, at(2), &p, 6)), [1, 5, 0, -1, 28], "never admittable");
    // The refill at exactly 10 s has happened.
    assert_eq!(arr(run(&mut s, at(10), &p, 0)), [0, 5, 2, -1, 20]);
    assert_eq!(arr(run(&mut s, at(25), &p, 0)), [0, 5, 4, -1, 5]);
    assert_eq!(arr(run(&mut s, at(30), &p, 0)), [0, 5, 5, -1, 0]);
}

#[test]
fn refills_do_not_drift_with_the_calls() {
    let p = Params::new(10, 1, secs(10)).unwrap();
    let mut s = None;
    run(&mut s, at(0), &p, 3);
    // Draws between refills keep the grid at 10, 20, 30, …
    for (t, remaining, reset) in [(7, 6, 33), (17, 6, 33), (27, 6, 33), (29, 5, 41)] {
        assert_eq!(arr(run(&mut s, at(t), &p, 1)), [0, 10, remaining, -1, reset], "at {t}");
    }
    assert_eq!(s, Some((-5, at(70) / MS)));
}

#[test]
fn the_clock_starts_on_the_whole_millisecond_at_or_before() {
    let p = Params::new(2, 1, Nanos::new(100 * MS).unwrap()).unwrap();
    let mut s = None;
    let now = T0 + 250_000; // 0.25 ms past a whole millisecond
    let r = run(&mut s, now, &p, 2);
    assert_eq!(s, Some((-2, T0 / MS + 200)));
    assert_eq!(r.to_array(Unit::Millis), [0, 2, 0, -1, 200], "never more than the refills need");
    // The first refill is one interval after the clock's start.
    assert_eq!(run(&mut s, T0 + 100 * MS - 1, &p, 0).remaining, 0);
    assert_eq!(run(&mut s, T0 + 100 * MS, &p, 0).remaining, 1);
    // The case: `CL.BUCKET tb 10 2 1000 10 MS` replied 5001, then retry 1001.
    let p = Params::new(10, 2, Nanos::new(1000 * MS).unwrap()).unwrap();
    let mut s = None;
    assert_eq!(run(&mut s, T0 + 300_000, &p, 10).to_array(Unit::Millis), [0, 10, 0, -1, 5000]);
    assert_eq!(run(&mut s, T0 + 400_000, &p, 1).to_array(Unit::Millis), [1, 10, 0, 1000, 5000]);
}

#[test]
fn peek_and_refund() {
    let p = Params::new(5, 1, secs(10)).unwrap();
    let mut s = None;
    assert_eq!(arr(run(&mut s, at(0), &p, 0)), [0, 5, 5, -1, 0]);
    assert_eq!(arr(run(&mut s, at(0), &p, -2)), [0, 5, 5, -1, 0]);
    assert_eq!(s, None, "neither a peek nor a refund creates a key");
    run(&mut s, at(0), &p, 4);
    let before = s;
    assert_eq!(arr(run(&mut s, at(5), &p, 0)), [0, 5, 1, -1, 35]);
    assert_eq!(s, before, "a peek re-times nothing");
    assert_eq!(arr(run(&mut s, at(5), &p, -2)), [0, 5, 3, -1, 15]);
    assert_eq!(s, Some((-2, at(20) / MS)), "a refund keeps the grid");
    assert_eq!(arr(run(&mut s, at(5), &p, i64::MIN)), [0, 5, 5, -1, 0]);
    assert_eq!(s, None, "a refund to full deletes the key");
}

#[test]
fn a_deficit_above_a_lowered_capacity_is_debt() {
    // `CL.BUCKET d 10 1 60 10`, then `CL.BUCKET d 5 1 60`: the 10 tokens taken stay taken (a
    // deficit above the capacity is debt, as a DEBIT leaves, and the two cannot be told
    // apart): a token for a draw once 6 refills have come, full after 10.
    let mut s = None;
    run(&mut s, at(0), &Params::new(10, 1, secs(60)).unwrap(), 10);
    assert_eq!(s, Some((-10, at(600) / MS)));
    let p = Params::new(5, 1, secs(60)).unwrap();
    assert_eq!(arr(run(&mut s, at(0), &p, 0)), [1, 5, 0, 300, 600], "a check: over the capacity");
    assert_eq!(s, Some((-10, at(600) / MS)), "and writes nothing");
    assert_eq!(arr(run(&mut s, at(0), &p, 1)), [1, 5, 0, 360, 600]);
    assert_eq!(s, Some((-10, at(600) / MS)), "a denial writes nothing");
    assert_eq!(arr(run(&mut s, at(300), &p, 0)), [0, 5, 0, -1, 300], "at exactly the capacity: admitted");
    assert_eq!(arr(run(&mut s, at(360), &p, 1)), [0, 5, 0, -1, 300], "the sixth refill came");
    // Lowered later, when the grid's remaining refills already cover the deficit, the grid
    // stays.
    let mut s = None;
    run(&mut s, at(0), &Params::new(10, 1, secs(1)).unwrap(), 9);
    let p = Params::new(3, 1, secs(1)).unwrap();
    assert_eq!(arr(run(&mut s, at(7), &p, 0)), [0, 3, 1, -1, 2]);
    assert_eq!(arr(run(&mut s, at(7), &p, 1)), [0, 3, 0, -1, 3]);
}

#[test]
fn parameters_are_validated() {
    assert!(matches!(Params::new(0, 1, secs(1)), Err(Error::OutOfRange { name: "capacity", .. })));
    assert!(matches!(Params::new(1, 0, secs(1)), Err(Error::OutOfRange { name: "tokens", .. })));
    assert!(matches!(Params::new(1, 1, Nanos::ZERO), Err(Error::OutOfRange { name: "interval", .. })));
    assert!(matches!(Params::new(1, 1, Nanos::new(MS + 1).unwrap()), Err(Error::OutOfRange { name: "interval", .. })));
    let too_long = Err(Error::SpanTooLong("interval * ceil(capacity / tokens)"));
    assert_eq!(Params::new(i64::MAX, 1, secs(2)), too_long);
    assert!(Params::new(i64::MAX, i64::MAX, secs(1)).is_ok());
    assert!(Params::new(i64::MAX, 1 << 40, secs(1)).is_ok());
    assert_eq!(Params::new(i64::MAX, 1 << 40, secs(1 << 20)), too_long);
    // Refilling an empty bucket may take up to MAX_DURATION, not a nanosecond more.
    assert!(Params::new(1_000_000_000, 1, secs(1)).is_ok());
    assert_eq!(Params::new(1_000_000_001, 1, secs(1)), too_long);
}

#[test]
fn stored_state_is_a_deficit_with_an_expiry() {
    assert_eq!(decode(b"-3", Some(7)), Ok(State { deficit: 3, full_at: Instant::from_nanos(7 * MS) }));
    for (bad, ms) in [
        (&b"0"[..], Some(7)),
        (b"3", Some(7)),
        (b"-9223372036854775808", Some(7)),
        (b"", Some(7)),
        (b" 3", Some(7)),
        (b"3", None),
    ] {
        assert_eq!(decode(bad, ms), Err(Error::InvalidState("CL.BUCKET")), "{bad:?} {ms:?}");
    }
    // No expiry, or one beyond the nanosecond range: full too far ahead, pulled back when
    // deciding.
    let far = State { deficit: 3, full_at: Instant::from_nanos(i64::MAX) };
    for ms in [None, Some(i64::MAX), Some(9_223_372_036_855)] {
        assert_eq!(decode(b"-3", ms), Ok(far), "{ms:?}");
    }
}

#[test]
fn a_bucket_without_an_expiry_refills_from_now() {
    // After PERSIST (or RESTORE with ttl 0, or SET without KEEPTTL) the key never expires:
    // its grid restarts now, and the first call other than a peek stores it (even denied).
    let p = Params::new(5, 1, secs(10)).unwrap();
    let empty = decode(b"-5", None).unwrap();
    let peek = decide(Some(empty), Instant::from_nanos(at(0) + 5), &p, 0, Charge::Take).unwrap();
    assert_eq!((arr(peek.reply), peek.effect), ([0, 5, 0, -1, 50], Effect::Nothing));
    let d = decide(Some(empty), Instant::from_nanos(at(0) + 5), &p, 1, Charge::Take).unwrap();
    assert_eq!(arr(d.reply), [1, 5, 0, 10, 50]);
    assert_eq!(d.effect, Effect::Store { state: -5, expires_at: Instant::from_nanos(at(50)) });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    #[test]
    fn matches_the_tick_by_tick_model(
        capacity in 1i64..12, tokens in 1i64..6, interval_ms in 1i64..20,
        calls in proptest::collection::vec((prop_oneof![0i64..3 * MS, 0i64..60 * MS], -6i64..14), 1..40),
    ) {
        let p = Params::new(capacity, tokens, Nanos::new(interval_ms * MS).unwrap()).unwrap();
        let (mut stored, mut model, mut now) = (None, Model::new(capacity, tokens, interval_ms * MS), T0 + 777);
        for (step, q) in calls {
            now += step;
            let got = reply_i128(run(&mut stored, now, &p, q));
            let want = model.call(now as i128, q as i128, false);
            prop_assert_eq!(got, want, "at {} q {}", now - T0, q);
            prop_assert!(got[2] >= 0 && got[2] <= capacity as i128, "never more than capacity");
            // No reply time exceeds the refills it waits for: those of the deficit (reset),
            // of the tokens missing for `q` (retry).
            let refills = |missing: i128| (missing + i128::from(tokens) - 1) / i128::from(tokens) * i128::from(interval_ms * MS);
            prop_assert!(got[4] <= refills(i128::from(capacity) - got[2]), "reset {:?}", got);
            prop_assert!(got[3] <= refills((i128::from(q) - got[2]).max(0)), "retry {:?}", got);
            if let Some((negated, _)) = stored { prop_assert!(-negated >= 1 && -negated <= capacity) }
        }
    }

    /// Any stored state, even one stamped far in the future or with parameters near the
    /// 64-bit limits, decides without panicking, never holds more than `capacity`, admits
    /// only what it holds, and a take adds no debt.
    #[test]
    fn hostile_state_neither_panics_nor_over_admits(
        deficit in prop_oneof![1i64..10, 1i64..=i64::MAX], ms in prop_oneof![Just(None), proptest::option::of(any::<i64>())],
        now in prop_oneof![Just(T0), any::<i64>()], capacity in prop_oneof![1i64..10, 1i64..=i64::MAX],
        tokens in prop_oneof![1i64..10, 1i64..=i64::MAX], interval_ms in prop_oneof![1i64..100, 1i64..=i64::MAX / MS],
        q in prop_oneof![-3i64..10, any::<i64>()],
    ) {
        let Ok(p) = Params::new(capacity, tokens, Nanos::new(interval_ms * MS).unwrap()) else { return Ok(()) };
        let Ok(state) = decode((-deficit).to_string().as_bytes(), ms) else { return Ok(()) };
        let now = Instant::from_nanos(now);
        let (Ok(peek), Ok(d)) = (decide(Some(state), now, &p, 0, Charge::Take), decide(Some(state), now, &p, q, Charge::Take)) else { return Ok(()) };
        prop_assert!(peek.reply.remaining >= 0 && peek.reply.remaining <= capacity);
        prop_assert!(d.reply.remaining >= 0 && d.reply.remaining <= capacity);
        if q > 0 && !d.reply.limited {
            prop_assert_eq!(d.reply.remaining, peek.reply.remaining - q);
        }
        if let Effect::Store { state: s, expires_at } = d.effect {
            // A take adds no debt: it stores at most the capacity, or the debt it found.
            prop_assert!(-s >= 1 && -s <= capacity.max(deficit));
            prop_assert!(expires_at > now);
        }
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..24), ms in proptest::option::of(any::<i64>())) {
        let _ = decode(&bytes, ms);
    }
}

#[test]
fn a_bucket_full_far_ahead_refills_within_its_deficit_time() {
    let p = Params::new(5, 1, secs(10)).unwrap();
    // Empty and "full" an hour from now (the clock stepped back an hour): read as empty with
    // its grid restarting now, so it holds a token again in 10 s and is full in 50 s.
    let mut s = Some((-5, (T0 + 3600 * NANOS_PER_SEC) / MS));
    assert_eq!(arr(run(&mut s, at(0), &p, 1)), [1, 5, 0, 10, 50]);
    assert_eq!(arr(run(&mut s, at(10), &p, 1)), [0, 5, 0, -1, 50]);
    assert_eq!(s, Some((-5, at(60) / MS)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    /// Whatever its stored expiry, after one call (denied or not) a bucket is full again
    /// within the refills its deficit needs.
    #[test]
    fn any_stamped_bucket_recovers_within_its_refills(
        deficit in 1i64..20, offset_ms in prop_oneof![-(1i64 << 40)..(1i64 << 40), -100_000i64..100_000],
        capacity in 1i64..20, tokens in 1i64..5, interval_ms in 1i64..10_000, q in 1i64..25,
    ) {
        let p = Params::new(capacity, tokens, Nanos::new(interval_ms * MS).unwrap()).unwrap();
        let deficit = deficit.min(capacity); // unchanged parameters: only the clock stepped
        let mut stored = Some((-deficit, T0 / MS + offset_ms));
        let refills = (deficit + tokens - 1) / tokens;
        let peek = run(&mut stored, T0, &p, 0);
        prop_assert!(peek.reset_after.as_nanos() <= ((deficit + tokens - 1) / tokens) * interval_ms * MS);
        let d = run(&mut stored, T0, &p, q);
        let refills = if d.limited { refills } else { (capacity - d.remaining + tokens - 1) / tokens };
        prop_assert_eq!(run(&mut stored, T0 + refills * interval_ms * MS, &p, 0).remaining, capacity, "full after its refills");
    }
}
