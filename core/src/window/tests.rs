use super::*;
use crate::limits::testing::{T0, reply_i128};
use crate::reference::window::Model;
use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC, Unit};
use proptest::prelude::*;

const MS: i64 = NANOS_PER_MILLI;

fn secs(s: i64) -> Nanos {
    Nanos::new(s * NANOS_PER_SEC).unwrap()
}

fn at(s: i64) -> i64 {
    T0 + s * NANOS_PER_SEC
}

/// A key as the glue keeps it: the string and its expiry, applied through the patch.
#[derive(Debug, Default, Clone)]
struct Key {
    value: Option<Vec<u8>>,
    expires_at: Option<Instant>,
}

impl Key {
    /// A call at `now`, after Redis has reclaimed the key if its millisecond expiry passed.
    fn call(&mut self, now: i64, p: &Params, q: i64) -> Result<Reply> {
        if self.expires_at.is_some_and(|e| now.div_euclid(MS) > e.ceil_millis()) {
            *self = Key::default();
        }
        let d = decide(self.value.as_deref(), Instant::from_nanos(now), p, q)?;
        match d.effect {
            Effect::Store { state, expires_at } => {
                assert!(expires_at > Instant::from_nanos(now), "a stored window is not yet empty");
                for (offset, bytes) in &state.chunks {
                    assert!(offset + bytes.len() <= state.len, "chunks lie within the length");
                }
                let mut value = self.value.take().unwrap_or_default();
                state.apply(&mut value);
                *self = Key { value: Some(value), expires_at: Some(expires_at) };
            }
            Effect::Delete => *self = Key::default(),
            Effect::Nothing => {}
        }
        Ok(d.reply)
    }

    fn run(&mut self, now: i64, p: &Params, q: i64) -> [i64; 5] {
        self.call(now, p, q).unwrap().to_array(Unit::Seconds)
    }

    fn len(&self) -> usize {
        self.value.as_ref().map_or(0, Vec::len)
    }

    /// The exact log's `head` and entries.
    fn log(&self) -> (u32, Vec<i64>) {
        let v = self.value.as_ref().unwrap();
        assert_eq!(v[..4], [1, 0, 0, 0]);
        let head = u32::from_le_bytes(v[4..8].try_into().unwrap());
        (head, v[8..].chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect())
    }
}

fn exact(limit: i64, window: Nanos) -> Params {
    Params::new(limit, window, None).unwrap()
}

#[test]
fn exact_admits_up_to_the_limit_in_any_window() {
    let p = exact(3, secs(10));
    let mut k = Key::default();
    assert_eq!(k.run(at(0), &p, 1), [0, 3, 2, -1, 10]);
    assert_eq!(k.run(at(1), &p, 1), [0, 3, 1, -1, 10]);
    assert_eq!(k.run(at(2), &p, 1), [0, 3, 0, -1, 10]);
    // The oldest action (at 0) leaves at 10; the newest (at 2) at 12.
    assert_eq!(k.run(at(3), &p, 1), [1, 3, 0, 7, 9]);
    assert_eq!(k.run(at(3), &p, 2), [1, 3, 0, 8, 9]);
    assert_eq!(k.run(at(3), &p, 4), [1, 3, 0, -1, 9], "never admittable");
    // An action logged at t counts while t > now − window: gone at exactly 10.
    assert_eq!(k.run(at(10), &p, 1), [0, 3, 0, -1, 10]);
    assert_eq!(k.expires_at, Some(Instant::from_nanos(at(20))));
}

#[test]
fn exact_layout_is_a_header_and_sorted_instants() {
    let p = exact(2, secs(10));
    let mut k = Key::default();
    k.run(at(0), &p, 1);
    k.run(at(1), &p, 1);
    assert_eq!(k.value.as_ref().unwrap()[..8], [1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(k.log(), (0, vec![at(0), at(1)]));
    // At 10 the first action has left: the head moves past it, and the new one is appended.
    k.run(at(10), &p, 1);
    assert_eq!(k.log(), (1, vec![at(0), at(1), at(10)]));
    k.run(at(11) + 500 * MS, &p, 1);
    assert_eq!(k.log(), (2, vec![at(0), at(1), at(10), at(11) + 500 * MS]));
    // At 20.5 three would be dead and two live: the call rewrites the log without the dead.
    k.run(at(20) + 500 * MS, &p, 1);
    assert_eq!(k.log(), (0, vec![at(11) + 500 * MS, at(20) + 500 * MS]));
}

#[test]
fn exact_quantities_log_one_entry_per_unit() {
    let p = exact(10, secs(10));
    let mut k = Key::default();
    assert_eq!(k.run(at(0), &p, 4), [0, 10, 6, -1, 10]);
    assert_eq!(k.run(at(5), &p, 6), [0, 10, 0, -1, 10]);
    assert_eq!(k.len(), 8 + 8 * 10);
    // Five units must leave: the four at 0 and one at 5.
    assert_eq!(k.run(at(6), &p, 5), [1, 10, 0, 9, 9]);
}

#[test]
fn exact_peek_and_refund() {
    let p = exact(5, secs(10));
    let mut k = Key::default();
    assert_eq!(k.run(at(0), &p, 0), [0, 5, 5, -1, 0]);
    assert_eq!(k.run(at(0), &p, -2), [0, 5, 5, -1, 0]);
    assert!(k.value.is_none(), "neither a peek nor a refund creates a key");
    k.run(at(0), &p, 2);
    k.run(at(4), &p, 2);
    let before = k.clone();
    assert_eq!(k.run(at(5), &p, 0), [0, 5, 1, -1, 9]);
    assert_eq!((&k.value, k.expires_at), (&before.value, before.expires_at), "a peek changes nothing");
    // A refund gives back the newest actions first.
    assert_eq!(k.run(at(5), &p, -3), [0, 5, 4, -1, 5]);
    assert_eq!(k.log(), (0, vec![at(0)]));
    assert_eq!(k.expires_at, Some(Instant::from_nanos(at(10))));
    assert_eq!(k.run(at(5), &p, i64::MIN), [0, 5, 5, -1, 0]);
    assert!(k.value.is_none(), "a refund to full deletes the key");
}

#[test]
fn exact_replies_in_milliseconds() {
    let p = exact(1, Nanos::new(1500 * MS).unwrap());
    let mut k = Key::default();
    k.run(T0 + 1, &p, 1);
    let r = k.call(T0 + 200 * MS, &p, 1).unwrap();
    assert_eq!(r.to_array(Unit::Millis), [1, 1, 0, 1301, 1301]);
    assert_eq!(r.to_array(Unit::Seconds), [1, 1, 0, 2, 2]);
}

#[test]
fn exact_log_stamped_in_the_future_counts_as_logged_now() {
    let p = exact(3, secs(10));
    let mut k = Key::default();
    k.run(at(100), &p, 1);
    // The clock steps back 50 s: the future action counts as logged now, for one window, and
    // the write rewrites it so the log stays sorted.
    assert_eq!(k.run(at(50), &p, 0), [0, 3, 2, -1, 10], "a peek sees it as logged now");
    assert_eq!(k.log(), (0, vec![at(100)]), "a peek writes nothing");
    assert_eq!(k.run(at(50), &p, 1), [0, 3, 1, -1, 10]);
    assert_eq!(k.log(), (0, vec![at(50), at(50)]));
    assert_eq!(k.run(at(50), &p, 2), [1, 3, 1, 10, 10]);
    assert_eq!(k.run(at(60), &p, 3), [0, 3, 0, -1, 10], "recovered one window later");
}

#[test]
fn buckets_stamped_far_in_the_future_are_pulled_back() {
    let p = precise(3, secs(10), secs(5));
    let mut k = Key::default();
    k.run(at(1000), &p, 3);
    // A step back of ~1000 s: the counts still hold now, but leave within two windows.
    assert_eq!(k.run(at(1), &p, 1)[..3], [1, 3, 0]);
    let r = k.run(at(1), &p, 0);
    assert!(r[4] <= 10 + 10 + 5, "{r:?}");
    assert_eq!(k.run(at(1 + 25), &p, 3)[0], 0, "recovered");
}

#[test]
fn a_ring_stamped_at_the_dawn_of_time_starts_afresh() {
    // A hostile ring of the call's own parameters whose newest bucket is i64::MIN: the gap to
    // now must not be walked bucket by bucket (nor overflow).
    let p = precise(3, secs(10), secs(1));
    let mut ring = vec![2u8, 0, 0, 0, 0, 0, 0, 0];
    ring.extend_from_slice(&secs(1).as_nanos().to_le_bytes());
    ring.extend_from_slice(&i64::MIN.to_le_bytes());
    ring.extend_from_slice(&[0; 11 * 8]);
    let mut k = Key { value: Some(ring), expires_at: None };
    assert_eq!(k.run(at(0), &p, 1)[..3], [0, 3, 2]);
    assert_eq!(k.run(at(0), &p, 2)[..3], [0, 3, 0]);
}

fn precise(limit: i64, window: Nanos, precision: Nanos) -> Params {
    Params::new(limit, window, Some(precision)).unwrap()
}

#[test]
fn buckets_count_until_their_end_leaves() {
    // Buckets of 5 s in a 10 s window: three slots.
    let p = precise(3, secs(10), secs(5));
    let mut k = Key::default();
    assert_eq!(k.run(at(1), &p, 1), [0, 3, 2, -1, 14]);
    assert_eq!(k.len(), 24 + 3 * 8);
    assert_eq!(k.run(at(6), &p, 2), [0, 3, 0, -1, 14]);
    // Bucket [0, 5) counts while 5 > now − 10, so until 15.
    assert_eq!(k.run(at(14), &p, 1), [1, 3, 0, 1, 6]);
    assert_eq!(k.run(at(14), &p, 3), [1, 3, 0, 6, 6]);
    assert_eq!(k.run(at(14), &p, 4), [1, 3, 0, -1, 6]);
    assert_eq!(k.run(at(15), &p, 1), [0, 3, 0, -1, 15]);
    let v = k.value.clone().unwrap();
    assert_eq!(v[..8], [2, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(i64::from_le_bytes(v[8..16].try_into().unwrap()), 5 * NANOS_PER_SEC);
    let newest = T0 / (5 * NANOS_PER_SEC) + 3;
    assert_eq!(i64::from_le_bytes(v[16..24].try_into().unwrap()), newest);
    let slot = |k: i64| i64::from_le_bytes(v[24 + 8 * k.rem_euclid(3) as usize..][..8].try_into().unwrap());
    assert_eq!((slot(newest - 2), slot(newest - 1), slot(newest)), (2, 0, 1));
}

#[test]
fn buckets_peek_refund_and_idle_gaps() {
    let p = precise(4, secs(10), secs(2));
    let mut k = Key::default();
    k.run(at(0), &p, 2);
    k.run(at(3), &p, 2);
    let before = k.clone();
    assert_eq!(k.run(at(3), &p, 0), [0, 4, 0, -1, 11]);
    assert_eq!(k.value, before.value, "a peek changes nothing");
    assert_eq!(k.run(at(3), &p, -3), [0, 4, 3, -1, 9]);
    assert_eq!(k.expires_at, Some(Instant::from_nanos(at(12))));
    // After a gap longer than the ring, the ring starts over.
    assert_eq!(k.run(at(11), &p, 1), [0, 4, 2, -1, 11]);
    assert_eq!(k.run(at(40), &p, 4), [0, 4, 0, -1, 12]);
    assert_eq!(k.run(at(40), &p, -10), [0, 4, 4, -1, 0]);
    assert!(k.value.is_none());
}

#[test]
fn a_changed_precision_regroups_without_forgetting() {
    let mut k = Key::default();
    k.run(at(1), &precise(3, secs(10), secs(5)), 3);
    // Regrouped into 1 s buckets at the old bucket's last instant (4.999… s): counts until 15.
    let fine = precise(3, secs(10), secs(1));
    assert_eq!(k.run(at(12), &fine, 1), [1, 3, 0, 3, 3]);
    assert_eq!(k.run(at(15), &fine, 1), [0, 3, 2, -1, 11]);
    assert_eq!(k.len(), 24 + 11 * 8);
}

#[test]
fn switching_between_exact_and_buckets_is_invalid_state() {
    let mut k = Key::default();
    k.run(at(0), &exact(3, secs(10)), 1);
    assert_eq!(k.call(at(1), &precise(3, secs(10), secs(1)), 1), Err(Error::InvalidState("CL.WINDOW")));
    let mut k = Key::default();
    k.run(at(0), &precise(3, secs(10), secs(1)), 1);
    assert_eq!(k.call(at(1), &exact(3, secs(10)), 1), Err(Error::InvalidState("CL.WINDOW")));
}

#[test]
fn parameters_are_validated() {
    let range = |r: Result<Params>| match r {
        Err(Error::OutOfRange { name, .. }) => name,
        other => panic!("{other:?}"),
    };
    assert_eq!(range(Params::new(0, secs(1), None)), "limit");
    assert_eq!(range(Params::new(MAX_EXACT_LIMIT + 1, secs(1), None)), "limit");
    assert!(Params::new(MAX_EXACT_LIMIT + 1, secs(1), Some(secs(1))).is_ok());
    assert_eq!(range(Params::new(1, Nanos::ZERO, None)), "window");
    assert_eq!(range(Params::new(1, secs(1), Some(secs(2)))), "precision");
    assert_eq!(range(Params::new(1, secs(1), Some(Nanos::ZERO))), "precision");
    assert_eq!(range(Params::new(1, secs(100_001), Some(secs(1)))), "precision");
    assert!(Params::new(1, secs(10_000), Some(secs(1))).is_ok());
    assert_eq!(range(Params::new(1, Nanos::new(i64::MAX).unwrap(), None)), "window");
    let longest = Params::new(1, crate::time::MAX_DURATION, None).unwrap();
    assert!(decide(None, Instant::from_nanos(T0), &longest, 1).is_ok(), "the longest window decides");
}

#[test]
fn hostile_strings_are_invalid_state() {
    let p = exact(3, secs(10));
    let pb = precise(3, secs(10), secs(1));
    let now = Instant::from_nanos(T0);
    let mut bad_head = vec![1, 0, 0, 0, 2, 0, 0, 0];
    bad_head.extend_from_slice(&T0.to_le_bytes());
    for bad in [&b""[..], b"\x01", b"\x01\0\0\0\0\0\0", b"\x01\0\0\0\0\0\0\0\0", b"\x01\x01\0\0\0\0\0\0", b"12", b"\x03\0\0\0\0\0\0\0", &bad_head] {
        assert_eq!(decide(Some(bad), now, &p, 1), Err(INVALID), "{bad:?}");
    }
    let ring = |p: i64, slots: usize| {
        let mut v = vec![2, 0, 0, 0, 0, 0, 0, 0];
        v.extend_from_slice(&p.to_le_bytes());
        v.extend_from_slice(&0i64.to_le_bytes());
        v.resize(24 + 8 * slots, 0);
        v
    };
    for bad in [ring(0, 11), ring(-5, 11), ring(NANOS_PER_SEC, 0), ring(NANOS_PER_SEC, 100_002), ring(NANOS_PER_SEC, 11)[..30].to_vec()] {
        assert_eq!(decide(Some(&bad), now, &pb, 1), Err(INVALID));
    }
    let mut negative = ring(NANOS_PER_SEC, 11);
    negative[24..32].copy_from_slice(&(-1i64).to_le_bytes());
    let mut k = Key { value: Some(negative), expires_at: None };
    k.value.as_mut().unwrap()[16..24].copy_from_slice(&(T0 / NANOS_PER_SEC).to_le_bytes());
    assert_eq!(k.call(T0, &pb, 1), Err(INVALID));
}

/// No span of `window` holds more than `limit` of the admitted `(instant, units)`.
fn no_window_over_limit(admitted: &[(i64, i64)], window: i64, limit: i64) -> bool {
    admitted.iter().all(|&(start, _)| {
        admitted.iter().filter(|&&(t, _)| t >= start && t < start + window).map(|&(_, n)| n).sum::<i64>() <= limit
    })
}

/// Removes the newest `units` from the admitted list (a refund).
fn refund(admitted: &mut Vec<(i64, i64)>, mut units: i64) {
    while units > 0 {
        let Some(last) = admitted.last_mut() else { break };
        let taken = last.1.min(units);
        last.1 -= taken;
        units -= taken;
        if last.1 == 0 {
            admitted.pop();
        }
    }
}

fn sequence() -> impl Strategy<Value = Vec<(i64, i64)>> {
    proptest::collection::vec((prop_oneof![0i64..3 * MS, 0i64..30 * MS, Just(0)], prop_oneof![-3i64..6, 1i64..3]), 1..50)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    #[test]
    fn exact_matches_the_list_of_instants(limit in 1i64..8, window_ms in 1i64..40, calls in sequence()) {
        let p = exact(limit, Nanos::new(window_ms * MS).unwrap());
        let (mut key, mut model, mut now) = (Key::default(), Model::default(), T0 + 77);
        let mut admitted = Vec::new();
        for (step, q) in calls {
            now += step;
            let got = reply_i128(key.call(now, &p, q).unwrap());
            let want = model.call(now.into(), limit.into(), (window_ms * MS).into(), None, q.into());
            prop_assert_eq!(got, want, "at {} q {}", now - T0, q);
            if q > 0 && got[0] == 0 { admitted.push((now, q)) }
            if q < 0 { refund(&mut admitted, -q) }
            if key.value.is_some() {
                // The log's live entries are the model's, and it holds at most 16 B per live action.
                let (head, entries) = key.log();
                let live: Vec<i64> = entries[head as usize..].iter().copied().filter(|&t| t > now - window_ms * MS).collect();
                let want_live: Vec<i64> = model.log.iter().map(|&t| t as i64).filter(|&t| t > now - window_ms * MS).collect();
                prop_assert_eq!(&live, &want_live);
                if !live.is_empty() && q != 0 && got[0] == 0 {
                    prop_assert!(key.len() <= 8 + 16 * live.len(), "{} bytes for {} actions", key.len(), live.len());
                }
            }
        }
        prop_assert!(no_window_over_limit(&admitted, window_ms * MS, limit));
    }

    #[test]
    fn buckets_match_the_list_of_instants(limit in 1i64..8, window_ms in 1i64..40, precision_ms in 1i64..40, calls in sequence()) {
        let precision_ms = precision_ms.min(window_ms);
        let p = precise(limit, Nanos::new(window_ms * MS).unwrap(), Nanos::new(precision_ms * MS).unwrap());
        let (mut key, mut model, mut now) = (Key::default(), Model::default(), T0 + 77);
        let mut admitted = Vec::new();
        for (step, q) in calls {
            now += step;
            let got = reply_i128(key.call(now, &p, q).unwrap());
            let want = model.call(now.into(), limit.into(), (window_ms * MS).into(), Some((precision_ms * MS).into()), q.into());
            prop_assert_eq!(got, want, "at {} q {}", now - T0, q);
            if q > 0 && got[0] == 0 { admitted.push((now, q)) }
            if q < 0 { refund(&mut admitted, -q) }
            if key.value.is_some() {
                let slots = ((window_ms + precision_ms - 1) / precision_ms) as usize + 1;
                prop_assert_eq!(key.len(), 24 + 8 * slots);
            }
        }
        prop_assert!(no_window_over_limit(&admitted, window_ms * MS, limit));
    }

    /// Changing the precision between calls (a deployment in progress) never admits more
    /// than the limit in any window.
    #[test]
    fn regrouping_never_over_admits(
        limit in 1i64..8, window_ms in 1i64..40,
        calls in proptest::collection::vec((0i64..20 * MS, -2i64..5, 1i64..40), 1..40),
    ) {
        let window = Nanos::new(window_ms * MS).unwrap();
        let (mut key, mut now, mut admitted) = (Key::default(), T0 + 77, Vec::new());
        for (step, q, precision_ms) in calls {
            now += step;
            let p = precise(limit, window, Nanos::new(precision_ms.min(window_ms) * MS).unwrap());
            let r = key.call(now, &p, q).unwrap();
            if q > 0 && !r.limited { admitted.push((now, q)) }
            if q < 0 { refund(&mut admitted, -q) }
        }
        prop_assert!(no_window_over_limit(&admitted, window_ms * MS, limit));
    }

    /// A clock that jumps back and forth (state stamped in the future) neither panics nor
    /// admits more than a peek at the same instant says remains, and the instants the exact
    /// log records never hold more than `limit` in a window.
    #[test]
    fn a_clock_stepping_back_never_over_admits(
        limit in 1i64..6, window_ms in 1i64..40, precision_ms in proptest::option::of(1i64..40),
        calls in proptest::collection::vec((-40i64..40, -2i64..5), 1..40),
    ) {
        let window = Nanos::new(window_ms * MS).unwrap();
        let p = Params::new(limit, window, precision_ms.map(|ms| Nanos::new(ms.min(window_ms) * MS).unwrap())).unwrap();
        let (mut key, mut now) = (Key::default(), T0);
        for (jump_ms, q) in calls {
            now += jump_ms * MS;
            let mut probe = key.clone();
            let peek = probe.call(now, &p, 0).unwrap();
            let r = key.call(now, &p, q).unwrap();
            prop_assert!(r.remaining >= 0 && r.remaining <= limit);
            if q > 0 && !r.limited {
                prop_assert!(q <= peek.remaining);
                prop_assert_eq!(r.remaining, peek.remaining - q);
            }
        }
        if precision_ms.is_none() && key.value.is_some() {
            let (head, entries) = key.log();
            let logged: Vec<(i64, i64)> = entries[head as usize..].iter().map(|&t| (t, 1)).collect();
            prop_assert!(logged.windows(2).all(|w| w[0].0 <= w[1].0), "sorted");
            prop_assert!(no_window_over_limit(&logged, window_ms * MS, limit));
        }
    }

    /// Any bytes as stored state (with a plausible header half the time) decide without
    /// panicking: an error, or a reply within bounds.
    #[test]
    fn garbage_never_panics(
        version in prop_oneof![Just(1u8), Just(2u8), any::<u8>()], zeroed in any::<bool>(),
        body in proptest::collection::vec(any::<u8>(), 0..120), precision in proptest::option::of(1i64..20),
        now in prop_oneof![Just(T0), any::<i64>()], q in prop_oneof![-5i64..5, any::<i64>()],
    ) {
        let mut bytes = vec![version];
        if zeroed { bytes.extend_from_slice(&[0; 7]) }
        bytes.extend_from_slice(&body);
        let p = Params::new(5, Nanos::new(20 * MS).unwrap(), precision.map(|ms| Nanos::new(ms * MS).unwrap())).unwrap();
        if let Ok(d) = decide(Some(&bytes), Instant::from_nanos(now), &p, q) {
            prop_assert!(d.reply.remaining >= 0 && d.reply.remaining <= 5);
            if let Effect::Store { state, .. } = d.effect {
                let mut after = bytes.clone();
                state.apply(&mut after);
            }
        }
    }

    /// Parameters and instants near the 64-bit limits: an answer or `TooLarge`, never a
    /// panic.
    #[test]
    fn extremes_never_panic(
        limit in prop_oneof![1i64..4, 1i64..=MAX_EXACT_LIMIT], window in prop_oneof![1i64..100, 1i64..=i64::MAX],
        precision in proptest::option::of(prop_oneof![1i64..100, 1i64..=i64::MAX]),
        now in prop_oneof![any::<i64>(), (i64::MAX - 1000)..=i64::MAX, i64::MIN..(i64::MIN + 1000)],
        q in prop_oneof![-2i64..3, any::<i64>()],
    ) {
        let Ok(p) = Params::new(limit, Nanos::new(window).unwrap(), precision.map(|p| Nanos::new(p).unwrap())) else { return Ok(()) };
        let mut key = Key::default();
        for _ in 0..2 {
            match key.call(now, &p, q.min(3)) {
                Ok(r) => prop_assert!(r.remaining >= 0 && r.remaining <= limit),
                Err(e) => prop_assert_eq!(e, Error::TooLarge),
            }
        }
    }
}
