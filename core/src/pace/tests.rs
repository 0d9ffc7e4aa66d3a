use super::*;
use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC};
use proptest::prelude::*;

const T0: i64 = 1_700_000_000 * NANOS_PER_SEC;
const MS: i64 = NANOS_PER_MILLI;

fn words(s: &str) -> Vec<&[u8]> {
    s.split_whitespace().map(str::as_bytes).collect()
}

fn parse(s: &str) -> Result<Request<'_>> {
    Request::parse(&words(s))
}

fn error(s: &str) -> String {
    parse(s).unwrap_err().to_string()
}

/// Runs a call at `now`, carrying the TAT as the module does.
fn run(tat: &mut Option<Instant>, now: i64, p: &Params, q: i64, unit: Unit) -> [i64; 5] {
    let d = decide(*tat, Instant::from_nanos(now), p, q).unwrap();
    if let Effect::Store { state, expires_at } = d.effect {
        assert_eq!(state, expires_at, "a pace key expires at its TAT");
        *tat = Some(state);
    }
    d.reply.to_array(unit)
}

#[test]
fn parses_every_argument_in_any_order() {
    let r = parse("k 100 1").unwrap();
    assert_eq!((r.key, r.quantity, r.unit, r.block), (&b"k"[..], 1, Unit::Seconds, false));
    assert_eq!(r.params.emission_interval().as_nanos(), 10 * MS);
    assert_eq!(r.params.max_wait().as_nanos(), NANOS_PER_SEC, "MAXWAIT defaults to one period");
    let r = parse("k 10 1000 block QUANTITY 3 ms MAXWAIT 250").unwrap();
    assert_eq!((r.quantity, r.unit, r.block), (3, Unit::Millis, true));
    assert_eq!((r.params.emission_interval().as_nanos(), r.params.max_wait().as_nanos()), (100 * MS, 250 * MS));
    assert_eq!(parse("k 1 1 MAXWAIT 0").unwrap().params.max_wait(), Nanos::ZERO);
    assert_eq!(parse("k 1 1 QUANTITY 0").unwrap().quantity, 0);
}

#[test]
fn bad_arguments_get_clear_errors() {
    for bad in ["", "k", "k 1", "k 1 1 MAXWAIT 1 QUANTITY 1 MS BLOCK SHADOW x"] {
        assert_eq!(parse(bad), Err(Error::WrongArity("cl.pace")), "{bad:?}");
    }
    assert_eq!(parse("k x 1"), Err(Error::NotAnInteger));
    assert_eq!(parse("k 1 1 MAXWAIT x"), Err(Error::NotAnInteger));
    assert_eq!(parse("k 1 1 QUANTITY 1.5"), Err(Error::NotAnInteger));
    for syntax in [
        "k 1 1 5",
        "k 1 1 MAXWAIT",
        "k 1 1 BLOCK BLOCK",
        "k 1 1 MS MS",
        "k 1 1 QUANTITY 1 QUANTITY 1",
        "k 1 1 PRECISION 1",
        "k 1 1 NOW",
    ] {
        assert_eq!(parse(syntax), Err(Error::Syntax), "{syntax}");
    }
    assert_eq!(error("k 0 1"), "ERR count must be an integer from 1 to 1000000000000000000");
    assert_eq!(error("k 1 0"), "ERR period must be an integer from 1 to 1000000000 (seconds)");
    assert_eq!(error("k 1 1000000000001 MS"), "ERR period must be an integer from 1 to 1000000000000 (milliseconds)");
    assert_eq!(error("k 1 1 MAXWAIT -1"), "ERR maxwait must be an integer from 0 to 1000000000 (seconds)");
    assert_eq!(
        error("k 1 1 MAXWAIT 1000000000001 MS"),
        "ERR maxwait must be an integer from 0 to 1000000000000 (milliseconds)"
    );
    assert_eq!(error("k 1000000001 1"), "ERR rate is too fast: period divided by count is less than one nanosecond");
    assert_eq!(
        error("k 1 1 QUANTITY -1"),
        "ERR quantity must be an integer from 0 to 1000000000000000000 (a reservation cannot be refunded)"
    );
    assert_eq!(
        error("k 1 1 QUANTITY 1000000001"),
        "ERR parameters are too large: quantity * period / count must be at most 1000000000 seconds (1000000000000 milliseconds)"
    );
    assert_eq!(
        error("k 1 1 QUANTITY 0 BLOCK"),
        "ERR quantity must be at least 1 with BLOCK (a peek reserves no slot to wait for)"
    );
    // The largest values the messages state are accepted.
    assert!(parse("k 1 1000000000 MAXWAIT 1000000000 QUANTITY 1").is_ok());
    assert!(parse("k 1000000000000000000 1000000000 QUANTITY 1000000000000000000").is_ok());
}

#[test]
fn a_fleet_is_spaced_evenly_and_refused_beyond_maxwait() {
    // 100 per second (10 ms apart), MAXWAIT 30 ms: four calls at once get 0, 10, 20, 30 ms.
    let p = parse("k 100 1000 MS MAXWAIT 30").unwrap().params;
    let mut tat = None;
    assert_eq!(run(&mut tat, T0, &p, 1, Unit::Millis), [0, 0, 1, -1, 10]);
    assert_eq!(run(&mut tat, T0, &p, 1, Unit::Millis), [0, 10, 2, -1, 20]);
    assert_eq!(run(&mut tat, T0, &p, 1, Unit::Millis), [0, 20, 3, -1, 30]);
    assert_eq!(run(&mut tat, T0, &p, 1, Unit::Millis), [0, 30, 4, -1, 40]);
    // The fifth would wait 40 ms: refused, and a slot within 30 ms frees in 10 ms.
    let before = tat;
    assert_eq!(run(&mut tat, T0, &p, 1, Unit::Millis), [1, -1, 4, 10, 40]);
    assert_eq!(tat, before, "a refusal writes nothing");
    // 15 ms later: the second slot is under way (it counts until it ends, in 5 ms); the next
    // free one is 25 ms away.
    assert_eq!(run(&mut tat, T0 + 15 * MS, &p, 0, Unit::Millis), [0, 25, 3, -1, 25], "a peek");
    assert_eq!(tat, before, "a peek writes nothing");
    assert_eq!(run(&mut tat, T0 + 15 * MS, &p, 2, Unit::Millis), [0, 25, 5, -1, 45]);
    // Long after, the schedule is idle again.
    assert_eq!(run(&mut tat, T0 + 10 * NANOS_PER_SEC, &p, 1, Unit::Millis), [0, 0, 1, -1, 10]);
}

#[test]
fn seconds_replies_round_as_every_command() {
    // One per 2 s: the second call waits 2 s, the third 4 s (MAXWAIT 5 s).
    let p = parse("k 1 2 MAXWAIT 5").unwrap().params;
    let mut tat = None;
    assert_eq!(run(&mut tat, T0, &p, 1, Unit::Seconds), [0, 0, 1, -1, 2]);
    // 1.5 s rounds up; the slot at T0 is under way, so two units are queued (it and the new one).
    assert_eq!(run(&mut tat, T0 + 500 * MS, &p, 1, Unit::Seconds), [0, 2, 2, -1, 4]);
    assert_eq!(run(&mut tat, T0 + 500 * MS, &p, 1, Unit::Seconds), [0, 4, 3, -1, 6]);
    assert_eq!(run(&mut tat, T0 + 500 * MS, &p, 1, Unit::Seconds), [1, -1, 3, 1, 6], "5.5 s away: 0.5 s over MAXWAIT");
}

/// A blocked call's reply describes the schedule when it is sent (issue 18, item 4): reservations
/// made meanwhile count, and a key deleted or replaced meanwhile still leaves the caller's own.
#[test]
fn a_released_call_replies_the_schedule_as_it_stands() {
    let p = parse("k 100 1000 MS").unwrap().params;
    let mut tat = Some(Instant::from_nanos(T0 + 35 * MS));
    let d = decide(tat, Instant::from_nanos(T0), &p, 2).unwrap();
    assert_eq!(d.reply.to_array(Unit::Millis), [0, 35, 6, -1, 55], "the slot under way until T0 + 5 ms counts");
    let slot = Instant::from_nanos(T0 + 35 * MS);
    run(&mut tat, T0, &p, 2, Unit::Millis);
    let end = tat.unwrap();
    assert_eq!(end, Instant::from_nanos(T0 + 55 * MS));
    let at = |ms: i64| Instant::from_nanos(T0 + ms * MS);
    let released = |tat, now| Reply::released(slot, end, tat, now, &p).to_array(Unit::Millis);
    // Released at the slot, nobody else came: its two slots.
    assert_eq!(released(tat, slot), [0, 0, 2, -1, 20], "BLOCK replies with wait 0");
    // Four more units were reserved meanwhile: they are queued behind it.
    assert_eq!(released(Some(at(95)), slot), [0, 0, 6, -1, 60]);
    // Unblocked early (CLIENT UNBLOCK at T0 + 5 ms): the wait left, the queue as it is then.
    assert_eq!(released(Some(at(95)), at(5)), [0, 30, 9, -1, 90], "unblocked early");
    // The key was deleted, flushed or holds something else: its own reservation still counts.
    assert_eq!(released(None, slot), [0, 0, 2, -1, 20]);
    assert_eq!(released(Some(at(1)), at(40)), [0, 0, 2, -1, 15]);
    // Released late, after its own slots ended: an idle schedule.
    assert_eq!(released(None, at(80)), [0, 0, 0, -1, 0]);
}

#[test]
fn the_state_is_a_tagged_tat_and_other_limiters_are_wrongtype() {
    assert_eq!(read(b"P1700000000000000000"), Ok(Instant::from_nanos(T0)));
    assert_eq!(encode(Instant::from_nanos(T0)), b"P1700000000000000000");
    assert_eq!(
        read(b"1700000000000000000"),
        Err(Error::WrongType),
        "CL.THROTTLE's bare TAT (and the previous version's pacer keys)"
    );
    for junk in [&b"P"[..], b"P5", b"P-1", b"p1700000000000000000", b"P+1700000000000000000"] {
        assert_eq!(read(junk), Err(Error::InvalidState("CL.PACE")), "{junk:?}");
    }
    assert_eq!(read(b"5"), Err(Error::WrongType), "a counter's value");
    assert_eq!(read(b"-5"), Err(Error::WrongType), "a bucket's value");
    assert_eq!(read(b"\x01\0\0\0\0\0\0\0"), Err(Error::WrongType), "a window's log");
    assert_eq!(read(b"hello"), Err(Error::InvalidState("CL.PACE")));
    assert_eq!(Error::InvalidState("CL.PACE").to_string(), "ERR key does not hold valid CL.PACE state");
}

#[test]
fn a_hostile_tat_is_refused_without_overflow() {
    let p = parse("k 1 1").unwrap().params;
    let d = decide(Some(Instant::from_nanos(i64::MAX)), Instant::from_nanos(T0), &p, 1).unwrap();
    assert!(d.reply.limited);
    assert_eq!(d.effect, Effect::Nothing);
    assert!(matches!(decide(None, Instant::from_nanos(T0), &p, -1), Err(Error::OutOfRange { name: "quantity", .. })));
}

/// A reply as the reference model gives it: nanoseconds, `-1` for none.
fn in_nanos(r: &Reply) -> [i128; 5] {
    [
        i128::from(r.limited),
        r.wait.map_or(-1, |w| w.as_nanos().into()),
        r.queued.into(),
        r.retry_after.map_or(-1, |w| w.as_nanos().into()),
        r.reset_after.as_nanos().into(),
    ]
}

fn check(
    tat: Option<i64>,
    now: i64,
    count: i64,
    period: i64,
    max_wait: i64,
    q: i64,
) -> std::result::Result<(), TestCaseError> {
    let valid = crate::reference::pace::valid(count, period, max_wait, q);
    // Durations reach the parameters already checked by the parser (1 or 0 to 10^18 ns).
    let durations =
        (1..=MAX_DURATION.as_nanos()).contains(&period) && (0..=MAX_DURATION.as_nanos()).contains(&max_wait);
    let params = Params::new(count, Nanos::new(period).unwrap(), Some(Nanos::new(max_wait).unwrap()))
        .and_then(|p| p.check_quantity(q).map(|()| p))
        .ok()
        .filter(|_| durations);
    let Some(p) = params else {
        prop_assert!(!valid, "refused parameters the contract accepts");
        return Ok(());
    };
    prop_assert!(valid, "accepted parameters the contract refuses");
    let (want, write) = crate::reference::pace::call(tat, now, count, period, max_wait, q);
    match decide(tat.map(Instant::from_nanos), Instant::from_nanos(now), &p, q) {
        Ok(d) => {
            prop_assert_eq!(in_nanos(&d.reply), want);
            let got_write = match d.effect {
                Effect::Nothing => None,
                Effect::Store { state, expires_at } => {
                    prop_assert_eq!(state, expires_at);
                    Some(i128::from(state.as_nanos()))
                }
                Effect::Delete => return Err(TestCaseError::fail("a pace call never deletes")),
            };
            prop_assert_eq!(got_write, write);
        }
        // Valid parameters keep every instant within 64 bits (now is at most a quarter of the range).
        Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn matches_the_reference_everyday(
        tat_offset in proptest::option::of(-100_000i64..200_000),
        count in 1i64..20, period in 1i64..20_000, max_wait in 0i64..50_000, q in 0i64..30,
    ) {
        check(tat_offset.map(|o| T0 + o), T0, count, period, max_wait, q)?;
    }

    #[test]
    fn matches_the_reference_near_the_limits(
        tat in proptest::option::of(0i64..=i64::MAX), now in 0i64..=(i64::MAX / 4),
        count in prop_oneof![1i64..100, 1i64..=i64::MAX], period in prop_oneof![1i64..100_000, 1i64..=i64::MAX],
        max_wait in prop_oneof![0i64..100_000, 0i64..=i64::MAX], q in prop_oneof![0i64..5, i64::MIN..=i64::MAX],
    ) {
        check(tat, now, count, period, max_wait, q)?;
    }

    /// A released call's reply, whatever the key holds then and whenever it is sent.
    #[test]
    fn a_released_reply_matches_the_reference(
        count in 1i64..20, period in 1i64..20_000, wait in 1i64..50_000, q in 1i64..30,
        tat in proptest::option::of(T0 - 100_000..T0 + 400_000), at in T0 - 100..T0 + 200_000,
    ) {
        let period = period.max(count); // at least a nanosecond per unit
        let p = Params::new(count, Nanos::new(period).unwrap(), None).unwrap();
        let slot = T0 + wait;
        let end = slot + q * (period / count);
        let r = Reply::released(Instant::from_nanos(slot), Instant::from_nanos(end), tat.map(Instant::from_nanos), Instant::from_nanos(at), &p);
        prop_assert_eq!(in_nanos(&r), crate::reference::pace::released(slot, end, tat, at, count, period));
    }

    /// However calls arrive, the admitted reservations never overlap: each starts when the
    /// previous one ends or later (so the work leaves at most one unit per emission interval),
    /// never before its call, and never more than MAXWAIT after it.
    #[test]
    fn reservations_never_overlap_and_respect_maxwait(
        ei in 1i64..1000, max_wait in 0i64..5000,
        calls in proptest::collection::vec((0i64..800, 0i64..4), 1..80),
    ) {
        let p = Params::new(1, Nanos::new(ei).unwrap(), Some(Nanos::new(max_wait).unwrap())).unwrap();
        let (mut tat, mut now, mut end) = (None, T0, i64::MIN);
        for (step, q) in calls {
            now += step;
            let d = decide(tat, Instant::from_nanos(now), &p, q).unwrap();
            match (d.reply.limited, d.reply.wait) {
                (false, Some(wait)) => {
                    let at = now + wait.as_nanos();
                    prop_assert!(wait <= p.max_wait());
                    if q > 0 {
                        prop_assert!(at >= end, "slot {} starts before the previous reservation ends at {}", at, end);
                        end = at + q * ei;
                    }
                }
                (true, None) => prop_assert!(d.reply.retry_after.is_some_and(|r| r.as_nanos() > 0)),
                other => prop_assert!(false, "inconsistent reply {:?}", other),
            }
            if let Effect::Store { state, .. } = d.effect { tat = Some(state) }
        }
    }
}
