//! CL.QUOTA against a real server: calendar periods to the millisecond (the module's clock
//! pinned with `CL.DEBUG CLOCK` on each side of every boundary), keys expiring at the period's
//! end and replicated with absolute times to a replica without the module, parameters changed
//! on a live key, CL.ALL, errors and INFO.
//!
//! skip twin: CL.DEBUG CLOCK, named time zones and INFO are the module's only (tests/twin.rs
//! tests the twin's cl_quota).
//! skip containers: needs a replica without the module.

mod harness;

use harness::{Options, Server, error_of, get_bytes, pexpiretime, throttle};

/// Unix ms of an RFC 3339 instant (UTC, `YYYY-MM-DDTHH:MM:SS.mmmZ` or without the millis).
fn ms(s: &str) -> i64 {
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().unwrap();
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    // Days from civil (proleptic Gregorian), written out here on purpose (not the module's).
    let (y2, m2) = if m <= 2 { (y - 1, m + 12) } else { (y, m) };
    let days = 365 * y2 + y2 / 4 - y2 / 100 + y2 / 400 + (153 * (m2 - 3) + 2) / 5 + d - 719_469;
    let millis = if s.len() > 20 { n(20, 23) } else { 0 };
    ((days * 24 + n(11, 13)) * 60 + n(14, 16)) * 60_000 + n(17, 19) * 1000 + millis
}

fn pin(c: &mut redis::Connection, at_ms: i64) {
    let _: redis::Value = redis::cmd("CL.DEBUG").arg("CLOCK").arg(at_ms * 1000).query(c).unwrap();
}

fn server() -> Server {
    Server::with(Options::default().debug_commands())
}

#[test]
fn the_civil_ms_helper_is_right() {
    assert_eq!(ms("1970-01-01T00:00:00Z"), 0);
    assert_eq!(ms("2026-01-31T09:00:00Z"), 1_769_850_000_000);
    assert_eq!(ms("2028-02-29T00:00:00.001Z"), 1_835_395_200_001);
}

#[test]
fn days_follow_local_midnight_across_dst_to_the_millisecond() {
    let server = server();
    let mut c = server.client();
    let q = "CL.QUOTA d 2 PER DAY TZ Europe/Berlin MS";
    // 2027-03-28 in Berlin: 23 hours, from 2027-03-27T23:00Z to 2027-03-28T22:00Z.
    for (day_start, day_end) in
        [("2027-03-27T23:00:00Z", "2027-03-28T22:00:00Z"), ("2027-10-30T22:00:00Z", "2027-10-31T23:00:00Z")]
    {
        let (start, end) = (ms(day_start), ms(day_end));
        let _: () = redis::cmd("DEL").arg("d").query(&mut c).unwrap();
        pin(&mut c, start - 1);
        assert_eq!(throttle(&mut c, q), [0, 2, 1, -1, 1], "the ms before {day_start} is the day before");
        pin(&mut c, start);
        assert_eq!(throttle(&mut c, q), [0, 2, 1, -1, end - start], "a new day at local midnight");
        assert_eq!(pexpiretime(&mut c, "d"), end, "the key expires at the day's end");
        assert_eq!(get_bytes(&mut c, "d"), b"1");
        pin(&mut c, end - 1);
        assert_eq!(throttle(&mut c, q), [0, 2, 0, -1, 1]);
        assert_eq!(throttle(&mut c, q), [1, 2, 0, 1, 1], "denied until the next day begins");
        assert_eq!(
            throttle(&mut c, "CL.QUOTA d 2 PER DAY TZ Europe/Berlin QUANTITY 3 MS"),
            [1, 2, 0, -1, 1],
            "never admittable"
        );
        pin(&mut c, end);
        assert_eq!(throttle(&mut c, q)[..3], [0, 2, 1], "the next day starts empty");
    }
    // 23 and 25 hours, as the replies say.
    assert_eq!(ms("2027-03-28T22:00:00Z") - ms("2027-03-27T23:00:00Z"), 23 * 3_600_000);
    assert_eq!(ms("2027-10-31T23:00:00Z") - ms("2027-10-30T22:00:00Z"), 25 * 3_600_000);
}

#[test]
fn months_anchored_on_the_31st_and_offsets_to_the_millisecond() {
    let server = server();
    let mut c = server.client();
    // Billing on the 31st at 09:00 (+05:30): the last day of shorter months, a leap February.
    let q = "CL.QUOTA m 1000 PER MONTH TZ +05:30 ANCHOR 2026-01-31T09:00:00+05:30 QUANTITY 400 MS";
    let boundaries = [
        "2027-01-31T03:30:00Z",
        "2027-02-28T03:30:00Z",
        "2027-03-31T03:30:00Z",
        "2028-01-31T03:30:00Z",
        "2028-02-29T03:30:00Z",
    ];
    for pair in boundaries.windows(2) {
        let (start, end) = (ms(pair[0]), ms(pair[1]));
        if end - start > 40 * 86_400_000 {
            continue;
        }
        pin(&mut c, start);
        assert_eq!(throttle(&mut c, q), [0, 1000, 600, -1, end - start], "{}", pair[0]);
        assert_eq!(pexpiretime(&mut c, "m"), end);
        pin(&mut c, end - 1);
        assert_eq!(throttle(&mut c, q), [0, 1000, 200, -1, 1]);
        assert_eq!(throttle(&mut c, q), [1, 1000, 200, 1, 1]);
    }
    // Unix seconds by default, and UTC by default: a week from Monday.
    pin(&mut c, ms("2027-02-14T23:59:59.999Z"));
    assert_eq!(throttle(&mut c, "CL.QUOTA w 5 PER WEEK"), [0, 5, 4, -1, 1], "a Sunday's last ms (seconds round up)");
    assert_eq!(pexpiretime(&mut c, "w"), ms("2027-02-15T00:00:00Z"));
    pin(&mut c, ms("2027-02-15T00:00:00Z"));
    assert_eq!(throttle(&mut c, "CL.QUOTA w 5 PER WEEK"), [0, 5, 4, -1, 7 * 86_400]);
    pin(&mut c, ms("2027-02-15T10:00:00Z"));
    let anchor = ms("2026-01-07T14:00:00Z") / 1000;
    assert_eq!(
        throttle(&mut c, &format!("CL.QUOTA a 5 PER WEEK ANCHOR {anchor}")),
        [0, 5, 4, -1, 2 * 86_400 + 4 * 3600],
        "until Wednesday 14:00"
    );
}

#[test]
fn a_replica_without_the_module_holds_the_same_bytes_and_expiry() {
    let master = server();
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    pin(&mut c, ms("2027-06-15T12:00:00Z"));
    throttle(&mut c, "CL.QUOTA r 10 PER MONTH TZ America/New_York QUANTITY 3");
    throttle(&mut c, "CL.QUOTA r 10 PER MONTH TZ America/New_York QUANTITY 2");
    throttle(&mut c, "CL.QUOTA r2 10 PER DAY QUANTITY 4");
    throttle(&mut c, "CL.QUOTA r2 10 PER DAY QUANTITY -4"); // a refund to full: DEL
    // Parameters changed on a live key: the count carries over and the key is re-timed.
    throttle(&mut c, "CL.QUOTA r3 10 PER DAY QUANTITY 4");
    throttle(&mut c, "CL.QUOTA r3 10 PER YEAR QUANTITY 1");
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    let mut r = replica.client();
    assert_eq!(get_bytes(&mut r, "r"), b"5");
    // July 1st, 00:00 in New York (EDT, -04:00).
    assert_eq!(pexpiretime(&mut r, "r"), ms("2027-07-01T04:00:00Z"));
    assert_eq!(pexpiretime(&mut c, "r"), ms("2027-07-01T04:00:00Z"));
    assert_eq!(pexpiretime(&mut r, "r2"), -2, "the refund deleted the key on the replica too");
    assert_eq!(get_bytes(&mut r, "r3"), b"5");
    assert_eq!(pexpiretime(&mut r, "r3"), ms("2028-01-01T00:00:00Z"));
}

#[test]
fn a_changed_period_never_admits_more_than_the_limit() {
    let server = server();
    let mut c = server.client();
    pin(&mut c, ms("2027-02-10T12:00:00Z"));
    assert_eq!(throttle(&mut c, "CL.QUOTA k 10 PER DAY QUANTITY 7 MS")[..3], [0, 10, 3]);
    // Now monthly: the seven units were taken this month too.
    assert_eq!(
        throttle(&mut c, "CL.QUOTA k 10 PER MONTH QUANTITY 0 MS")[..3],
        [0, 10, 3],
        "a peek reads the carried count"
    );
    assert_eq!(pexpiretime(&mut c, "k"), ms("2027-02-11T00:00:00Z"), "and writes nothing");
    assert_eq!(throttle(&mut c, "CL.QUOTA k 10 PER MONTH QUANTITY 4 MS")[..3], [1, 10, 3]);
    assert_eq!(
        pexpiretime(&mut c, "k"),
        ms("2027-03-01T00:00:00Z"),
        "a denial re-times the carried count to the month's end"
    );
    assert_eq!(throttle(&mut c, "CL.QUOTA k 10 PER MONTH QUANTITY 3 MS")[..3], [0, 10, 0]);
    pin(&mut c, ms("2027-02-20T12:00:00Z"));
    assert_eq!(throttle(&mut c, "CL.QUOTA k 10 PER MONTH MS")[0], 1, "ten this month, whatever the day");
    // Another zone is another period: carried too.
    // Another zone is another period: carried too, and its earlier end leaves the key's.
    assert_eq!(throttle(&mut c, "CL.QUOTA k 10 PER MONTH TZ Asia/Tokyo MS")[..3], [1, 10, 0]);
    assert_eq!(pexpiretime(&mut c, "k"), ms("2027-03-01T00:00:00Z"));
    // PERSIST: a key without an expiry is carried and re-timed by the next call that writes.
    let _: () = redis::cmd("PERSIST").arg("k").query(&mut c).unwrap();
    assert_eq!(throttle(&mut c, "CL.QUOTA k 10 PER MONTH TZ Asia/Tokyo MS")[0], 1);
    assert_eq!(pexpiretime(&mut c, "k"), ms("2027-02-28T15:00:00Z"));
}

/// Admits `quantity` one unit at a time until denied; returns how many were admitted.
fn fill(c: &mut redis::Connection, words: &str, most: i64) -> i64 {
    let mut n = 0;
    while n <= most && throttle(c, words)[0] == 0 {
        n += 1;
    }
    n
}

#[test]
fn a_stray_call_never_shortens_a_calendar() {
    let server = server();
    let mut c = server.client();
    let day = "CL.QUOTA k 5 PER DAY";
    // Denied calls under another TZ, PER or ANCHOR, whose periods end before the UTC day's.
    for (i, stray) in [
        "CL.QUOTA k 5 PER DAY TZ -12:00",
        "CL.QUOTA k 5 PER MINUTE",
        "CL.QUOTA k 5 PER DAY ANCHOR 2027-01-01T11:00:00Z",
        "CL.QUOTA k 5 PER DAY TZ Asia/Tokyo",
    ]
    .into_iter()
    .enumerate()
    {
        let _: () = redis::cmd("DEL").arg("k").query(&mut c).unwrap();
        let morning = ms("2027-02-10T10:00:00Z") + i as i64 * 86_400_000;
        let midnight = ms("2027-02-11T00:00:00Z") + i as i64 * 86_400_000;
        pin(&mut c, morning);
        assert_eq!(fill(&mut c, day, 10), 5);
        assert_eq!(throttle(&mut c, stray)[0], 1, "{stray}: denied (the five count under it too)");
        assert_eq!(pexpiretime(&mut c, "k"), midnight, "{stray}: the key keeps the day's end");
        // Later that UTC day, after the stray calendar's own period has ended.
        pin(&mut c, midnight - 60_000);
        assert_eq!(fill(&mut c, day, 10), 0, "{stray}: the UTC day admits nothing more");
        assert_eq!(
            throttle(&mut c, &format!("{stray} QUANTITY 0"))[..3],
            [0, 5, 0],
            "{stray}: its peek counts the five until the key ends"
        );
        pin(&mut c, midnight);
        assert_eq!(fill(&mut c, day, 10), 5, "{stray}: the next day starts empty");
    }
    // 200 in March at limit 100: a denied call anchored on the 15th.
    let _: () = redis::cmd("DEL").arg("m").query(&mut c).unwrap();
    pin(&mut c, ms("2027-03-10T00:00:00Z"));
    assert_eq!(throttle(&mut c, "CL.QUOTA m 100 PER MONTH QUANTITY 100")[0], 0);
    assert_eq!(throttle(&mut c, "CL.QUOTA m 100 PER MONTH ANCHOR 2027-01-15T00:00:00Z")[0], 1);
    pin(&mut c, ms("2027-03-20T00:00:00Z"));
    assert_eq!(throttle(&mut c, "CL.QUOTA m 100 PER MONTH QUANTITY 100")[0], 1, "March has had its hundred");
    assert_eq!(pexpiretime(&mut c, "m"), ms("2027-04-01T00:00:00Z"));
}

#[test]
fn a_clock_step_back_across_midnight_never_reopens_the_day() {
    let server = server();
    let mut c = server.client();
    let day = "CL.QUOTA k 5 PER DAY";
    let midnight = ms("2027-02-11T00:00:00Z");
    pin(&mut c, midnight);
    assert_eq!(fill(&mut c, day, 10), 5);
    // The clock steps back one second: the day before, whose limit the five fill too.
    pin(&mut c, midnight - 1000);
    assert_eq!(throttle(&mut c, day)[..3], [1, 5, 0]);
    assert_eq!(pexpiretime(&mut c, "k"), midnight + 86_400_000, "the denial leaves the key's end");
    pin(&mut c, midnight + 1000);
    assert_eq!(fill(&mut c, day, 10), 0, "February 11th has had its five");
}

#[test]
fn a_counter_call_on_a_quota_key_never_cuts_the_quota() {
    let server = server();
    let mut c = server.client();
    let month = "CL.QUOTA k 10 PER MONTH";
    pin(&mut c, ms("2027-05-03T00:00:00Z"));
    assert_eq!(fill(&mut c, month, 20), 10);
    // A counter of 10 per minute on the same key, denied: the key keeps the month's end.
    assert_eq!(
        throttle(&mut c, "CL.COUNTER k 10 60")[..4],
        [1, 10, 0, (ms("2027-06-01T00:00:00Z") - ms("2027-05-03T00:00:00Z")) / 1000]
    );
    // And as a CL.ALL spec.
    let all: Vec<i64> = redis::cmd("CL.ALL").arg(1).arg("k").arg("COUNTER").arg(10).arg(60).query(&mut c).unwrap();
    assert_eq!(all[0], 1);
    assert_eq!(pexpiretime(&mut c, "k"), ms("2027-06-01T00:00:00Z"));
    pin(&mut c, ms("2027-05-03T00:02:00Z"));
    assert_eq!(fill(&mut c, month, 20), 0, "May has had its ten");
    // A counter admitting on a quota key counts into the quota's key until its end.
    let _: () = redis::cmd("DEL").arg("k").query(&mut c).unwrap();
    assert_eq!(throttle(&mut c, "CL.QUOTA k 10 PER MONTH QUANTITY 4")[0], 0);
    assert_eq!(throttle(&mut c, "CL.COUNTER k 10 60 2")[..3], [0, 10, 4]);
    assert_eq!(pexpiretime(&mut c, "k"), ms("2027-06-01T00:00:00Z"));
    pin(&mut c, ms("2027-05-03T00:10:00Z"));
    assert_eq!(fill(&mut c, month, 20), 4, "six of ten taken this month");
}

#[test]
fn a_counter_window_is_never_cut_by_a_shorter_one() {
    let server = server();
    let mut c = server.client();
    pin(&mut c, ms("2027-05-03T00:00:00Z"));
    assert_eq!(fill(&mut c, "CL.COUNTER k 10 3600", 20), 10);
    assert_eq!(throttle(&mut c, "CL.COUNTER k 10 60")[..3], [1, 10, 0]);
    assert_eq!(pexpiretime(&mut c, "k"), ms("2027-05-03T01:00:00Z"), "the hour's window stands");
    pin(&mut c, ms("2027-05-03T00:01:01Z"));
    assert_eq!(fill(&mut c, "CL.COUNTER k 10 3600", 20), 0, "the hour has had its ten");
}

#[test]
fn minutes_and_hours_last_their_length_across_any_transition() {
    let server = server();
    let mut c = server.client();
    let fresh = |c: &mut redis::Connection, at: &str, words: &str| {
        let _: () = redis::cmd("DEL").arg("t").query(c).unwrap();
        pin(c, ms(at));
        throttle(c, &format!("CL.QUOTA t 5 {words} MS"))
    };
    // New York falls back on 2027-11-07 at 06:00Z (02:00 EDT → 01:00 EST).
    assert_eq!(
        fresh(&mut c, "2027-11-07T05:59:30Z", "PER MINUTE TZ America/New_York"),
        [0, 5, 4, -1, 30_000],
        "01:59:30 EDT: a minute, not 61"
    );
    assert_eq!(
        fresh(&mut c, "2027-11-07T05:30:00Z", "PER HOUR TZ America/New_York"),
        [0, 5, 4, -1, 1_800_000],
        "01:30 EDT"
    );
    assert_eq!(
        fresh(&mut c, "2027-11-07T06:30:00Z", "PER HOUR TZ America/New_York"),
        [0, 5, 4, -1, 1_800_000],
        "01:30 EST: the repeated hour is a period of its own"
    );
    // Lord Howe falls back half an hour on 2027-04-04 at 15:00Z (02:00 +11 → 01:30 +10:30).
    assert_eq!(fresh(&mut c, "2027-04-03T14:59:30Z", "PER MINUTE TZ Australia/Lord_Howe"), [0, 5, 4, -1, 30_000]);
    assert_eq!(
        fresh(&mut c, "2027-04-03T14:30:00Z", "PER HOUR TZ Australia/Lord_Howe"),
        [0, 5, 4, -1, 1_800_000],
        "the hour from 01:00 +11 ends at the change"
    );
    assert_eq!(
        fresh(&mut c, "2027-04-03T15:10:00Z", "PER HOUR TZ Australia/Lord_Howe"),
        [0, 5, 4, -1, 1_200_000],
        "the repeated half hour, to 02:00 +10:30"
    );
    assert_eq!(fresh(&mut c, "2027-04-03T15:30:00Z", "PER HOUR TZ Australia/Lord_Howe"), [0, 5, 4, -1, 3_600_000]);
    // Transitions of a day and more: Kwajalein skipped 1993-08-21 (-12 → +12), Apia
    // 2011-12-30 (-10 → +14). No error; minutes and hours as long as ever.
    for (zone, change) in [("Pacific/Kwajalein", "1993-08-21T12:00:00Z"), ("Pacific/Apia", "2011-12-30T10:00:00Z")] {
        for (at, unit, left) in
            [(-30_000, "MINUTE", 30_000), (0, "MINUTE", 60_000), (-1_000, "HOUR", 1_000), (90_000, "HOUR", 3_510_000)]
        {
            let when = ms(change) + at;
            let _: () = redis::cmd("DEL").arg("t").query(&mut c).unwrap();
            pin(&mut c, when);
            assert_eq!(
                throttle(&mut c, &format!("CL.QUOTA t 5 PER {unit} TZ {zone} MS")),
                [0, 5, 4, -1, left],
                "{zone} {unit} at {change} {at:+} ms"
            );
        }
    }
    // Vostok: +07 → -00 on 1994-01-31 at 17:00Z (a fold of 7 hours), → +05 on 2023-12-17 at 19:00Z.
    for (at, unit) in [
        ("1994-01-31T17:00:00Z", "MINUTE"),
        ("1994-01-31T20:00:30Z", "MINUTE"),
        ("1994-01-31T20:30:00Z", "HOUR"),
        ("2023-12-17T19:30:00Z", "HOUR"),
    ] {
        let r = fresh(&mut c, at, &format!("PER {unit} TZ Antarctica/Vostok"));
        assert!(
            r[..4] == [0, 5, 4, -1] && r[4] > 0 && r[4] <= if unit == "MINUTE" { 60_000 } else { 3_600_000 },
            "Vostok {unit} at {at}: {r:?}"
        );
    }
}

#[test]
fn an_anchor_in_the_last_hours_of_9999_is_accepted_in_any_zone() {
    let server = server();
    let mut c = server.client();
    pin(&mut c, ms("2027-02-10T10:00:00Z"));
    for (zone, anchor, left) in [
        ("Europe/Berlin", "9999-12-31T23:59:59.999Z", 14 * 3_600_000 - 1),
        ("America/New_York", "9999-12-31T12:00:00Z", 2 * 3_600_000),
        ("Pacific/Kiritimati", "9999-12-31T23:00:00Z", 13 * 3_600_000),
    ] {
        // Daily at the anchor's local time of day (winter: CET +1, EST -5, +14).
        let r = throttle(&mut c, &format!("CL.QUOTA n:{zone} 5 PER DAY TZ {zone} ANCHOR {anchor} MS"));
        assert_eq!(r, [0, 5, 4, -1, left], "{zone} {anchor}");
    }
    // The last millisecond of 9999 (Unix ms), 10000-01-01T00:59:59.999 in Berlin: yearly on
    // January 1st at 00:59:59.999 CET.
    let r = throttle(&mut c, "CL.QUOTA y 5 PER YEAR TZ Europe/Berlin ANCHOR 253402300799999 MS");
    assert_eq!(r[..4], [0, 5, 4, -1]);
    assert_eq!(pexpiretime(&mut c, "y"), ms("2027-12-31T23:59:59.999Z"));
}

#[test]
fn all_takes_a_quota_spec() {
    let server = server();
    let mut c = server.client();
    pin(&mut c, ms("2027-05-31T23:59:59Z"));
    // 10 per second and 1,000,000 tokens per calendar month, 600,000 per call.
    let call = "CL.ALL 2 {u}:rate {u}:tokens THROTTLE 9 10 1 QUOTA 1000000 PER MONTH QUANTITY 600000";
    let reply: Vec<i64> =
        redis::cmd("CL.ALL").arg(call.split_whitespace().skip(1).collect::<Vec<_>>()).query(&mut c).unwrap();
    assert_eq!(reply, [0, 10, 9, -1, 1, 1], "admitted: the fewest remaining binds");
    let reply: Vec<i64> =
        redis::cmd("CL.ALL").arg(call.split_whitespace().skip(1).collect::<Vec<_>>()).query(&mut c).unwrap();
    assert_eq!(reply, [1, 1_000_000, 400_000, 1, 1, 2], "denied until June");
    assert_eq!(get_bytes(&mut c, "{u}:tokens"), b"600000");
    assert_eq!(pexpiretime(&mut c, "{u}:tokens"), ms("2027-06-01T00:00:00Z"));
    // The same key through CL.QUOTA.
    assert_eq!(throttle(&mut c, "CL.QUOTA {u}:tokens 1000000 PER MONTH QUANTITY 0"), [0, 1_000_000, 400_000, -1, 1]);
}

#[test]
fn bad_arguments_are_named_and_write_nothing() {
    let server = server();
    let mut c = server.client();
    let _: () = redis::cmd("SET").arg("k").arg("3").query(&mut c).unwrap();
    let _: () = redis::cmd("LPUSH").arg("list").arg("x").query(&mut c).unwrap();
    for (words, want) in [
        ("CL.QUOTA k 10 PER FORTNIGHT", "ERR unit must be MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"),
        ("CL.QUOTA k 10 EVERY DAY", "ERR expected PER unit after the limit (e.g. 1000 PER MONTH)"),
        (
            "CL.QUOTA k 10 PER DAY TZ Mars/Olympus",
            "ERR unknown time zone 'Mars/Olympus' for TZ: use an IANA name (e.g. Europe/Berlin) or an offset (e.g. +05:30)",
        ),
        ("CL.QUOTA k 10 PER DAY TZ +5:30", "ERR bad offset '+5:30' for TZ: use +HH:MM or -HH:MM (at most 25:59)"),
        (
            "CL.QUOTA k 10 PER DAY ANCHOR yesterday",
            "ERR bad ANCHOR 'yesterday': use Unix time in the call's unit or an RFC 3339 instant such as 2026-01-31T09:00:00Z, on a whole millisecond",
        ),
        ("CL.QUOTA k 0 PER DAY", "ERR limit must be an integer from 1 to 999999999999999999"),
        ("CL.QUOTA k 10 PER", "ERR wrong number of arguments for 'cl.quota' command"),
        ("CL.QUOTA k 10 PER DAY BOGUS", "ERR syntax error"),
        ("CL.QUOTA list 10 PER DAY", "WRONGTYPE Operation against a key holding the wrong kind of value"),
        (
            "CL.ALL 1 k QUOTA 10 PER DAY TZ Nowhere",
            "ERR limiter 1: unknown time zone 'Nowhere' for TZ: use an IANA name (e.g. Europe/Berlin) or an offset (e.g. +05:30)",
        ),
    ] {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        assert_eq!(error_of(&mut c, &args), want, "{words}");
    }
    assert_eq!(get_bytes(&mut c, "k"), b"3");
    assert_eq!(pexpiretime(&mut c, "k"), -1, "untouched");
}

#[test]
fn info_reports_the_tz_database_and_the_calls() {
    let server = server();
    let mut c = server.client();
    throttle(&mut c, "CL.QUOTA i 1 PER HOUR");
    throttle(&mut c, "CL.QUOTA i 1 PER HOUR");
    let info: String = redis::cmd("INFO").arg("throttle").query(&mut c).unwrap();
    let field =
        |name: &str| info.lines().find_map(|l| l.strip_prefix(&format!("throttle_{name}:"))).map(str::to_string);
    let version = field("tzdb_version").expect("tzdb_version");
    assert!(version.len() == 5 && version.starts_with("20"), "{version}");
    assert_eq!(field("cl_quota_calls").as_deref(), Some("2"));
    assert_eq!(field("cl_quota_admitted").as_deref(), Some("1"));
    assert_eq!(field("cl_quota_denied").as_deref(), Some("1"));
}

#[test]
fn a_quota_with_a_zone_survives_module_unload_and_load() {
    let server = Server::with(Options::default().arg("--enable-module-command yes"));
    let mut c = server.client();
    let q = "CL.QUOTA u 5 PER DAY TZ America/New_York ANCHOR 2026-01-31T09:00:00Z";
    assert_eq!(throttle(&mut c, q)[..3], [0, 5, 4]);
    let _: () = redis::cmd("MODULE").arg("UNLOAD").arg("throttle").query(&mut c).unwrap();
    let _: () = redis::cmd("MODULE").arg("LOAD").arg(harness::module_path().to_str().unwrap()).query(&mut c).unwrap();
    assert_eq!(throttle(&mut c, q)[..3], [0, 5, 3], "the key kept its count; the reloaded module reads it");
    assert_eq!(throttle(&mut c, "CL.QUOTA u2 5 PER WEEK TZ Asia/Kolkata")[..3], [0, 5, 4]);
}
