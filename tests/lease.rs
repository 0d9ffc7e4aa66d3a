//! CL.ACQUIRE and CL.RELEASE against real servers: every reply field, the sorted set they keep
//! (member = id, score = expiry in Unix ms, the key expiring with its latest lease), renewals,
//! crashed holders whose slots free themselves, bounded pruning, types, errors that change
//! nothing, and many clients acquiring, releasing and crashing without ever holding more than
//! the limit.
//!
//! skip twin: CL.ACQUIRE and CL.RELEASE are the module's only.

mod harness;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use harness::{Server, error_of, pexpiretime, snapshot, throttle, try_throttle};

fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn release(c: &mut redis::Connection, key: &str, id: &str) -> i64 {
    redis::cmd("CL.RELEASE").arg(key).arg(id).query(c).unwrap()
}

fn leases(c: &mut redis::Connection, key: &str) -> Vec<(String, i64)> {
    redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query(c).unwrap()
}

#[test]
fn the_exports_example_field_by_field() {
    let server = Server::start();
    let mut c = server.client();
    // At most 2 exports of tenant 7 at once, each lease 300 s unless renewed.
    assert_eq!(throttle(&mut c, "CL.ACQUIRE exports:t7 2 300 job-1"), [0, 2, 1, -1, 300]);
    let t = unix_ms();
    assert_eq!(throttle(&mut c, "CL.ACQUIRE exports:t7 2 300 job-2"), [0, 2, 0, -1, 300]);
    let third = throttle(&mut c, "CL.ACQUIRE exports:t7 2 300 job-3");
    assert_eq!(third, [1, 2, 0, 300, 300], "denied until the earliest lease ends");
    // The state: a sorted set of ids scored by their expiry, the key expiring with the latest.
    let held = leases(&mut c, "exports:t7");
    assert_eq!(held.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["job-1", "job-2"]);
    for (_, at) in &held {
        assert!((t + 299_000..=t + 301_000).contains(at), "{held:?}");
    }
    assert_eq!(pexpiretime(&mut c, "exports:t7"), held[1].1);
    // Acquiring with a held id renews it (idempotent); a renewal with a shorter lease shortens it.
    assert_eq!(throttle(&mut c, "CL.ACQUIRE exports:t7 2 600 job-1"), [0, 2, 0, -1, 600]);
    assert_eq!(pexpiretime(&mut c, "exports:t7"), leases(&mut c, "exports:t7")[1].1);
    assert_eq!(throttle(&mut c, "CL.ACQUIRE exports:t7 2 10 job-1"), [0, 2, 0, -1, 300]);
    assert_eq!(pexpiretime(&mut c, "exports:t7"), held[1].1, "back to job-2's expiry");
    // Release: 1 when the id held a live lease, 0 otherwise; the last release removes the key.
    assert_eq!(release(&mut c, "exports:t7", "job-2"), 1);
    assert_eq!(release(&mut c, "exports:t7", "job-2"), 0);
    assert_eq!(release(&mut c, "exports:t7", "nobody"), 0);
    assert_eq!(release(&mut c, "exports:t7", "job-1"), 1);
    let exists = |c: &mut redis::Connection| -> i64 { redis::cmd("EXISTS").arg("exports:t7").query(c).unwrap() };
    assert_eq!(exists(&mut c), 0, "the last release removes the key");
    assert_eq!(release(&mut c, "exports:t7", "job-1"), 0);
    assert_eq!(exists(&mut c), 0, "a release on no key creates nothing");
    // In milliseconds (see no_reply_time_exceeds_the_lease).
    assert_eq!(throttle(&mut c, "CL.ACQUIRE exports:t7 2 1500 job-3 MS"), [0, 2, 1, -1, 1500]);
}

#[test]
fn no_reply_time_exceeds_the_lease() {
    // A lease starts on the whole millisecond at or before the call, as the counter's window
    // and the bucket's refill do: asked for 1500 ms it lasts at most 1500 ms, and no reply says
    // more (a lease ending on the millisecond after `now + lease` replied 1501 almost always).
    let server = Server::start();
    let mut c = server.client();
    for i in 0..5 {
        let key = format!("ms:{i}");
        let before = unix_ms();
        let r = throttle(&mut c, &format!("CL.ACQUIRE {key} 1 1500 a MS"));
        let after = unix_ms();
        assert_eq!(r, [0, 1, 0, -1, 1500], "{key}");
        let score: i64 = redis::cmd("ZSCORE").arg(&key).arg("a").query(&mut c).unwrap();
        assert!(
            (before + 1500..=after + 1500).contains(&score),
            "the lease ends 1500 ms after the call's millisecond: {score} vs {before}..{after}"
        );
        assert_eq!(pexpiretime(&mut c, &key), score);
        let denied = throttle(&mut c, &format!("CL.ACQUIRE {key} 1 1500 b MS"));
        assert!(denied[0] == 1 && denied[3] <= 1500 && denied[3] == denied[4], "{denied:?}");
        assert_eq!(throttle(&mut c, &format!("CL.ACQUIRE {key} 1 1500 a MS")), [0, 1, 0, -1, 1500], "a renewal");
        assert_eq!(throttle(&mut c, &format!("CL.ACQUIRE s:{i} 2 2 a")), [0, 2, 1, -1, 2], "seconds");
    }
}

#[test]
fn a_crashed_holders_slot_frees_itself() {
    let server = Server::start();
    let mut c = server.client();
    let start = Instant::now();
    assert_eq!(throttle(&mut c, "CL.ACQUIRE model 1 300 crashes MS")[0], 0);
    let denied = throttle(&mut c, "CL.ACQUIRE model 1 300 waiting MS");
    // The lease ends 300 ms after the first call's whole millisecond, however long the second
    // took to follow it on a loaded machine.
    let between = start.elapsed().as_millis() as i64;
    assert_eq!(denied[0], 1);
    assert!((299 - between..=300).contains(&denied[3]), "{denied:?} after {between} ms");
    // The holder never releases. Its lease ends, and the key with it.
    std::thread::sleep(Duration::from_millis(denied[3] as u64 + 5));
    assert_eq!(throttle(&mut c, "CL.ACQUIRE model 1 300 waiting MS")[..3], [0, 1, 0]);
    assert_eq!(leases(&mut c, "model").len(), 1, "the expired lease is gone");
    std::thread::sleep(Duration::from_millis(320));
    let exists: i64 = redis::cmd("EXISTS").arg("model").query(&mut c).unwrap();
    assert_eq!(exists, 0, "the key expired with its last lease");
}

#[test]
fn expired_leases_are_removed_with_bounded_work_per_call() {
    let server = Server::start();
    let mut c = server.client();
    // 100 short leases and 5 long ones. The short ones last a second, so that none ends while
    // the others are still being taken on a loaded machine (100 ms did once: a call then removed it).
    for i in 0..100 {
        throttle(&mut c, &format!("CL.ACQUIRE big 1000 1000 short-{i} MS"));
    }
    for i in 0..5 {
        throttle(&mut c, &format!("CL.ACQUIRE big 1000 60000 long-{i} MS"));
    }
    assert_eq!(leases(&mut c, "big").len(), 105, "every short lease still held when the last was taken");
    std::thread::sleep(Duration::from_millis(1050));
    // Each call removes at most 32 expired leases, and still counts only the live ones.
    let card = |c: &mut redis::Connection| -> i64 { redis::cmd("ZCARD").arg("big").query(c).unwrap() };
    let mut sizes = vec![card(&mut c)];
    for i in 0..4 {
        let r = throttle(&mut c, &format!("CL.ACQUIRE big 1000 60000 new-{i} MS"));
        assert_eq!(r[..3], [0, 1000, 1000 - 6 - i], "only live leases count");
        sizes.push(card(&mut c));
    }
    assert_eq!(sizes, [105, 74, 43, 12, 9], "32 removed per call (plus the one added), then the rest");
    // A lowered limit: 9 live, limit 3: denied until the 3rd latest ends.
    let r = throttle(&mut c, "CL.ACQUIRE big 3 60000 another MS");
    assert_eq!(r[..3], [1, 3, 0]);
    assert!((59_000..=60_001).contains(&r[3]), "{r:?}");
    // A set whose leases all ended is replaced at once (DEL, then the new lease).
    for i in 0..200 {
        throttle(&mut c, &format!("CL.ACQUIRE gone 1000 50 w-{i} MS"));
    }
    std::thread::sleep(Duration::from_millis(60));
    let _: () = redis::cmd("PERSIST").arg("gone").query(&mut c).unwrap(); // even without its expiry
    assert_eq!(throttle(&mut c, "CL.ACQUIRE gone 1000 50 fresh MS")[..3], [0, 1000, 999]);
    assert_eq!(leases(&mut c, "gone").len(), 1);
}

#[test]
fn types_are_kept_apart_and_bad_input_changes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    throttle(&mut c, "CL.ACQUIRE leases 5 60 id");
    throttle(&mut c, "CL.THROTTLE tat 1 1 60");
    let _: () = redis::cmd("ZADD").arg("junk").arg("inf").arg("x").query(&mut c).unwrap();
    let _: () = redis::cmd("ZADD").arg("fraction").arg("1.5").arg("x").query(&mut c).unwrap();
    let _: () = redis::cmd("RPUSH").arg("list").arg("x").query(&mut c).unwrap();
    let before = snapshot(&mut c);
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    let long = "x".repeat(129);
    let calls = [
        ("CL.ACQUIRE leases 5 60".to_string(), "ERR wrong number of arguments for 'cl.acquire' command"),
        ("CL.ACQUIRE leases 5 60 id MS 1".into(), "ERR syntax error"),
        ("CL.ACQUIRE leases 5 60 id MS SHADOW 1".into(), "ERR wrong number of arguments for 'cl.acquire' command"),
        ("CL.ACQUIRE leases 5 60 id 1".into(), "ERR syntax error"),
        ("CL.ACQUIRE leases x 60 id".into(), "ERR value is not an integer or out of range"),
        ("CL.ACQUIRE leases 0 60 id".into(), "ERR limit must be an integer from 1 to 10000"),
        ("CL.ACQUIRE leases 10001 60 id".into(), "ERR limit must be an integer from 1 to 10000"),
        ("CL.ACQUIRE leases 5 0 id".into(), "ERR lease must be an integer from 1 to 1000000000 (seconds)"),
        (format!("CL.ACQUIRE leases 5 60 {long}"), "ERR id must be a string of 1 to 128 bytes"),
        (format!("CL.RELEASE leases {long}"), "ERR id must be a string of 1 to 128 bytes"),
        ("CL.RELEASE leases".into(), "ERR wrong number of arguments for 'cl.release' command"),
        ("CL.RELEASE leases id MS".into(), "ERR wrong number of arguments for 'cl.release' command"),
        ("CL.ACQUIRE tat 5 60 id".into(), wrongtype),
        ("CL.RELEASE tat id".into(), wrongtype),
        ("CL.ACQUIRE list 5 60 id".into(), wrongtype),
        ("CL.RELEASE list id".into(), wrongtype),
        ("CL.ACQUIRE junk 5 60 id".into(), "ERR key does not hold valid CL.ACQUIRE state"),
        ("CL.RELEASE fraction x".into(), "ERR key does not hold valid CL.ACQUIRE state"),
        // A lease set is no string limiter's state.
        ("CL.THROTTLE leases 1 1 60".into(), wrongtype),
        ("CL.WINDOW leases 1 60".into(), wrongtype),
        ("CL.BUCKET leases 1 1 60".into(), wrongtype),
        ("CL.COUNTER leases 1 60".into(), wrongtype),
        ("CL.PACE leases 1 60".into(), wrongtype),
        ("CL.ALL 1 leases COUNTER 1 60".into(), wrongtype),
    ];
    for (words, want) in &calls {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        assert_eq!(error_of(&mut c, &args), *want, "{words}");
    }
    assert_eq!(snapshot(&mut c), before, "no error changed any key");
    assert!(try_throttle(&mut c, "CL.ACQUIRE leases 10000 1000000000 id").is_ok(), "the stated maxima are accepted");
    // Binary-safe ids of up to 128 bytes.
    let id = vec![0u8, 255, b' ', b'\r', b'\n'];
    let r: Vec<i64> = redis::cmd("CL.ACQUIRE").arg("bin").arg(1).arg(60).arg(&id).query(&mut c).unwrap();
    assert_eq!(r[0], 0);
    let n: i64 = redis::cmd("CL.RELEASE").arg("bin").arg(&id).query(&mut c).unwrap();
    assert_eq!(n, 1);
}

/// A sorted set holding anything but leases of these commands (a score that is no whole
/// millisecond from 1 to the year 2262, a member that is no id) is never wiped: every call that
/// reads such a member is `ERR key does not hold valid CL.ACQUIRE state` and writes nothing, a
/// call deletes or replaces a set only after reading every member, and removes only members it
/// read.
#[test]
fn sets_holding_other_data_are_never_wiped() {
    let server = Server::start();
    let mut c = server.client();
    let zadd = |c: &mut redis::Connection, key: &str, pairs: &[(&str, &[u8])]| {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(key);
        for (score, member) in pairs {
            cmd.arg(*score).arg(*member);
        }
        let _: () = cmd.query(c).unwrap();
    };
    let now = harness::server_ms(&mut c);
    let live = (now + 600_000).to_string();
    let too_long = vec![b'm'; 129];
    zadd(&mut c, "mixed", &[("1000.5", b"other"), ("2000", b"x")]);
    zadd(&mut c, "neginf", &[("-inf", b"x")]);
    zadd(&mut c, "zero", &[("0", b"x"), (&live, b"y")]);
    zadd(&mut c, "empty", &[("2000", b"")]);
    zadd(&mut c, "long", &[("2000", &too_long), ("3000", b"x")]);
    zadd(&mut c, "beyond", &[("1e16", b"x")]);
    let before = snapshot(&mut c);
    for key in ["mixed", "neginf", "zero", "empty", "long", "beyond"] {
        for words in
            [format!("CL.ACQUIRE {key} 5 60 job1"), format!("CL.RELEASE {key} x"), format!("CL.RELEASE {key} job1")]
        {
            let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
            assert_eq!(error_of(&mut c, &args), "ERR key does not hold valid CL.ACQUIRE state", "{words}");
        }
    }
    assert_eq!(snapshot(&mut c), before, "every set as it was");

    // 40 expired leases, another application's member above them, a live lease: each call
    // removes the 32 lowest it read, never the member above; the call that reads it refuses.
    let mut pairs: Vec<(String, Vec<u8>)> =
        (0..40).map(|i| ((1000 + i).to_string(), format!("w{i:02}").into_bytes())).collect();
    pairs.push(("5000.5".into(), b"foreign".to_vec()));
    pairs.push((live.clone(), b"holder".to_vec()));
    let pairs: Vec<(&str, &[u8])> = pairs.iter().map(|(s, m)| (s.as_str(), m.as_slice())).collect();
    zadd(&mut c, "shared", &pairs);
    assert_eq!(throttle(&mut c, "CL.ACQUIRE shared 5 60 job1")[..3], [0, 5, 3]);
    let left: Vec<(String, String)> =
        redis::cmd("ZRANGE").arg("shared").arg(0).arg(-1).arg("WITHSCORES").query(&mut c).unwrap();
    assert_eq!(left.len(), 42 - 32 + 1, "{left:?}");
    assert!(left.iter().any(|(m, _)| m == "foreign"));
    let before = snapshot(&mut c);
    assert_eq!(
        error_of(&mut c, &[b"CL.ACQUIRE", b"shared", b"5", b"60", b"job2"]),
        "ERR key does not hold valid CL.ACQUIRE state"
    );
    assert_eq!(error_of(&mut c, &[b"CL.RELEASE", b"shared", b"job1"]), "ERR key does not hold valid CL.ACQUIRE state");
    assert_eq!(snapshot(&mut c), before);
}

/// Many clients acquire, work a little and release; some crash (their connection drops, the
/// lease left to expire). A sampler counts the live leases at the server's own instant: never
/// more than the limit.
#[test]
fn many_clients_with_crashes_never_hold_more_than_the_limit() {
    const LIMIT: i64 = 5;
    const CLIENTS: usize = 16;
    let server = Server::start();
    let stop = AtomicBool::new(false);
    let run = Duration::from_secs(4);
    let (samples, admitted, crashed) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..CLIENTS)
            .map(|w| {
                let (server, stop) = (&server, &stop);
                scope.spawn(move || {
                    let mut c = server.client();
                    let (mut admitted, mut crashed, mut seq) = (0, 0, 0);
                    while !stop.load(Ordering::Relaxed) {
                        seq += 1;
                        let id = format!("w{w}-{seq}");
                        let asked = Instant::now();
                        let r = throttle(&mut c, &format!("CL.ACQUIRE pool {LIMIT} 500 {id} MS"));
                        if r[0] == 1 {
                            std::thread::sleep(Duration::from_millis(r[3].clamp(1, 20) as u64));
                            continue;
                        }
                        admitted += 1;
                        std::thread::sleep(Duration::from_millis(rand::random::<u64>() % 40));
                        if rand::random::<u32>().is_multiple_of(5) {
                            // A crash: the lease is left to expire, the connection dropped.
                            crashed += 1;
                            c = server.client();
                            continue;
                        }
                        let released = release(&mut c, "pool", &id);
                        // A holder still within its lease releases it (on a loaded machine a
                        // worker may oversleep its lease: then its slot has already gone). The
                        // lease starts on the call's whole millisecond, up to 1 ms before it.
                        let live = asked.elapsed() < Duration::from_millis(499);
                        assert!(
                            released == 1 || !live,
                            "{id}, admitted with {r:?}, released {released} within its lease"
                        );
                    }
                    (admitted, crashed)
                })
            })
            .collect();
        let sampler = scope.spawn(|| {
            let mut c = server.client();
            let script = redis::Script::new(
                "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) \
                 return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')",
            );
            let started = Instant::now();
            let mut samples = Vec::new();
            while started.elapsed() < run {
                let live: i64 = script.key("pool").invoke(&mut c).unwrap();
                samples.push(live);
            }
            stop.store(true, Ordering::Relaxed);
            samples
        });
        let samples = sampler.join().unwrap();
        let (admitted, crashed) =
            workers.into_iter().map(|w| w.join().unwrap()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        (samples, admitted, crashed)
    });
    let most = *samples.iter().max().unwrap();
    let at_limit = samples.iter().filter(|&&n| n == LIMIT).count();
    eprintln!(
        "{} samples, most live {most}, at the limit in {at_limit}; {admitted} leases, {crashed} crashes",
        samples.len()
    );
    assert!(most <= LIMIT, "never more than {LIMIT} live leases: {most}");
    assert!(at_limit > samples.len() / 4, "the pool was saturated");
    assert!(crashed > 5 && admitted > 50, "crashes happened and slots came back: {admitted} leases, {crashed} crashes");
}
