//! CL.COUNTER and CL.BUCKET keys changed under the module keep working: a key whose expiry
//! was removed (`PERSIST`, `RESTORE key 0 …`, a `SET` without `KEEPTTL`) or pushed beyond
//! the nanosecond range reads as stamped too far ahead, is pulled back, and is stored so by
//! the next call (no "key does not hold valid state" for as long as the key lives); a
//! bucket's capacity lowered keeps its deficit as debt; and no `MS` reply exceeds what the
//! parameters allow.

mod harness;

use harness::{Server, pexpiretime, server_ms as now_ms, throttle};

fn run(c: &mut redis::Connection, words: &[&str]) {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    let _: redis::Value = cmd.query(c).unwrap_or_else(|e| panic!("{words:?}: {e}"));
}

/// Copies `from` to `to` with `DUMP` and `RESTORE to 0 …`: the copy has no expiry.
fn restore_without_ttl(c: &mut redis::Connection, from: &str, to: &str) {
    let dump: Vec<u8> = redis::cmd("DUMP").arg(from).query(c).unwrap();
    let _: () = redis::cmd("RESTORE").arg(to).arg(0).arg(dump).query(c).unwrap();
    assert_eq!(pexpiretime(c, to), -1, "RESTORE with ttl 0 leaves no expiry");
}

#[test]
fn a_counter_without_an_expiry_closes_one_window_from_now() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(throttle(&mut c, "CL.COUNTER c 5 10 5")[..3], [0, 5, 0]);
    restore_without_ttl(&mut c, "c", "restored");
    run(&mut c, &["PERSIST", "c"]);
    run(&mut c, &["SET", "set", "5"]);
    run(&mut c, &["SET", "far", "5"]);
    run(&mut c, &["PEXPIREAT", "far", "9223372036855"]);
    for key in ["c", "restored", "set", "far"] {
        // A peek reads the pulled-back window and writes nothing.
        let peek = throttle(&mut c, &format!("CL.COUNTER {key} 5 10 0"));
        assert!(peek[..3] == [0, 5, 0] && peek[4] <= 10, "{key}: {peek:?}");
        let before = pexpiretime(&mut c, key);
        assert!(before == -1 || before == 9_223_372_036_855, "{key}: the peek wrote nothing");
        // A denied call stores the window's close: the key goes within one window.
        let r = throttle(&mut c, &format!("CL.COUNTER {key} 5 10"));
        assert!(r[..3] == [1, 5, 0] && r[3] <= 10 && r[4] <= 10, "{key}: {r:?}");
        let at = pexpiretime(&mut c, key);
        let now = now_ms(&mut c);
        assert!(at > now && at <= now + 10_000, "{key} expires at {at}, now {now}");
    }
    // A count below the limit admits at once, in the same pulled-back window.
    run(&mut c, &["SET", "partial", "3"]);
    let r = throttle(&mut c, "CL.COUNTER partial 5 10");
    assert!(r[..3] == [0, 5, 1] && r[4] <= 10, "{r:?}");
    assert!(pexpiretime(&mut c, "partial") <= now_ms(&mut c) + 10_000);
}

#[test]
fn a_bucket_without_an_expiry_refills_from_now() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(throttle(&mut c, "CL.BUCKET b 5 1 10 5")[..3], [0, 5, 0]);
    restore_without_ttl(&mut c, "b", "restored");
    run(&mut c, &["PERSIST", "b"]);
    run(&mut c, &["SET", "set", "-5"]);
    run(&mut c, &["SET", "far", "-5"]);
    run(&mut c, &["PEXPIREAT", "far", "9223372036855"]);
    for key in ["b", "restored", "set", "far"] {
        let peek = throttle(&mut c, &format!("CL.BUCKET {key} 5 1 10 0"));
        assert_eq!(peek, [0, 5, 0, -1, 50], "{key}: empty, full after its five refills");
        let before = pexpiretime(&mut c, key);
        assert!(before == -1 || before == 9_223_372_036_855, "{key}: the peek wrote nothing");
        assert_eq!(throttle(&mut c, &format!("CL.BUCKET {key} 5 1 10")), [1, 5, 0, 10, 50], "{key}");
        let at = pexpiretime(&mut c, key);
        let now = now_ms(&mut c);
        assert!(at > now && at <= now + 50_000, "{key} expires at {at}, now {now}");
        let stored: i64 = redis::cmd("GET").arg(key).query(&mut c).unwrap();
        assert_eq!(stored, -5, "{key}: the deficit is kept");
    }
}

#[test]
fn lowering_a_buckets_capacity_keeps_its_deficit_as_debt() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(throttle(&mut c, "CL.BUCKET d 10 1 60 10"), [0, 10, 0, -1, 600]);
    let at = pexpiretime(&mut c, "d");
    // The 10 tokens taken stay taken (a deficit above the capacity is debt, as a DEBIT leaves
    // it, and the two cannot be told apart): a check is refused until 5 have come back
    // (300 s), a take of one until 6 have (360 s); full after all 10 (600 s). Nothing is
    // written. (Before DEBIT, the deficit was capped at the new capacity: 60 s and 300 s.)
    assert_eq!(throttle(&mut c, "CL.BUCKET d 5 1 60 0"), [1, 5, 0, 300, 600]);
    assert_eq!(throttle(&mut c, "CL.BUCKET d 5 1 60"), [1, 5, 0, 360, 600]);
    assert_eq!(pexpiretime(&mut c, "d"), at, "a refused take writes nothing");
    let stored: i64 = redis::cmd("GET").arg("d").query(&mut c).unwrap();
    assert_eq!(stored, -10);
}

#[test]
fn ms_replies_never_exceed_what_the_parameters_allow() {
    // Clocks start on the whole millisecond at or before the call, so a counter's window
    // closes within `window`, a bucket refills within `interval` and is full within the
    // refills its deficit needs. (The issue saw 2001, 5001 and 1001.) Many fresh keys, so
    // that calls land at every offset within a millisecond.
    let server = Server::start();
    let mut c = server.client();
    for i in 0..200 {
        let r = throttle(&mut c, &format!("CL.COUNTER fc{i} 5 2000 1 MS"));
        assert!(r[..3] == [0, 5, 4] && (1990..=2000).contains(&r[4]), "{r:?}");
        let r = throttle(&mut c, &format!("CL.BUCKET tb{i} 10 2 1000 10 MS"));
        assert!(r[..3] == [0, 10, 0] && (4990..=5000).contains(&r[4]), "{r:?}");
        let r = throttle(&mut c, &format!("CL.BUCKET tb{i} 10 2 1000 1 MS"));
        assert!(r[..3] == [1, 10, 0] && r[3] <= 1000 && r[4] <= 5000, "{r:?}");
        let r = throttle(&mut c, &format!("CL.COUNTER fc{i} 5 2000 5 MS"));
        assert!(r[..3] == [1, 5, 4] && r[3] <= 2000 && r[4] <= 2000, "{r:?}");
    }
}
