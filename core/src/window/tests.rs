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
        self.charge(now, p, q, Charge::Take)
    }

    fn charge(&mut self, now: i64, p: &Params, q: i64, charge: Charge) -> Result<Reply> {
        if self.expires_at.is_some_and(|e| now.div_euclid(MS) > e.ceil_millis()) {
            *self = Key::default();
        }
        let d = decide(self.value.as_deref(), Instant::from_nanos(now), p, q, charge)?;
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
    // A refund gives back the oldest actions first: the newest (at 4), and the expiry, stay.
    assert_eq!(k.run(at(5), &p, -3), [0, 5, 4, -1, 9]);
    assert_eq!(k.log(), (0, vec![at(4)]), "three dead entries and one live: compacted");
    assert_eq!(k.expires_at, Some(Instant::from_nanos(at(14))));
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
    // The oldest units go first: both of bucket [0, 2) and one of [2, 4), which stays newest.
    assert_eq!(k.run(at(3), &p, -3), [0, 4, 3, -1, 11]);
    assert_eq!(k.expires_at, Some(Instant::from_nanos(at(14))));
    // After a gap longer than the ring, the ring starts over.
    assert_eq!(k.run(at(11), &p, 1), [0, 4, 2, -1, 11]);
    assert_eq!(k.run(at(40), &p, 4), [0, 4, 0, -1, 12]);
    assert_eq!(k.run(at(40), &p, -10), [0, 4, 4, -1, 0]);
    assert!(k.value.is_none());
}

#[test]
fn a_limit_of_i64_max_denies_what_would_add_up_past_it() {
    let p = precise(i64::MAX, secs(10), secs(1));
    let mut key = Key::default();
    assert_eq!(key.run(at(0), &p, i64::MAX - 1)[..3], [0, i64::MAX, 1]);
    // Two more units would count past i64::MAX: denied until the first bucket leaves.
    assert_eq!(key.run(at(1), &p, 2), [1, i64::MAX, 1, 10, 10]);
    assert_eq!(key.run(at(1), &p, 1), [0, i64::MAX, 0, -1, 11]);
    let mut key = Key::default();
    assert_eq!(key.run(at(0), &p, i64::MAX), [0, i64::MAX, 0, -1, 11]);
    assert_eq!(key.run(at(0), &p, i64::MAX), [1, i64::MAX, 0, 11, 11], "retry when all of them have left");
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
fn a_refund_advances_head_only() {
    // The case: A at 0, B at 500 ms, then A's work did not happen. Refunding the
    // newest entry (B's) let C at 560 and D at 1010 in: B, C and D within 510 ms against 2
    // per 1000 ms. The oldest entry goes instead, by a 4-byte edit of `head`.
    let p = exact(2, Nanos::new(1000 * MS).unwrap());
    let mut k = Key::default();
    k.run(T0, &p, 1);
    k.run(T0 + 500 * MS, &p, 1);
    let now = Instant::from_nanos(T0 + 550 * MS);
    let d = decide(k.value.as_deref(), now, &p, -1, Charge::Take).unwrap();
    let Effect::Store { state, expires_at } = &d.effect else { panic!("{:?}", d.effect) };
    assert_eq!(state.chunks, vec![(4, vec![1, 0, 0, 0])], "only head moves");
    assert_eq!(state.len, 8 + 2 * 8, "the length stays: an edit in place");
    assert_eq!(*expires_at, Instant::from_nanos(T0 + 1500 * MS), "the newest entry, and the expiry, stay");
    assert_eq!(d.reply.to_array(Unit::Millis), [0, 2, 1, -1, 950]);
    k.call(T0 + 550 * MS, &p, -1).unwrap();
    assert_eq!(k.log(), (1, vec![T0, T0 + 500 * MS]));
    assert_eq!(k.run(T0 + 560 * MS, &p, 1)[0], 0, "C");
    assert_eq!(k.call(T0 + 1010 * MS, &p, 1).unwrap().to_array(Unit::Millis), [1, 2, 0, 490, 550], "D waits for B");
}

#[test]
fn a_ring_refund_takes_the_oldest_bucket_first() {
    let p = precise(3, secs(10), secs(1));
    let mut k = Key::default();
    k.run(at(0), &p, 1);
    k.run(at(5), &p, 1);
    assert_eq!(k.run(at(6), &p, -1), [0, 3, 2, -1, 10], "the unit of bucket 0 went");
    assert_eq!(k.run(at(11), &p, 2), [0, 3, 0, -1, 11], "bucket 5 still counts, bucket 0 no longer");
    assert_eq!(k.run(at(11), &p, 1), [1, 3, 0, 5, 11]);
}

/// The live entries of an exact log, and the counts of a ring by bucket, as a test reads them.
fn ring_counts(value: &[u8]) -> (i64, Vec<(i64, i64)>) {
    assert_eq!(value[0], 2, "a ring");
    let p = i64::from_le_bytes(value[8..16].try_into().unwrap());
    let newest = i64::from_le_bytes(value[16..24].try_into().unwrap());
    let slots = (value.len() - 24) / 8;
    let counts = (0..slots as i64)
        .map(|i| newest - i)
        .map(|k| {
            (k, i64::from_le_bytes(value[24 + 8 * k.rem_euclid(slots as i64) as usize..][..8].try_into().unwrap()))
        })
        .filter(|&(_, c)| c > 0)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    (p, counts)
}

#[test]
fn adding_precision_puts_each_logged_action_in_its_bucket() {
    let mut k = Key::default();
    let plain = exact(5, secs(10));
    k.run(at(0), &plain, 1);
    k.run(at(3) + 400 * MS, &plain, 2);
    k.run(at(11), &plain, 1);
    // At 11 the action at 0 has left; the others go to buckets 3 and 11 (of 1 s).
    let fine = precise(5, secs(10), secs(1));
    let before = k.clone();
    assert_eq!(k.run(at(12), &fine, 0), [0, 5, 2, -1, 10], "a peek reads it converted");
    assert_eq!(k.value, before.value, "and writes nothing");
    assert_eq!(k.run(at(12), &fine, 1), [0, 5, 1, -1, 11]);
    let base = T0 / NANOS_PER_SEC;
    assert_eq!(
        ring_counts(k.value.as_ref().unwrap()),
        (NANOS_PER_SEC, vec![(base + 3, 2), (base + 11, 1), (base + 12, 1)])
    );
    // Bucket 3 counts until 14 (the exact entries until 13.4: never less).
    assert_eq!(k.run(at(13) + 500 * MS, &fine, 2), [1, 5, 1, 1, 10]);
    assert_eq!(k.run(at(14), &fine, 2), [0, 5, 1, -1, 11]);
}

#[test]
fn removing_precision_puts_each_bucket_at_its_last_instant() {
    let mut k = Key::default();
    let fine = precise(5, secs(10), secs(2));
    k.run(at(1), &fine, 2);
    k.run(at(5), &fine, 1);
    let plain = exact(5, secs(10));
    // Bucket [0, 2) becomes two entries at 2 s − 1 ns; bucket [4, 6) one at now (5.5 s), as
    // its last instant is still ahead.
    let now = at(5) + 500 * MS;
    assert_eq!(k.run(now, &plain, 1), [0, 5, 1, -1, 10]);
    assert_eq!(k.log(), (0, vec![at(2) - 1, at(2) - 1, now, now]));
    // The first two count while 2 s − 1 ns > now − 10 s: as long as any action of their
    // bucket could have.
    assert_eq!(k.call(at(12) - 2, &plain, 0).unwrap().remaining, 1);
    assert_eq!(k.call(at(12) - 1, &plain, 0).unwrap().remaining, 3);
}

#[test]
fn removing_precision_keeps_the_newest_limit_plus_one_units() {
    // A ring may hold more than an exact log's limit (its limit is unbounded, or a debit): only
    // the newest `limit + 1` units become entries, and the log denies until the oldest kept
    // leaves.
    let mut k = Key::default();
    k.run(at(0), &precise(1_000_000, secs(10), secs(1)), 1_000);
    k.run(at(4), &precise(1_000_000, secs(10), secs(1)), 1_000);
    let plain = exact(3, secs(10));
    // Over its limit, the log refuses a check (a debt stays a debt), as the ring does.
    assert_eq!(k.run(at(5), &plain, 0), [1, 3, 0, 10, 10]);
    assert_eq!(k.run(at(5), &plain, 1), [1, 3, 0, 10, 10]);
    assert_eq!(k.value.as_ref().unwrap()[0], 2, "a denial writes nothing");
    // They are the units of bucket [4 s, 5 s), at its last instant: gone at 15 s − 1 ns.
    assert_eq!(k.call(at(15) - 2, &plain, 1).unwrap().to_array(Unit::Millis), [1, 3, 0, 1, 1]);
    assert_eq!(k.run(at(15) - 1, &plain, 1), [0, 3, 2, -1, 10]);
    assert_eq!(k.log(), (0, vec![at(15) - 1]));
}

#[test]
fn a_refund_without_precision_gives_back_out_of_the_rings_whole_count() {
    // 100 units debited into a ring (limit 5), then 3 refunded by a call without PRECISION:
    // 97 still count (a log of the newest `limit + 1` would have given back all but 3).
    // (at(4) starts a bucket of 6 s: it ends at at(10), and leaves the window at at(70).)
    let mut k = Key::default();
    let fine = precise(5, secs(60), secs(6));
    assert_eq!(k.charge(at(4), &fine, 100, Charge::Debit).unwrap().to_array(Unit::Seconds), [1, 5, 0, -1, 66]);
    let plain = exact(5, secs(60));
    assert_eq!(k.run(at(5), &plain, -3), [0, 5, 0, -1, 65]);
    assert_eq!(ring_counts(k.value.as_ref().unwrap()), (6 * NANOS_PER_SEC, vec![(at(4) / (6 * NANOS_PER_SEC), 97)]));
    // (Read as a log, the bucket not over yet is at now: see the conversion.)
    assert_eq!(k.run(at(6), &plain, 0), [1, 5, 0, 60, 60], "a check is refused: 97 count");
    // Refunds down to the limit, then a take: converted to a log at once, as before.
    assert_eq!(k.run(at(6), &plain, -92), [0, 5, 0, -1, 64]);
    assert_eq!(k.run(at(6), &plain, -1), [0, 5, 1, -1, 64]);
    assert_eq!(k.run(at(7), &plain, 1), [0, 5, 0, -1, 60]);
    assert_eq!(k.log(), (0, vec![at(7); 5]));
    // The same against the reference model, call for call.
    let mut model = Model::default();
    let (w, p6) = (i128::from(60 * NANOS_PER_SEC), Some(i128::from(6 * NANOS_PER_SEC)));
    model.call(at(4).into(), 5, w, p6, 100, true);
    assert_eq!(model.call(at(5).into(), 5, w, None, -3, false)[..4], [0, 5, 0, -1]);
    assert_eq!(model.call(at(6).into(), 5, w, None, 0, false)[..3], [1, 5, 0]);
}

#[test]
fn a_refund_on_a_log_read_with_precision_gives_back_out_of_every_unit() {
    let mut k = Key::default();
    let plain = exact(5, secs(60));
    assert_eq!(k.charge(at(0), &plain, 100, Charge::Debit).unwrap().to_array(Unit::Seconds), [1, 5, 0, -1, 60]);
    let fine = precise(5, secs(60), secs(6));
    assert_eq!(k.run(at(1), &fine, -3)[..4], [0, 5, 0, -1]);
    assert_eq!(ring_counts(k.value.as_ref().unwrap()).1.iter().map(|&(_, c)| c).sum::<i64>(), 97);
    assert_eq!(k.run(at(2), &fine, 0)[..3], [1, 5, 0], "a check is refused: 97 count");
}

#[test]
fn a_refund_on_a_ring_spanning_too_many_buckets_coarsens_without_losing_a_unit() {
    // A ring of 1 s buckets read without PRECISION by a call of a million-second window: its
    // buckets would number a million, so the refund decides in 10 s ones (a multiple of 1 s).
    let mut k = Key::default();
    k.charge(at(0), &precise(5, secs(60), secs(1)), 50, Charge::Debit).unwrap();
    k.charge(at(30), &precise(5, secs(60), secs(1)), 50, Charge::Debit).unwrap();
    let wide = exact(5, secs(1_000_000));
    assert_eq!(k.run(at(31), &wide, -1)[..4], [0, 5, 0, -1]);
    let (p, counts) = ring_counts(k.value.as_ref().unwrap());
    assert_eq!(p, 10 * NANOS_PER_SEC);
    assert_eq!(counts.iter().map(|&(_, c)| c).sum::<i64>(), 99);
    assert_eq!(k.value.as_ref().unwrap().len(), 24 + 8 * 100_001);
}

#[test]
fn debits_never_pile_an_exact_log_past_twice_the_cap() {
    let mut k = Key::default();
    let p = exact(5, secs(60));
    let debit = |k: &mut Key, now, q| k.charge(now, &p, q, Charge::Debit);
    assert!(debit(&mut k, at(0), MAX_EXACT_LIMIT).unwrap().limited);
    assert!(debit(&mut k, at(1), MAX_EXACT_LIMIT - 1).unwrap().limited);
    let before = k.clone();
    assert_eq!(debit(&mut k, at(2), 2), Err(Error::DebitTooDeep(2 * MAX_EXACT_LIMIT)));
    assert_eq!(k.value, before.value, "nothing written");
    assert!(debit(&mut k, at(2), 1).unwrap().limited, "up to the bound");
    assert_eq!(debit(&mut k, at(2), 1), Err(Error::DebitTooDeep(2 * MAX_EXACT_LIMIT)));
    // Once the oldest have left the window, debits count again.
    assert!(debit(&mut k, at(60) + 1, 7).unwrap().limited);
    // A check and a refund are never refused so.
    assert_eq!(k.run(at(60) + 1, &p, 0)[0], 1);
    assert_eq!(k.run(at(60) + 1, &p, -1)[0], 0);
}

#[test]
fn a_conversion_of_state_stamped_ahead_is_stored_even_denied() {
    // Stamped an hour ahead (the clock stepped back), full: whichever form reads it counts
    // its units as of now, and a denied call stores that, so the key goes one window later.
    let plain = exact(2, secs(10));
    let fine = precise(2, secs(10), secs(1));
    for (first, then) in [(plain, fine), (fine, plain)] {
        let mut k = Key::default();
        k.run(at(3600), &first, 2);
        let r = k.run(at(0), &then, 1);
        assert!(r[..3] == [1, 2, 0] && r[3] <= 11, "{then:?}: {r:?}");
        assert!(k.expires_at.unwrap() <= Instant::from_nanos(at(11)), "stored pulled back: {:?}", k.expires_at);
        assert_eq!(k.run(at(11), &then, 2)[..3], [0, 2, 0], "recovered");
    }
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
    assert!(decide(None, Instant::from_nanos(T0), &longest, 1, Charge::Take).is_ok(), "the longest window decides");
}

#[test]
fn hostile_strings_are_invalid_state() {
    let p = exact(3, secs(10));
    let pb = precise(3, secs(10), secs(1));
    let now = Instant::from_nanos(T0);
    let mut bad_head = vec![1, 0, 0, 0, 2, 0, 0, 0];
    bad_head.extend_from_slice(&T0.to_le_bytes());
    for bad in [
        &b""[..],
        b"\x01",
        b"\x01\0\0\0\0\0\0",
        b"\x01\0\0\0\0\0\0\0\0",
        b"\x01\x01\0\0\0\0\0\0",
        b"12",
        b"\x03\0\0\0\0\0\0\0",
        &bad_head,
    ] {
        assert_eq!(decide(Some(bad), now, &p, 1, Charge::Take), Err(INVALID), "{bad:?}");
    }
    let ring = |p: i64, slots: usize| {
        let mut v = vec![2, 0, 0, 0, 0, 0, 0, 0];
        v.extend_from_slice(&p.to_le_bytes());
        v.extend_from_slice(&0i64.to_le_bytes());
        v.resize(24 + 8 * slots, 0);
        v
    };
    for bad in [
        ring(0, 11),
        ring(-5, 11),
        ring(NANOS_PER_SEC, 0),
        ring(NANOS_PER_SEC, 100_002),
        ring(NANOS_PER_SEC, 11)[..30].to_vec(),
    ] {
        assert_eq!(decide(Some(&bad), now, &pb, 1, Charge::Take), Err(INVALID));
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

/// The real actions of a client that refunds only work that did not happen: the instants of
/// the units it was admitted and has not refunded, ascending.
#[derive(Debug, Default)]
struct Real(Vec<i64>);

impl Real {
    fn admitted(&mut self, now: i64, q: i64) {
        self.0.extend(std::iter::repeat_n(now, q as usize));
    }

    /// Removes up to `n` real actions still inside the window at `now`, chosen by `pick`
    /// (the oldest, the newest, or spread among them): how many it removed. A refund always
    /// stands for real actions, and only ones that still count.
    fn refund(&mut self, now: i64, window: i64, n: i64, pick: u8) -> i64 {
        let mut taken = 0;
        while taken < n {
            let live = self.0.partition_point(|&t| t <= now - window);
            let count = self.0.len() - live;
            if count == 0 {
                break;
            }
            let i = match pick % 3 {
                0 => live,
                1 => self.0.len() - 1,
                _ => live + (usize::from(pick) * 7 + taken as usize * 3) % count,
            };
            self.0.remove(i);
            taken += 1;
        }
        taken
    }

    fn never_over(&self, window: i64, limit: i64) -> bool {
        let admitted: Vec<(i64, i64)> = self.0.iter().map(|&t| (t, 1)).collect();
        no_window_over_limit(&admitted, window, limit)
    }
}

/// Calls: a time step, a quantity (negative: refund that many real actions), and how the
/// client picks the actions it refunds.
fn sequence() -> impl Strategy<Value = Vec<(i64, i64, u8)>> {
    proptest::collection::vec(
        (prop_oneof![0i64..3 * MS, 0i64..30 * MS, Just(0)], prop_oneof![-3i64..6, 1i64..3], any::<u8>()),
        1..50,
    )
}

/// Runs `calls` with parameters chosen per call by `params` (from the call's index and
/// pick), checking every reply against the reference model and the reply bounds `bound`
/// (`None`: the parameters change, no bound), and returns the real actions.
fn run_real(
    calls: &[(i64, i64, u8)],
    window: i64,
    params: impl Fn(usize, u8) -> Params,
    bound: Option<i64>,
) -> std::result::Result<(Key, Real), TestCaseError> {
    let (mut key, mut model, mut real, mut now) = (Key::default(), Model::default(), Real::default(), T0 + 77);
    for (i, &(step, q, pick)) in calls.iter().enumerate() {
        now += step;
        let p = params(i, pick);
        let q = if q < 0 { -real.refund(now, window, -q, pick) } else { q };
        if q == 0 && calls[i].1 < 0 {
            continue; // nothing real to refund
        }
        let got = reply_i128(key.call(now, &p, q).unwrap());
        let precision = p.precision().map(|p| i128::from(p.as_nanos()));
        let want = model.call(now.into(), p.limit().into(), window.into(), precision, q.into(), false);
        prop_assert_eq!(got, want, "call {} at {} q {} precision {:?}", i, now - T0, q, precision);
        prop_assert_eq!(key.expires_at.map(|e| i128::from(e.as_nanos())), model.expires_at, "the key's expiry");
        if q > 0 && got[0] == 0 {
            real.admitted(now, q);
        }
        if let Some(bound) = bound {
            prop_assert!(got[3] <= i128::from(bound) && got[4] <= i128::from(bound), "{:?} beyond {}", got, bound);
        }
    }
    Ok((key, real))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// Whichever real actions a client refunds, no span of the window ever holds more than
    /// `limit` real actions; every reply is the model's and within one window.
    #[test]
    fn exact_never_admits_more_than_the_limit(limit in 1i64..8, window_ms in 1i64..40, calls in sequence()) {
        let window = window_ms * MS;
        let p = exact(limit, Nanos::new(window).unwrap());
        let (key, real) = run_real(&calls, window, |_, _| p, Some(window))?;
        prop_assert!(real.never_over(window, limit), "{:?}", real);
        if key.value.is_some() {
            // The log's live entries are the model's, and it holds at most 16 B per live action.
            let (head, entries) = key.log();
            let live = entries.len() - head as usize;
            prop_assert!(key.len() <= 8 + 16 * live.max(1), "{} bytes for {} entries", key.len(), live);
        }
    }

    /// The same with `PRECISION`: replies within one window and one bucket.
    #[test]
    fn buckets_never_admit_more_than_the_limit(limit in 1i64..8, window_ms in 1i64..40, precision_ms in 1i64..40, calls in sequence()) {
        let (window, precision) = (window_ms * MS, precision_ms.min(window_ms) * MS);
        let p = precise(limit, Nanos::new(window).unwrap(), Nanos::new(precision).unwrap());
        let (key, real) = run_real(&calls, window, |_, _| p, Some(window + precision))?;
        prop_assert!(real.never_over(window, limit), "{:?}", real);
        if key.value.is_some() {
            let slots = ((window_ms + precision_ms.min(window_ms) - 1) / precision_ms.min(window_ms)) as usize + 1;
            prop_assert_eq!(key.len(), 24 + 8 * slots);
        }
    }

    /// A rolling deploy: calls alternate, at random, between the exact form and two
    /// precisions. Every conversion is the model's, and no span of the window ever holds
    /// more than `limit` real actions.
    #[test]
    fn switching_forms_never_admits_more_than_the_limit(
        limit in 1i64..8, window_ms in 1i64..40, p1 in 1i64..40, p2 in 1i64..40, calls in sequence(),
    ) {
        let window = window_ms * MS;
        let forms = [None, Some(p1.min(window_ms) * MS), Some(p2.min(window_ms) * MS)];
        let params = |i: usize, pick: u8| {
            let form = forms[(i + usize::from(pick / 3)) % 3];
            Params::new(limit, Nanos::new(window).unwrap(), form.map(|p| Nanos::new(p).unwrap())).unwrap()
        };
        let (_, real) = run_real(&calls, window, params, None)?;
        prop_assert!(real.never_over(window, limit), "{:?}", real);
    }

    /// Changing the precision between calls (a deployment in progress) never admits more
    /// than the limit in any window.
    #[test]
    fn regrouping_never_over_admits(
        limit in 1i64..8, window_ms in 1i64..40,
        calls in proptest::collection::vec((0i64..20 * MS, -2i64..5, 1i64..40, any::<u8>()), 1..40),
    ) {
        let window = window_ms * MS;
        let (mut key, mut now, mut real) = (Key::default(), T0 + 77, Real::default());
        for (step, q, precision_ms, pick) in calls {
            now += step;
            let p = precise(limit, Nanos::new(window).unwrap(), Nanos::new(precision_ms.min(window_ms) * MS).unwrap());
            let q = if q < 0 { -real.refund(now, window, -q, pick) } else { q };
            let r = key.call(now, &p, q).unwrap();
            if q > 0 && !r.limited { real.admitted(now, q) }
        }
        prop_assert!(real.never_over(window, limit));
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
        if let Ok(d) = decide(Some(&bytes), Instant::from_nanos(now), &p, q, Charge::Take) {
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
