use super::*;
use crate::limits::testing::{IntegerKey, T0, carry, reply_i128};
use crate::reference::counter::Model;
use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC, Unit};
use proptest::prelude::*;

fn secs(s: i64) -> Nanos {
    Nanos::new(s * NANOS_PER_SEC).unwrap()
}

/// Runs a call at `now`, carrying the state as the module would (through the key's
/// millisecond expiry, so a lossy expiry would show).
fn run(stored: &mut IntegerKey, now: i64, p: &Params, q: i64) -> Reply {
    let state = stored.map(|(count, ms)| decode(count.to_string().as_bytes(), Some(ms)).unwrap());
    let d = decide(state, Instant::from_nanos(now), p, q, Charge::Take).unwrap();
    carry(stored, d.effect);
    d.reply
}

fn arr(r: Reply) -> [i64; 5] {
    r.to_array(Unit::Seconds)
}

#[test]
fn counts_then_denies_until_the_window_closes() {
    let p = Params::new(3, secs(10)).unwrap();
    let mut s = None;
    assert_eq!(arr(run(&mut s, T0, &p, 1)), [0, 3, 2, -1, 10]);
    assert_eq!(s, Some((1, T0 / NANOS_PER_MILLI + 10_000)));
    assert_eq!(arr(run(&mut s, T0 + secs(4).as_nanos(), &p, 2)), [0, 3, 0, -1, 6]);
    assert_eq!(arr(run(&mut s, T0 + secs(5).as_nanos(), &p, 1)), [1, 3, 0, 5, 5]);
    assert_eq!(arr(run(&mut s, T0 + secs(5).as_nanos(), &p, 4)), [1, 3, 0, -1, 5], "never admittable");
    // At the close the window is gone, whether or not the key has been reclaimed yet.
    assert_eq!(arr(run(&mut s, T0 + secs(10).as_nanos(), &p, 1)), [0, 3, 2, -1, 10]);
    assert_eq!(s, Some((1, T0 / NANOS_PER_MILLI + 20_000)));
}

#[test]
fn a_window_opens_on_the_whole_millisecond_at_or_before() {
    let p = Params::new(5, Nanos::new(7 * NANOS_PER_MILLI).unwrap()).unwrap();
    let mut s = None;
    let now = T0 + 1;
    let r = run(&mut s, now, &p, 1);
    assert_eq!(s, Some((1, T0 / NANOS_PER_MILLI + 7)));
    assert_eq!(r.reset_after.as_nanos(), 7 * NANOS_PER_MILLI - 1);
    assert_eq!(r.to_array(Unit::Millis), [0, 5, 4, -1, 7], "never more than the window");
    // The case: `CL.COUNTER fc 5 2000 1 MS` replied 2001.
    let p = Params::new(5, Nanos::new(2000 * NANOS_PER_MILLI).unwrap()).unwrap();
    let r = run(&mut None, T0 + 400_000, &p, 1);
    assert_eq!(r.to_array(Unit::Millis), [0, 5, 4, -1, 2000]);
}

#[test]
fn peek_and_refund() {
    let p = Params::new(5, secs(10)).unwrap();
    let mut s = None;
    assert_eq!(arr(run(&mut s, T0, &p, 0)), [0, 5, 5, -1, 0]);
    assert_eq!(arr(run(&mut s, T0, &p, -3)), [0, 5, 5, -1, 0]);
    assert_eq!(s, None, "neither a peek nor a refund creates a key");
    run(&mut s, T0, &p, 4);
    let before = s;
    assert_eq!(arr(run(&mut s, T0 + secs(1).as_nanos(), &p, 0)), [0, 5, 1, -1, 9]);
    assert_eq!(s, before, "a peek re-times nothing");
    assert_eq!(arr(run(&mut s, T0 + secs(1).as_nanos(), &p, -1)), [0, 5, 2, -1, 9]);
    assert_eq!(s, Some((3, T0 / NANOS_PER_MILLI + 10_000)), "a refund keeps the window's close");
    assert_eq!(arr(run(&mut s, T0 + secs(1).as_nanos(), &p, i64::MIN)), [0, 5, 5, -1, 0]);
    assert_eq!(s, None, "a refund to full deletes the key");
}

#[test]
fn replies_in_milliseconds() {
    let p = Params::new(1, Nanos::new(1500 * NANOS_PER_MILLI).unwrap()).unwrap();
    let mut s = None;
    run(&mut s, T0, &p, 1);
    let r = run(&mut s, T0 + 200 * NANOS_PER_MILLI + 1, &p, 1);
    assert_eq!(r.to_array(Unit::Millis), [1, 1, 0, 1300, 1300]);
    assert_eq!(r.to_array(Unit::Seconds), [1, 1, 0, 2, 2]);
}

#[test]
fn a_lowered_limit_leaves_remaining_at_zero() {
    let mut s = None;
    run(&mut s, T0, &Params::new(10, secs(10)).unwrap(), 8);
    // Over the limit even a peek is refused, as CL.THROTTLE refuses one.
    assert_eq!(arr(run(&mut s, T0, &Params::new(3, secs(10)).unwrap(), 0)), [1, 3, 0, 10, 10]);
    assert_eq!(arr(run(&mut s, T0, &Params::new(3, secs(10)).unwrap(), 1)), [1, 3, 0, 10, 10]);
}

#[test]
fn parameters_are_validated() {
    assert!(matches!(Params::new(0, secs(1)), Err(Error::OutOfRange { name: "limit", .. })));
    assert!(matches!(Params::new(1, Nanos::ZERO), Err(Error::OutOfRange { name: "window", .. })));
    assert!(matches!(Params::new(1, Nanos::new(1).unwrap()), Err(Error::OutOfRange { name: "window", .. })));
    let huge = Params::new(1, Nanos::new(i64::MAX / NANOS_PER_MILLI * NANOS_PER_MILLI).unwrap()).unwrap();
    assert_eq!(decide(None, Instant::from_nanos(T0), &huge, 1, Charge::Take), Err(Error::TooLarge));
    assert!(decide(None, Instant::from_nanos(T0), &huge, 0, Charge::Take).is_ok(), "a peek computes no close");
}

#[test]
fn stored_state_is_an_integer_with_an_expiry() {
    assert_eq!(decode(b"12", Some(5)), Ok(State { count: 12, closes_at: Instant::from_nanos(5 * NANOS_PER_MILLI) }));
    assert_eq!(decode(b"0", Some(5)).map(|s| s.count), Ok(0));
    for (bad, ms) in
        [(&b"-1"[..], Some(5)), (b"1000000000000000000", Some(5)), (b"", Some(5)), (b"1.0", Some(5)), (b"x", Some(5))]
    {
        assert_eq!(decode(bad, ms), Err(Error::InvalidState("CL.COUNTER")), "{bad:?} {ms:?}");
    }
    // No expiry, or one beyond the nanosecond range: closing too far ahead, pulled back when
    // deciding.
    let far = State { count: 12, closes_at: Instant::from_nanos(i64::MAX) };
    for ms in [None, Some(i64::MAX), Some(9_223_372_036_855)] {
        assert_eq!(decode(b"12", ms), Ok(far), "{ms:?}");
    }
}

#[test]
fn a_count_without_an_expiry_closes_one_window_from_now() {
    // After PERSIST (or RESTORE with ttl 0, or SET without KEEPTTL) the key never expires:
    // the window closes one window from now, and the first call other than a peek stores
    // that close (even denied), so the key goes.
    let p = Params::new(3, secs(10)).unwrap();
    let full = decode(b"3", None).unwrap();
    let peek = decide(Some(full), Instant::from_nanos(T0 + 5), &p, 0, Charge::Take).unwrap();
    assert_eq!((arr(peek.reply), peek.effect), ([0, 3, 0, -1, 10], Effect::Nothing));
    let d = decide(Some(full), Instant::from_nanos(T0 + 5), &p, 1, Charge::Take).unwrap();
    assert_eq!(arr(d.reply), [1, 3, 0, 10, 10]);
    assert_eq!(d.effect, Effect::Store { state: 3, expires_at: Instant::from_nanos(T0 + 10 * NANOS_PER_SEC) });
    let mut s = Some((3, T0 / NANOS_PER_MILLI + 10_000));
    assert_eq!(arr(run(&mut s, T0 + 10 * NANOS_PER_SEC, &p, 1)), [0, 3, 2, -1, 10], "recovered one window later");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    #[test]
    fn matches_the_model(
        limit in 1i64..8, window_ms in 1i64..50,
        calls in proptest::collection::vec((0i64..20_000_000, -4i64..10), 1..40),
    ) {
        let p = Params::new(limit, Nanos::new(window_ms * NANOS_PER_MILLI).unwrap()).unwrap();
        let (mut stored, mut model, mut now) = (None, Model::default(), T0 + 123);
        for (step, q) in calls {
            now += step;
            let got = reply_i128(run(&mut stored, now, &p, q));
            let want = model.call(now as i128, limit as i128, window_ms as i128 * 1_000_000, q as i128, false);
            prop_assert_eq!(got, want);
            prop_assert!(got[2] >= 0 && got[2] <= limit as i128);
            // No reply time exceeds the window.
            let window = i128::from(window_ms * NANOS_PER_MILLI);
            prop_assert!(got[3] <= window && got[4] <= window, "{:?}", got);
            if let Some((count, _)) = stored { prop_assert!(count > 0 && count <= limit) }
        }
    }

    /// Any stored state, even one stamped far in the future or holding a huge count,
    /// decides without panicking and never admits beyond the limit.
    #[test]
    fn hostile_state_neither_panics_nor_over_admits(
        count in prop_oneof![0i64..10, 0i64..=i64::MAX], ms in prop_oneof![Just(None), proptest::option::of(any::<i64>())],
        now in prop_oneof![Just(T0), any::<i64>()], limit in prop_oneof![1i64..10, 1i64..=MAX_LIMIT],
        window_ms in prop_oneof![1i64..100, 1i64..=i64::MAX / NANOS_PER_MILLI], q in any::<i64>(),
    ) {
        let p = Params::new(limit, Nanos::new(window_ms * NANOS_PER_MILLI).unwrap()).unwrap();
        let Ok(state) = decode(count.to_string().as_bytes(), ms) else { return Ok(()) };
        match decide(Some(state), Instant::from_nanos(now), &p, q, Charge::Take) {
            Err(e) => prop_assert_eq!(e, Error::TooLarge),
            Ok(d) => {
                prop_assert!(d.reply.remaining >= 0 && d.reply.remaining <= limit);
                if let Effect::Store { state: c, expires_at } = d.effect {
                    match q {
                        ..0 => prop_assert!(c >= 1 && c < state.count),
                        _ if d.reply.limited => prop_assert_eq!(c, state.count, "a denial stores only the close of a key without one"),
                        _ => prop_assert!(c >= 1 && c <= limit),
                    }
                    prop_assert!(expires_at > Instant::from_nanos(now));
                    // A stored close stands; a new one (or one for a key without an expiry) is
                    // one window from the whole millisecond at or before now.
                    let floor = now - now.rem_euclid(NANOS_PER_MILLI);
                    let new_close = i128::from(floor) + i128::from(window_ms) * i128::from(NANOS_PER_MILLI);
                    if ms.is_none() || state.closes_at.as_nanos() == i64::MAX || state.closes_at <= Instant::from_nanos(now) {
                        prop_assert!(i128::from(expires_at.as_nanos()) <= new_close);
                    } else {
                        prop_assert_eq!(expires_at, state.closes_at, "a stored close is never moved");
                    }
                }
            }
        }
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..24), ms in proptest::option::of(any::<i64>())) {
        let _ = decode(&bytes, ms);
    }
}

#[test]
fn a_window_closing_far_ahead_is_never_moved_earlier() {
    let p = Params::new(3, secs(10)).unwrap();
    // Stored an hour ahead (the clock stepped back an hour, or a longer window, or CL.QUOTA
    // counting to its period's end), full: the count holds until then, and no call moves it.
    let close = (T0 + 3600 * NANOS_PER_SEC) / NANOS_PER_MILLI;
    let mut s = Some((3, close));
    assert_eq!(arr(run(&mut s, T0, &p, 1)), [1, 3, 0, 3600, 3600]);
    assert_eq!(s, Some((3, close)), "a denial writes nothing");
    assert_eq!(
        arr(run(&mut s, T0 + secs(10).as_nanos(), &p, 1)),
        [1, 3, 0, 3590, 3590],
        "still counted a window later"
    );
    assert_eq!(arr(run(&mut s, close * NANOS_PER_MILLI, &p, 1)), [0, 3, 2, -1, 10], "a new window once it closes");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    /// Whatever its stored close, a call never moves it earlier, and once it has passed (or
    /// one window after the call, if later) the counter admits again.
    #[test]
    fn a_stamped_close_stands_until_it_passes(
        count in 0i64..20, offset_ms in prop_oneof![-(1i64 << 40)..(1i64 << 40), -100_000i64..100_000],
        limit in 1i64..20, window_ms in 1i64..100_000, q in 1i64..25,
    ) {
        let p = Params::new(limit, Nanos::new(window_ms * NANOS_PER_MILLI).unwrap()).unwrap();
        let close = T0 / NANOS_PER_MILLI + offset_ms;
        let mut stored = Some((count, close));
        let peek = run(&mut stored, T0, &p, 0);
        let live = close * NANOS_PER_MILLI > T0;
        if live && count > 0 {
            prop_assert_eq!(peek.reset_after.as_nanos(), close * NANOS_PER_MILLI - T0);
        }
        run(&mut stored, T0, &p, q);
        if live {
            prop_assert!(stored.is_some_and(|(_, at)| at >= close), "{:?}: never moved earlier than {}", stored, close);
        }
        let after = stored.map_or(T0, |(_, at)| at * NANOS_PER_MILLI).max(T0 + window_ms * NANOS_PER_MILLI);
        prop_assert!(!run(&mut stored, after, &p, 1).limited, "admits again once the close has passed");
    }
}
