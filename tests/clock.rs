//! Clock steps: state stamped in the future (as after the wall clock stepped back) or far in
//! the past never errors or over-admits. CL.BUCKET and CL.WINDOW recover within one period:
//! the first call stores the pulled-back state. CL.THROTTLE reads a TAT however far ahead as
//! it is (a DEBIT leaves one, and a debt is not told from a step: forgiving either would
//! over-admit), and CL.COUNTER and CL.QUOTA keep a stored close: their count holds until then.

mod harness;

use harness::{Server, pexpiretime, server_ms as now_ms, throttle};

const HOUR_MS: i64 = 3_600_000;

fn set_pxat(c: &mut redis::Connection, key: &str, value: &[u8], at_ms: i64) {
    let _: () = redis::cmd("SET").arg(key).arg(value).arg("PXAT").arg(at_ms).query(c).unwrap();
}

#[test]
fn state_stamped_an_hour_ahead_never_over_admits() {
    let server = Server::start();
    let mut c = server.client();
    let now = now_ms(&mut c);
    let ahead = now + HOUR_MS;
    // CL.THROTTLE burst 4 at 1 per 10 s: a TAT an hour ahead is an hour of units owed (as a
    // DEBIT leaves it): refused until the TAT is within the 50 s tolerance, one unit from
    // then (3560 s), and nothing written.
    set_pxat(&mut c, "t", ((ahead) * 1_000_000).to_string().as_bytes(), ahead);
    let r = throttle(&mut c, "CL.THROTTLE t 4 1 10");
    let elapsed = (now_ms(&mut c) - now) / 1000 + 1;
    assert!(r[..3] == [1, 5, 0] && (3560 - elapsed..=3560).contains(&r[3]), "{r:?}");
    assert!((3600 - elapsed..=3600).contains(&r[4]), "{r:?}");
    assert_eq!(pexpiretime(&mut c, "t"), ahead, "a refused take writes nothing");
    // CL.COUNTER 5 per 10 s: a window closing in an hour stands (it is not pulled back: a
    // longer window or a CL.QUOTA period on the key leaves the same close, and moving it
    // earlier would let them admit their limit again); the denial writes nothing.
    set_pxat(&mut c, "c", b"5", ahead);
    let r = throttle(&mut c, "CL.COUNTER c 5 10");
    assert!(r[0] == 1 && r[3] > 3500 && r[4] > 3500 && r[3] <= 3600, "{r:?}");
    let at: i64 = redis::cmd("PEXPIRETIME").arg("c").query(&mut c).unwrap();
    assert_eq!(at, ahead, "the counter's close stands");
    // CL.BUCKET 5 tokens, 1 per 10 s: empty and "full in an hour" refills from now.
    set_pxat(&mut c, "b", b"-5", ahead);
    assert_eq!(throttle(&mut c, "CL.BUCKET b 5 1 10"), [1, 5, 0, 10, 50]);
    // CL.WINDOW 5 per 10 s: five actions logged an hour ahead count as logged now.
    let mut log = vec![1u8, 0, 0, 0, 0, 0, 0, 0];
    for _ in 0..5 {
        log.extend_from_slice(&(ahead * 1_000_000).to_le_bytes());
    }
    set_pxat(&mut c, "w", &log, ahead + 10_000);
    let r = throttle(&mut c, "CL.WINDOW w 5 10");
    assert!(r[..3] == [1, 5, 0] && r[3] <= 10 && r[4] <= 10, "{r:?}");
    // Each denied call stored the pulled-back state: every key now goes within one period.
    for (key, period_ms) in [("b", 50_000), ("w", 10_000)] {
        let at: i64 = redis::cmd("PEXPIRETIME").arg(key).query(&mut c).unwrap();
        assert!(at <= now_ms(&mut c) + period_ms + 1, "{key} expires at {at}, now {now}");
    }
    // A peek stays pure: over the limit, it is refused (the TAT within the tolerance at
    // 3550 s) and writes nothing.
    set_pxat(&mut c, "peek", ((ahead) * 1_000_000).to_string().as_bytes(), ahead);
    let r = throttle(&mut c, "CL.THROTTLE peek 4 1 10 0");
    let elapsed = (now_ms(&mut c) - now) / 1000 + 1;
    assert!(r[..3] == [1, 5, 0] && (3550 - elapsed..=3550).contains(&r[3]), "{r:?}");
    let at: i64 = redis::cmd("PEXPIRETIME").arg("peek").query(&mut c).unwrap();
    assert_eq!(at, ahead, "the peek wrote nothing");
}

#[test]
fn state_stamped_far_in_the_past_reads_as_full() {
    let server = Server::start();
    let mut c = server.client();
    let later = now_ms(&mut c) + HOUR_MS;
    // A TAT from 2001 on a key that has not expired yet (its expiry was moved).
    set_pxat(&mut c, "t", b"1000000000000000000", later);
    assert_eq!(throttle(&mut c, "CL.THROTTLE t 4 1 10"), [0, 5, 4, -1, 10]);
    let mut log = vec![1u8, 0, 0, 0, 0, 0, 0, 0];
    log.extend_from_slice(&1_000_000_000_000_000_000i64.to_le_bytes());
    set_pxat(&mut c, "w", &log, later);
    assert_eq!(throttle(&mut c, "CL.WINDOW w 5 10"), [0, 5, 4, -1, 10]);
}
