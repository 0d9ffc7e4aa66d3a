use super::*;
use crate::reference::quota::period as reference;
use proptest::prelude::*;

/// Unix ms of an RFC 3339 instant.
pub(crate) fn ms(s: &str) -> i64 {
    s.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

fn ns(ms: i64) -> Instant {
    Instant::from_nanos(ms * NANOS_PER_MILLI)
}

pub(crate) fn cal(per: Per, zone: &str, anchor: Option<&str>) -> Calendar {
    Calendar {
        per,
        zone: Zone::parse(zone.as_bytes()).unwrap(),
        anchor_ms: anchor.map(|a| parse_anchor(a.as_bytes(), Unit::Millis).unwrap()),
    }
}

/// Checks the period of `c` holding `start` is `[start, end)`, and that the millisecond
/// before `start` and the one at `end` are in the neighbouring periods.
fn boundaries(c: &Calendar, start: &str, end: &str) {
    let (s, e) = (ms(start), ms(end));
    for now in [s, s + 1, (s + e) / 2, e - 1] {
        let p = compute(c, ns(now)).unwrap();
        assert_eq!((p.start, p.end), (ns(s), ns(e)), "{c:?} at {now}");
    }
    assert_eq!(compute(c, ns(s - 1)).unwrap().end, ns(s), "{c:?}: the ms before {start}");
    assert_eq!(compute(c, ns(e)).unwrap().start, ns(e), "{c:?}: the ms at {end}");
    // One nanosecond either side of the boundary too.
    assert_eq!(compute(c, Instant::from_nanos(s * NANOS_PER_MILLI - 1)).unwrap().end, ns(s));
    assert_eq!(compute(c, Instant::from_nanos(e * NANOS_PER_MILLI - 1)).unwrap().end, ns(e));
}

#[test]
fn utc_periods_follow_the_calendar() {
    boundaries(&cal(Per::Minute, "UTC", None), "2027-02-10T12:34:00Z", "2027-02-10T12:35:00Z");
    boundaries(&cal(Per::Hour, "UTC", None), "2027-02-10T12:00:00Z", "2027-02-10T13:00:00Z");
    boundaries(&cal(Per::Day, "UTC", None), "2027-02-10T00:00:00Z", "2027-02-11T00:00:00Z");
    // 2027-02-08 is a Monday.
    boundaries(&cal(Per::Week, "UTC", None), "2027-02-08T00:00:00Z", "2027-02-15T00:00:00Z");
    boundaries(&cal(Per::Month, "UTC", None), "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z");
    boundaries(&cal(Per::Month, "UTC", None), "2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z");
    boundaries(&cal(Per::Month, "UTC", None), "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z");
    boundaries(&cal(Per::Year, "UTC", None), "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z");
    // A week across a year's end: ISO weeks begin on Monday 2029-12-31.
    boundaries(&cal(Per::Week, "UTC", None), "2029-12-31T00:00:00Z", "2030-01-07T00:00:00Z");
}

#[test]
fn fixed_offsets_shift_every_boundary() {
    boundaries(&cal(Per::Day, "+05:30", None), "2027-02-09T18:30:00Z", "2027-02-10T18:30:00Z");
    boundaries(&cal(Per::Hour, "+05:45", None), "2027-02-10T12:15:00Z", "2027-02-10T13:15:00Z");
    boundaries(&cal(Per::Month, "-08:00", None), "2027-02-01T08:00:00Z", "2027-03-01T08:00:00Z");
    assert_eq!(Zone::parse(b"+0530").unwrap(), Zone::Fixed(19_800));
    assert_eq!(Zone::parse(b"-03").unwrap(), Zone::Fixed(-10_800));
    assert_eq!(Zone::parse(b"utc").unwrap(), Zone::UTC);
}

#[test]
fn dst_days_last_23_and_25_hours() {
    // Europe/Berlin: clocks spring forward on 2027-03-28 and fall back on 2027-10-31.
    let day = cal(Per::Day, "Europe/Berlin", None);
    boundaries(&day, "2027-03-27T23:00:00Z", "2027-03-28T22:00:00Z");
    boundaries(&day, "2027-10-30T22:00:00Z", "2027-10-31T23:00:00Z");
    // A month of 31 days (with the spring change in it) after one of 28.
    let month = cal(Per::Month, "Europe/Berlin", None);
    boundaries(&month, "2027-01-31T23:00:00Z", "2027-02-28T23:00:00Z");
    boundaries(&month, "2027-02-28T23:00:00Z", "2027-03-31T22:00:00Z");
    // America/New_York: 2027-03-14 and 2027-11-07.
    let day = cal(Per::Day, "America/New_York", None);
    boundaries(&day, "2027-03-14T05:00:00Z", "2027-03-15T04:00:00Z");
    boundaries(&day, "2027-11-07T04:00:00Z", "2027-11-08T05:00:00Z");
    // Minutes and hours are real time: every reading of a start begins one, so the last
    // minute before the clocks go back (01:59 EDT) lasts 60 s, and the hour the clock reads
    // twice is two periods; the skipped one does not exist.
    let minute = cal(Per::Minute, "America/New_York", None);
    boundaries(&minute, "2027-11-07T05:59:00Z", "2027-11-07T06:00:00Z");
    boundaries(&minute, "2027-11-07T06:00:00Z", "2027-11-07T06:01:00Z");
    boundaries(&minute, "2027-11-07T05:30:00Z", "2027-11-07T05:31:00Z");
    let hour = cal(Per::Hour, "America/New_York", None);
    boundaries(&hour, "2027-11-07T05:00:00Z", "2027-11-07T06:00:00Z");
    boundaries(&hour, "2027-11-07T06:00:00Z", "2027-11-07T07:00:00Z");
    boundaries(&hour, "2027-03-14T06:00:00Z", "2027-03-14T07:00:00Z");
    // Lord Howe moves half an hour: the hour in progress ends at the change, and the next
    // runs to the new clock's next full hour. Autumn 2027-04-04 02:00 +11 → 01:30 +10:30
    // (15:00Z); spring 2027-10-03 02:00 +10:30 → 02:30 +11 (15:30Z). Minutes never move.
    let hour = cal(Per::Hour, "Australia/Lord_Howe", None);
    boundaries(&hour, "2027-04-03T14:00:00Z", "2027-04-03T15:00:00Z");
    boundaries(&hour, "2027-04-03T15:00:00Z", "2027-04-03T15:30:00Z");
    boundaries(&hour, "2027-04-03T15:30:00Z", "2027-04-03T16:30:00Z");
    boundaries(&hour, "2027-10-02T14:30:00Z", "2027-10-02T15:30:00Z");
    boundaries(&hour, "2027-10-02T15:30:00Z", "2027-10-02T16:00:00Z");
    boundaries(&hour, "2027-10-02T16:00:00Z", "2027-10-02T17:00:00Z");
    boundaries(&cal(Per::Minute, "Australia/Lord_Howe", None), "2027-04-03T14:59:00Z", "2027-04-03T15:00:00Z");
    // Transitions of a day or more, or folds of many hours: Kwajalein skipped 1993-08-20
    // (-12 → +12 at 12:00Z), Apia 2011-12-30 (-10 → +14 at 10:00Z), Vostok repeated 7 hours
    // on 1994-01-31 (+07 → -00 at 17:00Z). Minutes and hours go on as in UTC.
    for (zone, change) in [
        ("Pacific/Kwajalein", "1993-08-21T12:00:00Z"),
        ("Pacific/Apia", "2011-12-30T10:00:00Z"),
        ("Antarctica/Vostok", "1994-01-31T17:00:00Z"),
    ] {
        let t = ms(change);
        for (per, unit) in [(Per::Minute, 60_000), (Per::Hour, 3_600_000)] {
            let c = cal(per, zone, None);
            for now in [t - unit - 1, t - 1, t, t + 1, t + 3 * 3_600_000 + 123, t + 5 * 3_600_000] {
                let p = compute(&c, ns(now)).unwrap();
                let start = now - now.rem_euclid(unit);
                assert_eq!((p.start, p.end), (ns(start), ns(start + unit)), "{zone} {per:?} at {now}");
            }
        }
    }
    // Days around Apia's skipped day: December 29th ends at the change, the 31st begins there.
    let day = cal(Per::Day, "Pacific/Apia", None);
    boundaries(&day, "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z");
    boundaries(&day, "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z");
    // Vostok's 7-hour fold: January 31st, 1994 lasts 31 hours.
    boundaries(&cal(Per::Day, "Antarctica/Vostok", None), "1994-01-30T17:00:00Z", "1994-02-01T00:00:00Z");
    // America/Santiago's spring change skips midnight (2027-09-05 00:00 → 01:00): the day
    // begins at 01:00.
    boundaries(&cal(Per::Day, "America/Santiago", None), "2027-09-05T04:00:00Z", "2027-09-06T03:00:00Z");
}

#[test]
fn anchors_move_the_start_and_clamp_to_short_months() {
    // Billing on the 31st at 09:00 UTC: the last day of shorter months.
    let m = cal(Per::Month, "UTC", Some("2026-01-31T09:00:00Z"));
    boundaries(&m, "2027-01-31T09:00:00Z", "2027-02-28T09:00:00Z");
    boundaries(&m, "2027-02-28T09:00:00Z", "2027-03-31T09:00:00Z");
    boundaries(&m, "2027-03-31T09:00:00Z", "2027-04-30T09:00:00Z");
    boundaries(&m, "2028-01-31T09:00:00Z", "2028-02-29T09:00:00Z");
    for (anchor, feb27, feb28) in
        [("2026-01-29T00:00:00Z", "2027-02-28", "2028-02-29"), ("2026-01-30T00:00:00Z", "2027-02-28", "2028-02-29")]
    {
        let m = cal(Per::Month, "UTC", Some(anchor));
        let day = &anchor[8..10];
        boundaries(&m, &format!("2027-01-{day}T00:00:00Z"), &format!("{feb27}T00:00:00Z"));
        boundaries(&m, &format!("{feb27}T00:00:00Z"), &format!("2027-03-{day}T00:00:00Z"));
        boundaries(&m, &format!("2028-01-{day}T00:00:00Z"), &format!("{feb28}T00:00:00Z"));
    }
    // The 29th in a leap February is its own day.
    let m = cal(Per::Month, "UTC", Some("2026-01-29T00:00:00Z"));
    boundaries(&m, "2028-02-29T00:00:00Z", "2028-03-29T00:00:00Z");
    // A yearly plan bought on Feb 29 renews on Feb 28 in other years.
    let y = cal(Per::Year, "UTC", Some("2028-02-29T12:00:00Z"));
    boundaries(&y, "2028-02-29T12:00:00Z", "2029-02-28T12:00:00Z");
    boundaries(&y, "2031-02-28T12:00:00Z", "2032-02-29T12:00:00Z");
    // The anchor's local day and time, in the quota's zone (09:00 Berlin all year).
    let m = cal(Per::Month, "Europe/Berlin", Some("2026-01-15T08:00:00Z"));
    boundaries(&m, "2027-03-15T08:00:00Z", "2027-04-15T07:00:00Z");
    // Weekly from Wednesday 14:00; daily at 06:30; hourly at :20:15.500.
    boundaries(&cal(Per::Week, "UTC", Some("2026-01-07T14:00:00Z")), "2027-02-10T14:00:00Z", "2027-02-17T14:00:00Z");
    boundaries(&cal(Per::Day, "UTC", Some("2026-01-07T06:30:00Z")), "2027-02-10T06:30:00Z", "2027-02-11T06:30:00Z");
    boundaries(
        &cal(Per::Hour, "UTC", Some("2026-01-07T06:20:15.500Z")),
        "2027-02-10T06:20:15.500Z",
        "2027-02-10T07:20:15.500Z",
    );
    // An anchor time the clock skips begins the day as if it had not jumped (03:30 CEST).
    boundaries(
        &cal(Per::Day, "Europe/Berlin", Some("2027-01-10T01:30:00Z")),
        "2027-03-28T01:30:00Z",
        "2027-03-29T00:30:00Z",
    );
    // An anchor in the last hours of 9999, in a zone (beyond jiff's instants): its local
    // position, as 400 years earlier.
    let last = cal(Per::Day, "Europe/Berlin", Some("9999-12-31T23:59:59.999Z"));
    boundaries(&last, "2027-02-09T23:59:59.999Z", "2027-02-10T23:59:59.999Z");
    let last = cal(Per::Week, "America/New_York", Some("9999-12-31T12:00:00Z"));
    // 9999-12-31 is a Friday: weekly from Friday 07:00 EST.
    boundaries(&last, "2027-02-05T12:00:00Z", "2027-02-12T12:00:00Z");
    // As Unix time: seconds by default, milliseconds with MS.
    assert_eq!(parse_anchor(b"1769850000", Unit::Seconds), Ok(ms("2026-01-31T09:00:00Z")));
    assert_eq!(parse_anchor(b"1769850000000", Unit::Millis), Ok(ms("2026-01-31T09:00:00Z")));
    assert_eq!(parse_anchor(b"2026-01-31T10:00:00+01:00", Unit::Seconds), Ok(ms("2026-01-31T09:00:00Z")));
}

#[test]
fn bad_arguments_are_named() {
    let err = |r: Result<Zone>| r.unwrap_err().to_string();
    assert_eq!(
        err(Zone::parse(b"Mars/Olympus")),
        "ERR unknown time zone 'Mars/Olympus' for TZ: use an IANA name (e.g. Europe/Berlin) or an offset (e.g. +05:30)"
    );
    assert!(err(Zone::parse(b"+26:00")).starts_with("ERR bad offset '+26:00' for TZ"));
    assert!(err(Zone::parse(b"+5:30")).starts_with("ERR bad offset"));
    assert!(err(Zone::parse(b"+05:60")).starts_with("ERR bad offset"));
    assert!(
        parse_anchor(b"2026-01-31T09:00:00.0001Z", Unit::Seconds)
            .unwrap_err()
            .to_string()
            .starts_with("ERR bad ANCHOR '2026-01-31T09:00:00.0001Z'")
    );
    assert!(parse_anchor(b"tomorrow", Unit::Seconds).is_err());
    for lenient in [
        "2026-01-31T09:00Z",
        "2026-01-31 09:00:00Z",
        "2026-01-31t09:00:00z",
        "2026-01-31T09:00:00+0100",
        "2026-01-31T09:00:60Z",
        "2026-02-29T09:00:00Z",
        "2026-01-31T09:00:00.Z",
    ] {
        assert!(parse_anchor(lenient.as_bytes(), Unit::Seconds).is_err(), "{lenient}");
    }
    assert_eq!(parse_anchor(b"2026-01-31T09:00:00.5Z", Unit::Seconds), Ok(ms("2026-01-31T09:00:00.500Z")));
    assert_eq!(parse_anchor(b"2026-01-31T09:00:00.123000000-02:30", Unit::Seconds), Ok(ms("2026-01-31T11:30:00.123Z")));
    assert_eq!(parse_anchor(b"0000-01-01T00:00:00Z", Unit::Seconds), Ok(ANCHOR_MIN_MS));
    assert_eq!(parse_anchor(b"9999-12-31T23:59:59.999Z", Unit::Seconds), Ok(ANCHOR_MAX_MS));
    assert!(parse_anchor(b"253402300800", Unit::Seconds).is_err());
    assert!(parse_anchor(b"9223372036854775807", Unit::Seconds).is_err());
    assert_eq!(
        Per::parse(b"fortnight").unwrap_err().to_string(),
        "ERR unit must be MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
    );
    // Each unit's word in any case parses to it, and nothing else does.
    for per in Per::ALL {
        let word = per.word();
        for text in [word.to_string(), word.to_lowercase(), format!("{}{}", &word[..1], word[1..].to_lowercase())] {
            assert_eq!(Per::parse(text.as_bytes()), Ok(per), "{text}");
        }
        assert!(Per::parse(&word.as_bytes()[1..]).is_err());
        assert!(Per::parse(format!("{word}S").as_bytes()).is_err());
    }
}

// -------------------------------------------------------------------------------------
// Properties.

const NAMED: [&str; 9] = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "America/St_Johns",
    "Europe/London",
    "Pacific/Apia",
];

pub(crate) fn calendars() -> impl Strategy<Value = Calendar> {
    let zone = prop_oneof![
        Just(Zone::UTC),
        (-(25 * 60)..=(25 * 60i32)).prop_map(|m| Zone::Fixed(m * 60)),
        proptest::sample::select(&NAMED[..]).prop_map(|n| Zone::parse(n.as_bytes()).unwrap()),
    ];
    let anchor = proptest::option::of(0i64..4_102_444_800_000); // 1970 to 2100
    (proptest::sample::select(&Per::ALL[..]), zone, anchor).prop_map(|(per, zone, anchor_ms)| Calendar {
        per,
        zone,
        anchor_ms,
    })
}

/// From 1971 to 2099.
pub(crate) fn instants() -> impl Strategy<Value = i64> {
    (31_536_000_000i64..4_070_908_800_000, 0i64..NANOS_PER_MILLI).prop_map(|(ms, sub)| ms * NANOS_PER_MILLI + sub)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The module's calendar (day numbers) is jiff's civil arithmetic, in every zone.
    #[test]
    fn periods_match_the_reference(c in calendars(), now in instants()) {
        let p = compute(&c, Instant::from_nanos(now)).unwrap();
        let (s, e) = reference(&c, now.div_euclid(NANOS_PER_MILLI));
        prop_assert_eq!((p.start, p.end), (ns(s), ns(e)));
    }

    /// Periods tile time: the period of its start is itself, its end begins the next and the
    /// millisecond before its start ends the previous one.
    #[test]
    fn periods_tile_time(c in calendars(), now in instants()) {
        let p = compute(&c, Instant::from_nanos(now)).unwrap();
        prop_assert!(p.start <= Instant::from_nanos(now) && Instant::from_nanos(now) < p.end);
        prop_assert_eq!(compute(&c, p.start).unwrap(), p);
        prop_assert_eq!(compute(&c, p.end).unwrap().start, p.end);
        prop_assert_eq!(compute(&c, Instant::from_nanos(p.start.as_nanos() - 1)).unwrap().end, p.start);
        prop_assert_eq!(period(&c, Instant::from_nanos(now)).unwrap(), p, "the cache");
    }
}
