use super::*;
use crate::reference::lease::Model;
use crate::time::NANOS_PER_SEC;
use proptest::prelude::*;

const T0: i64 = 1_700_000_000 * NANOS_PER_SEC;
const MS: i64 = NANOS_PER_MILLI;

/// A sorted set as Redis keeps one (by score, then member), with a key expiry, and a count of
/// the members a call visits.
#[derive(Debug, Clone, Default)]
struct Fake {
    members: Vec<(Vec<u8>, f64)>,
    /// The key's expiry in ms (Redis removes the key once its ms clock is past it).
    expires_ms: Option<i64>,
    id: Vec<u8>,
    /// The positions of the cursor's part, in its order, and where it is.
    cursor: Option<(Vec<usize>, usize)>,
    visits: usize,
}

impl Fake {
    fn sort(&mut self) {
        self.members.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    }
    /// The member under the cursor (a read, counted), `None` past its part.
    fn next_in_part(&mut self) -> Result<Option<(Vec<u8>, f64)>> {
        let Some((part, at)) = &self.cursor else { return Ok(None) };
        let i = part.get(*at).copied();
        Ok(i.map(|i| {
            self.visits += 1;
            self.members[i].clone()
        }))
    }
    /// Redis's own expiry of the key, before a call at `now`.
    fn expire(&mut self, now: i64) {
        if self.expires_ms.is_some_and(|at| now.div_euclid(MS) > at) {
            *self = Fake::default();
        }
    }
    fn remove(&mut self, id: &[u8]) {
        self.members.retain(|(m, _)| m != id);
    }
    /// Applies a call's change, as the module does.
    fn apply(&mut self, change: Change, expired: &[Vec<u8>]) {
        let prune = |f: &mut Fake| expired.iter().for_each(|m| f.remove(m));
        let id = self.id.clone();
        match change {
            Change::Prune => prune(self),
            Change::Clear => *self = Fake::default(),
            Change::Replace { expires_ms } => {
                self.members = vec![(id, expires_ms as f64)];
                self.expires_ms = Some(expires_ms);
            }
            Change::Hold { expires_ms, key_expires_ms } => {
                prune(self);
                self.remove(&id);
                self.members.push((id, expires_ms as f64));
                self.expires_ms = Some(key_expires_ms);
            }
            Change::Remove { key_expires_ms } => {
                prune(self);
                self.remove(&id);
                self.expires_ms = key_expires_ms.or(self.expires_ms);
            }
        }
        self.sort();
        if self.members.is_empty() {
            *self = Fake::default(); // Redis deletes an emptied set
        }
    }
    fn live(&self, now: i64) -> std::collections::BTreeMap<Vec<u8>, i128> {
        self.members
            .iter()
            .filter(|(_, s)| *s as i128 * MS as i128 > i128::from(now))
            .map(|(m, s)| (m.clone(), *s as i128 * MS as i128))
            .collect()
    }
}

impl Set for Fake {
    type Member = Vec<u8>;
    fn members(&self) -> usize {
        self.members.len()
    }
    fn id_score(&mut self) -> Result<Option<f64>> {
        self.visits += 1;
        Ok(self.members.iter().find(|(m, _)| *m == self.id).map(|(_, s)| *s))
    }
    fn start(&mut self, from: From, threshold: f64) -> Result<Option<(Vec<u8>, f64)>> {
        let part: Vec<usize> =
            (0..self.members.len()).filter(|&i| (self.members[i].1 > threshold) == (from != From::Expired)).collect();
        let part = if from == From::Latest { part.into_iter().rev().collect() } else { part };
        self.cursor = Some((part, 0));
        self.next_in_part()
    }
    fn next(&mut self) -> Result<Option<(Vec<u8>, f64)>> {
        match &mut self.cursor {
            Some((_, at)) => *at += 1,
            None => return Ok(None),
        }
        self.next_in_part()
    }
    fn is_id(&self, member: &Vec<u8>) -> bool {
        *member == self.id
    }
    fn member_len(&self, member: &Vec<u8>) -> usize {
        member.len()
    }
}

/// One CL.ACQUIRE through the fake, as the module runs it.
fn acquire_on(f: &mut Fake, now: i64, limit: i64, lease_ms: i64, id: &[u8]) -> Result<[i64; 5]> {
    f.expire(now);
    f.id = id.to_vec();
    let scan = scan(f, Instant::from_nanos(now), limit)?;
    let out = acquire(&scan.view, Instant::from_nanos(now), limit, Nanos::new(lease_ms * MS).unwrap())?;
    f.apply(out.effect, &scan.expired);
    Ok(out.reply.to_array(Unit::Millis))
}

fn release_on(f: &mut Fake, now: i64, id: &[u8]) -> Result<bool> {
    f.expire(now);
    f.id = id.to_vec();
    let scan = scan(f, Instant::from_nanos(now), 1)?;
    let out = release(&scan.view);
    f.apply(out.effect, &scan.expired);
    Ok(out.reply)
}

#[test]
fn parses_and_bounds_its_arguments() {
    let words = |s: &'static str| s.split_whitespace().map(str::as_bytes).collect::<Vec<_>>();
    let a = Acquire::parse(&words("exports:t7 20 300 job-123")).unwrap();
    assert_eq!(
        (a.key, a.limit, a.lease.as_nanos(), a.id, a.unit),
        (&b"exports:t7"[..], 20, 300 * NANOS_PER_SEC, &b"job-123"[..], Unit::Seconds)
    );
    let a = Acquire::parse(&words("k 1 1500 id MS")).unwrap();
    assert_eq!((a.lease.as_nanos(), a.unit), (1500 * MS, Unit::Millis));
    let err = |s: &'static str| Acquire::parse(&words(s)).unwrap_err().to_string();
    assert_eq!(err("k 1 1"), "ERR wrong number of arguments for 'cl.acquire' command");
    assert_eq!(err("k 1 1 id MS SHADOW x"), "ERR wrong number of arguments for 'cl.acquire' command");
    assert_eq!(err("k 1 1 id MS x"), "ERR syntax error");
    assert_eq!(err("k 1 1 id 5"), "ERR syntax error");
    assert_eq!(err("k 1 1 id MX"), "ERR syntax error");
    assert_eq!(err("k x 1 id"), "ERR value is not an integer or out of range");
    assert_eq!(err("k 1 1.5 id"), "ERR value is not an integer or out of range");
    assert_eq!(err("k 0 1 id"), "ERR limit must be an integer from 1 to 10000");
    assert_eq!(err("k 10001 1 id"), "ERR limit must be an integer from 1 to 10000");
    assert_eq!(err("k 1 0 id"), "ERR lease must be an integer from 1 to 1000000000 (seconds)");
    assert_eq!(err("k 1 1000000000001 id MS"), "ERR lease must be an integer from 1 to 1000000000000 (milliseconds)");
    let long = vec![b'x'; MAX_ID + 1];
    let args: Vec<&[u8]> = vec![b"k", b"1", b"1", &long];
    assert_eq!(Acquire::parse(&args).unwrap_err().to_string(), "ERR id must be a string of 1 to 128 bytes");
    assert_eq!(
        Acquire::parse(&[b"k", b"1", b"1", b""]).unwrap_err().to_string(),
        "ERR id must be a string of 1 to 128 bytes"
    );
    assert!(
        Acquire::parse(&[b"k", b"10000", b"1000000000", &long[..MAX_ID]]).is_ok(),
        "the stated maxima are accepted"
    );
    assert_eq!(Release::parse(&words("k id")).unwrap(), Release { key: b"k", id: b"id" });
    assert_eq!(Release::parse(&words("k")).unwrap_err(), Error::WrongArity("cl.release"));
    assert_eq!(Release::parse(&words("k id MS")).unwrap_err(), Error::WrongArity("cl.release"));
    assert_eq!(Release::parse(&[b"k", &long]).unwrap_err().to_string(), "ERR id must be a string of 1 to 128 bytes");
}

#[test]
fn exports_example() {
    // At most 2 exports at once, leases of 300 ms.
    let mut f = Fake::default();
    assert_eq!(acquire_on(&mut f, T0, 2, 300, b"job-1").unwrap(), [0, 2, 1, -1, 300]);
    assert_eq!(acquire_on(&mut f, T0 + 100 * MS, 2, 300, b"job-2").unwrap(), [0, 2, 0, -1, 300]);
    // A third is refused until job-1's lease ends (in 150 ms); every lease ends in 350 ms.
    assert_eq!(acquire_on(&mut f, T0 + 150 * MS, 2, 300, b"job-3").unwrap(), [1, 2, 0, 150, 250]);
    // job-1 renews (idempotent by id): still two holders, now until 500 ms.
    assert_eq!(acquire_on(&mut f, T0 + 200 * MS, 2, 300, b"job-1").unwrap(), [0, 2, 0, -1, 300]);
    assert_eq!(f.expires_ms, Some(T0 / MS + 500), "the key expires with its latest lease");
    // job-2 finishes and releases; a second release is a no-op.
    assert!(release_on(&mut f, T0 + 250 * MS, b"job-2").unwrap());
    assert!(!release_on(&mut f, T0 + 250 * MS, b"job-2").unwrap());
    assert_eq!(acquire_on(&mut f, T0 + 250 * MS, 2, 300, b"job-3").unwrap(), [0, 2, 0, -1, 300]);
    // job-1 crashes: its lease ends at 500 ms, and its slot frees by itself.
    assert_eq!(acquire_on(&mut f, T0 + 499 * MS, 2, 300, b"job-4").unwrap()[..2], [1, 2]);
    assert_eq!(acquire_on(&mut f, T0 + 500 * MS, 2, 300, b"job-4").unwrap(), [0, 2, 0, -1, 300]);
    assert_eq!(f.members.len(), 2, "the expired lease was removed by the call that found it");
    // The last holders release: the key goes.
    assert!(release_on(&mut f, T0 + 540 * MS, b"job-3").unwrap());
    assert_eq!(f.expires_ms, Some(T0 / MS + 800));
    assert!(release_on(&mut f, T0 + 540 * MS, b"job-4").unwrap());
    assert!(f.members.is_empty() && f.expires_ms.is_none());
}

#[test]
fn a_lowered_limit_waits_for_enough_leases_to_end() {
    let mut f = Fake::default();
    for (i, id) in [b"a", b"b", b"c", b"d"].iter().enumerate() {
        acquire_on(&mut f, T0 + i as i64 * 10 * MS, 10, 100, *id).unwrap();
    }
    // Four live (ending at 100, 110, 120, 130 ms); with limit 2, two must end first: at 120 ms.
    assert_eq!(acquire_on(&mut f, T0 + 50 * MS, 2, 100, b"e").unwrap(), [1, 2, 0, 70, 80]);
    // A holder still renews.
    assert_eq!(acquire_on(&mut f, T0 + 50 * MS, 2, 100, b"a").unwrap(), [0, 2, 0, -1, 100]);
}

#[test]
fn a_set_whose_leases_all_ended_is_read_then_replaced_or_deleted_at_once() {
    let mut f = Fake::default();
    for i in 0..200 {
        acquire_on(&mut f, T0, 1000, 50, format!("w{i}").as_bytes()).unwrap();
    }
    assert_eq!(f.members.len(), 200);
    f.expires_ms = None; // even a key that lost its expiry (PERSIST)
    f.visits = 0;
    assert_eq!(acquire_on(&mut f, T0 + 60 * MS, 1000, 50, b"new").unwrap(), [0, 1000, 999, -1, 50]);
    assert_eq!(f.members.len(), 1, "DEL, then the one lease");
    assert!(f.visits <= 200 + 2, "each member read once before the DEL: {} visits", f.visits);
    let mut g = Fake {
        members: (0..100).map(|i| (format!("w{i}").into_bytes(), (T0 / MS) as f64)).collect(),
        ..Fake::default()
    };
    g.sort();
    assert!(!release_on(&mut g, T0 + MS, b"w1").unwrap());
    assert!(g.members.is_empty(), "a release that finds only expired leases deletes the key");
}

#[test]
fn a_set_too_large_to_read_whole_is_pruned_a_little_at_a_time() {
    // More members than these commands make alone: a call never reads them all.
    let expired = |n: usize| (0..n).map(|i| (format!("w{i:05}").into_bytes(), (T0 / MS) as f64)).collect::<Vec<_>>();
    let n = READ_WHOLE + 100;
    let mut f = Fake { members: expired(n), expires_ms: Some(T0 / MS + 5000), ..Fake::default() };
    f.sort();
    assert_eq!(acquire_on(&mut f, T0 + MS, 5, 100, b"new").unwrap(), [0, 5, 4, -1, 100]);
    assert!(f.visits <= PRUNE + 4, "{} visits", f.visits);
    assert_eq!(f.members.len(), n - PRUNE + 1, "32 expired removed, the new lease added");
    f.visits = 0;
    let expiry = f.expires_ms;
    assert!(release_on(&mut f, T0 + MS, b"new").unwrap());
    assert!(f.visits <= PRUNE + 4, "{} visits", f.visits);
    assert_eq!(f.members.len(), n - 2 * PRUNE, "the lease and 32 more expired removed, not the set");
    assert_eq!(f.expires_ms, expiry, "the key's expiry stays");
    f.visits = 0;
    assert!(!release_on(&mut f, T0 + MS, b"new").unwrap());
    assert_eq!(f.members.len(), n - 3 * PRUNE);
    // Within READ_WHOLE, read whole and deleted.
    let mut g = Fake { members: expired(READ_WHOLE), ..Fake::default() };
    g.sort();
    assert!(!release_on(&mut g, T0 + MS, b"x").unwrap());
    assert!(g.members.is_empty() && g.visits <= READ_WHOLE + 2);
}

#[test]
fn a_set_holding_anything_but_leases_is_invalid_state_and_left_as_it_was() {
    let live = (T0 / MS + 1000) as f64;
    let id = |s: &str| s.as_bytes().to_vec();
    let sets = [
        vec![(id("x"), f64::INFINITY)],
        vec![(id("x"), 1e300)],
        vec![(id("x"), live + 0.5)],
        vec![(id("x"), (MAX_EXPIRY_MS + 1) as f64)], // beyond 64-bit nanoseconds
        // Expired members are read (to be removed) when a live one is there.
        vec![(id("x"), f64::NEG_INFINITY), (id("y"), live)],
        vec![(id("x"), 1.5), (id("y"), live)],
        vec![(id("x"), -5.0), (id("z"), live)],
        vec![(id("x"), 0.0), (id("z"), live)],
        // Members that are no id: empty, or longer than 128 bytes.
        vec![(Vec::new(), live)],
        vec![(vec![b'm'; MAX_ID + 1], 1000.0), (id("z"), live)],
        // Nothing live: every member is read before the set would be deleted or replaced.
        vec![(id("x"), f64::NEG_INFINITY)],
        vec![(id("other"), 1000.5), (id("x"), 2000.0)],
        vec![(id("x"), 2000.0), (Vec::new(), 3000.0)],
        vec![(id("x"), -1.0), (id("id"), live)],
    ];
    for members in sets {
        let mut f = Fake { members: members.clone(), ..Fake::default() };
        f.sort();
        let sorted = f.members.clone();
        assert_eq!(acquire_on(&mut f, T0, 5, 100, b"id"), Err(Error::InvalidState("CL.ACQUIRE")), "{members:?}");
        assert_eq!(f.members, sorted);
        assert_eq!(release_on(&mut f, T0, b"id"), Err(Error::InvalidState("CL.ACQUIRE")), "{members:?}");
        assert_eq!(f.members, sorted);
    }
    assert_eq!(Error::InvalidState("CL.ACQUIRE").to_string(), "ERR key does not hold valid CL.ACQUIRE state");
    // The least and the greatest expiry are leases.
    let mut f = Fake { members: vec![(id("x"), 1.0), (id("y"), MAX_EXPIRY_MS as f64)], ..Fake::default() };
    assert_eq!(acquire_on(&mut f, T0, 5, 100, b"id").unwrap()[..3], [0, 5, 3]);
    assert_eq!(f.members.len(), 2, "the expired one removed, the new one added");
    // A member no call reads is never removed: 40 expired leases, then another application's
    // member above them, and a live lease. Each call removes the 32 lowest it read.
    let mut members: Vec<_> = (0..40).map(|i| (format!("w{i:02}").into_bytes(), 1000.0 + f64::from(i))).collect();
    members.push((id("foreign"), 5000.5));
    members.push((id("live"), live));
    let mut f = Fake { members, ..Fake::default() };
    assert_eq!(acquire_on(&mut f, T0, 5, 100, b"id").unwrap()[..3], [0, 5, 3]);
    assert_eq!(f.members.len(), 42 - 32 + 1);
    assert!(f.members.iter().any(|(m, _)| m == b"foreign"));
    // The next call reads the foreign member: an error, and nothing written.
    let before = f.members.clone();
    assert_eq!(acquire_on(&mut f, T0, 5, 100, b"id"), Err(Error::InvalidState("CL.ACQUIRE")));
    assert_eq!(f.members, before);
}

/// Random calls on a set of `ids` possible holders; checks each reply against the model, the
/// live leases and the key's expiry after each call, the work bound, and (for a constant
/// limit) that no more than `limit` leases are ever live.
fn run_scenario(ids: u8, calls: &[(i64, u8, u8, i64, i64)]) -> std::result::Result<(), TestCaseError> {
    let (mut f, mut model, mut now) = (Fake::default(), Model::default(), T0);
    let mut most_limit = 0;
    for &(step, op, id, limit, lease_ms) in calls {
        now += step;
        let id = format!("id-{}", id % ids).into_bytes();
        let now128 = i128::from(now);
        f.visits = 0;
        // A call that finds no other live lease reads the whole set (then deletes or replaces it).
        let whole = f.members.len() + 3;
        if op % 5 == 0 {
            let got = release_on(&mut f, now, &id).unwrap();
            prop_assert_eq!(got, model.release(now128, &id));
            prop_assert!(f.visits <= (PRUNE + 8).max(whole), "release visited {}", f.visits);
        } else {
            let got = acquire_on(&mut f, now, limit, lease_ms, &id).unwrap();
            let want = model.acquire(now128, limit.into(), i128::from(lease_ms) * MS as i128, &id);
            // Reply times are in ms, rounded up: the model's, rounded the same way.
            let ms = |ns: i128| if ns == -1 { -1 } else { (ns + MS as i128 - 1).div_euclid(MS as i128) };
            let want = [want[0], want[1], want[2], ms(want[3]), ms(want[4])];
            prop_assert_eq!(got.map(i128::from), want);
            prop_assert!(f.visits <= (PRUNE + limit as usize + 8).max(whole), "acquire visited {}", f.visits);
        }
        prop_assert_eq!(f.live(now), model.live(now128), "live leases");
        // The set never holds more members than the largest limit used (so, alone, these
        // commands never make a set larger than READ_WHOLE).
        if op % 5 != 0 {
            most_limit = most_limit.max(limit);
        }
        prop_assert!(f.members.len() as i64 <= most_limit, "{} members, limits up to {most_limit}", f.members.len());
        if let Some(latest) = f.live(now).values().max() {
            prop_assert_eq!(
                f.expires_ms.map(|ms| i128::from(ms) * MS as i128),
                Some(*latest),
                "the key expires with its latest lease"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    #[test]
    fn matches_the_model_with_few_holders(
        calls in proptest::collection::vec((0i64..30 * MS, 0u8..10, 0u8..8, 1i64..6, 1i64..80), 1..80),
    ) {
        run_scenario(8, &calls)?;
    }

    /// Many holders, long and short leases: more than PRUNE expire together, and limits change
    /// from call to call (a lowered limit leaves more live leases than it allows).
    #[test]
    fn matches_the_model_with_many_holders_and_changing_limits(
        calls in proptest::collection::vec((0i64..15 * MS, 0u8..10, 0u8..120, prop_oneof![1i64..100, Just(100)], prop_oneof![1i64..40, 200i64..400]), 1..250),
    ) {
        run_scenario(120, &calls)?;
    }

    /// With one limit, live leases never exceed it, whatever the timing and crashes.
    #[test]
    fn never_more_than_limit_live(
        limit in 1i64..8,
        calls in proptest::collection::vec((0i64..20 * MS, 0u8..10, 0u8..30, 1i64..100), 1..150),
    ) {
        let mut f = Fake::default();
        let mut now = T0;
        for (step, op, id, lease) in calls {
            now += step;
            let id = format!("w{id}").into_bytes();
            if op % 4 == 0 { release_on(&mut f, now, &id).unwrap(); } else { acquire_on(&mut f, now, limit, lease, &id).unwrap(); }
            prop_assert!(f.live(now).len() as i64 <= limit);
        }
    }
}
