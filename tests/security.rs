//! Security: ACL users restricted by key pattern or command reach no other limiter, a
//! read-only replica refuses every limiter, and no argument makes a call long or big.
//! (tests/registration.rs covers the basic key pattern and category rules.)
//!
//! skip containers: needs read-only replicas.

mod harness;

use harness::{Options, Server, call, error_of, throttle};
use std::time::{Duration, Instant};

const CALLS: &[(&str, &str)] = &[
    ("cl.throttle", "CL.THROTTLE {key} 4 1 60"),
    ("cl.window", "CL.WINDOW {key} 5 60"),
    ("cl.bucket", "CL.BUCKET {key} 5 1 60"),
    ("cl.counter", "CL.COUNTER {key} 5 60"),
];

/// The call on `key` (one key per kind: `key:<command>`).
fn args(template: &str, key: &str) -> Vec<Vec<u8>> {
    with_key(template, key).split_whitespace().map(|w| w.as_bytes().to_vec()).collect()
}

fn with_key(template: &str, key: &str) -> String {
    let kind = template.split_whitespace().next().unwrap_or("").to_lowercase();
    template.replace("{key}", &format!("{key}:{kind}"))
}

fn refs(a: &[Vec<u8>]) -> Vec<&[u8]> {
    a.iter().map(Vec::as_slice).collect()
}

fn user(server: &Server, name: &str, rules: &str) -> redis::Connection {
    let mut admin = server.client();
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(name).arg("on").arg(">pw").arg(rules.split_whitespace().collect::<Vec<_>>());
    let _: () = cmd.query(&mut admin).unwrap();
    let mut c = server.client();
    let _: () = redis::cmd("AUTH").arg(name).arg("pw").query(&mut c).unwrap();
    c
}

/// skip twin: ACL rules naming the module's commands.
#[test]
fn acl_users_reach_only_their_limiters() {
    let server = Server::start();
    // Tenant A may use every limiter, on its own keys only.
    let mut a = user(&server, "tenant-a", "~a:* -@all +cl.throttle +cl.window +cl.bucket +cl.counter");
    // Only CL.THROTTLE, on any key; and a user whose keys are read-only (%R~).
    let mut t = user(&server, "throttle-only", "~* -@all +cl.throttle");
    let mut r = user(&server, "reader", "%R~* +@all");
    for (name, template) in CALLS {
        assert_eq!(throttle(&mut a, &with_key(template, "a:1"))[0], 0, "{name} on its own key");
        let e = error_of(&mut a, &refs(&args(template, "b:1")));
        assert!(e.starts_with("NOPERM"), "{name} on another tenant's key: {e}");
        let e = error_of(&mut r, &refs(&args(template, "a:1")));
        assert!(e.starts_with("NOPERM"), "{name} needs write access to its key: {e}");
        if *name != "cl.throttle" {
            let e = error_of(&mut t, &refs(&args(template, "t:1")));
            assert!(e.starts_with("NOPERM"), "{name} is not granted: {e}");
        }
    }
    // No limiter command gives a tenant a way to read or write other keys directly.
    let e = error_of(&mut a, &[b"GET", b"a:1"]);
    assert!(e.starts_with("NOPERM"), "{e}");
    let mut admin = server.client();
    let others: Vec<String> = redis::cmd("KEYS").arg("b:*").query(&mut admin).unwrap();
    assert!(others.is_empty(), "nothing was created under other keys: {others:?}");
    // On Redis 7.0 the module cannot declare ACL categories: `-@write` does not cover the
    // limiters there (name them, as above); 7.2+ puts them in @write and @fast.
    let mut w = user(&server, "no-write", "~* +@all -@write");
    let outcome = harness::try_throttle(&mut w, "CL.THROTTLE w:1 4 1 60");
    if server.version() >= (7, 2, 0) {
        assert!(outcome.is_err(), "7.2+: -@write covers the limiters");
    } else {
        assert!(outcome.is_ok(), "7.0: -@write does not cover module commands (documented)");
    }
}

#[test]
fn a_read_only_replica_refuses_every_limiter() {
    let master = Server::start();
    let mut m = master.client();
    for (_, template) in CALLS {
        throttle(&mut m, &with_key(template, "k"));
    }
    let replica = master.replica(Options::default());
    master.wait_replicated(&replica);
    let mut c = replica.client();
    let before = harness::snapshot(&mut c);
    for (name, template) in CALLS {
        for key in ["k", "fresh"] {
            let mut a = args(template, key);
            for quantity in ["1", "0", "-1"] {
                a.push(quantity.as_bytes().to_vec());
                let e = error_of(&mut c, &refs(&a));
                assert!(e.starts_with("READONLY"), "{name} {quantity} on a replica: {e}");
                a.pop();
            }
        }
    }
    assert_eq!(harness::snapshot(&mut c), before, "the replica changed nothing");
}

/// Calls that would be long or big if a parameter were unbounded: each answers an error or
/// a denial, fast, and the server stays small.
#[test]
fn huge_arguments_are_refused_or_denied_fast() {
    let server = Server::start();
    let mut c = server.client();
    let max = i64::MAX.to_string();
    let refused: &[&str] = &[
        "CL.THROTTLE k1 9223372036854775806 1 1", // DVT overflows
        "CL.THROTTLE k1 1 1 9223372036854775807", // period overflows in ns
        "CL.WINDOW k2 100001 60",                 // an exact log over 100,000 entries
        "CL.WINDOW k2 5 10001 PRECISION 1",       // more than 10,000 buckets
        "CL.WINDOW k2 5 9223372036854775807 MS PRECISION 1 MS",
        "CL.BUCKET k3 9223372036854775807 1 1", // the refill time of a full bucket overflows
        "CL.COUNTER k4 1000000000000000000 60", // a count that could read as a TAT
    ];
    for words in refused {
        let a: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        let t = Instant::now();
        let e = error_of(&mut c, &a);
        assert!(e.starts_with("ERR"), "{words}: {e}");
        assert!(t.elapsed() < Duration::from_millis(200), "{words} took {:?}", t.elapsed());
    }
    // Quantities beyond the limit are denied without work, whatever their size.
    for template in [
        "CL.THROTTLE q1 4 1 60",
        "CL.WINDOW q2 100000 60",
        "CL.WINDOW q3 5 10000 PRECISION 1",
        "CL.BUCKET q4 5 1 60",
        "CL.COUNTER q5 5 60",
    ] {
        let t = Instant::now();
        let r = throttle(&mut c, &format!("{template} {max}"));
        assert_eq!((r[0], r[3]), (1, -1), "{template} {max}: never admittable");
        assert!(t.elapsed() < Duration::from_millis(200), "{template} took {:?}", t.elapsed());
    }
    // The largest allowed calls: the most a single call can cost.
    let mut worst = Duration::ZERO;
    for words in
        ["CL.WINDOW big 100000 60 100000", "CL.WINDOW big 100000 60 1", "CL.WINDOW ring 1000 10000 PRECISION 1 1"]
    {
        let t = Instant::now();
        throttle(&mut c, words);
        worst = worst.max(t.elapsed());
    }
    let big: i64 = redis::cmd("STRLEN").arg("big").query(&mut c).unwrap();
    let ring: i64 = redis::cmd("STRLEN").arg("ring").query(&mut c).unwrap();
    eprintln!("largest calls: {worst:?} at worst; exact log at its limit {big} B, 10,000-bucket ring {ring} B");
    assert!(big <= 8 + 16 * 100_000 && ring <= 24 + 8 * 10_001, "{big} {ring}");
    assert!(worst < Duration::from_millis(100), "{worst:?}");
    assert!(server.is_alive_ref());
}

/// skip twin: CL.PACE and the leases are the module's only.
#[test]
fn pace_and_leases_obey_key_patterns_categories_and_read_only_replicas() {
    let master = Server::start();
    let mut a = user(&master, "tenant-a", "~a:* -@all +cl.pace +cl.acquire +cl.release");
    let mine = ["CL.PACE a:p 10 1", "CL.ACQUIRE a:l 5 60 job", "CL.RELEASE a:l job"];
    for words in mine {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        assert!(harness::call(&mut a, &args).is_ok(), "{words} on its own key");
        let other = words.replace(" a:", " b:");
        let args: Vec<&[u8]> = other.split_whitespace().map(str::as_bytes).collect();
        let e = error_of(&mut a, &args);
        assert!(e.starts_with("NOPERM"), "{other}: {e}");
    }
    if master.version() >= (7, 2, 0) {
        // CL.PACE is in @blocking (BLOCK may hold the connection); the leases are not.
        let mut nb = user(&master, "no-blocking", "~* +@all -@blocking");
        let e = error_of(&mut nb, &[b"CL.PACE", b"x", b"10", b"1"]);
        assert!(e.starts_with("NOPERM"), "{e}");
        assert_eq!(throttle(&mut nb, "CL.ACQUIRE x:l 5 60 job")[0], 0);
    }
    let replica = master.replica(Options::default());
    let mut r = replica.client();
    for words in ["CL.PACE a:p 10 1", "CL.PACE a:p 10 1 QUANTITY 0", "CL.ACQUIRE a:l 5 60 job", "CL.RELEASE a:l job"] {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        let e = error_of(&mut r, &args);
        assert!(e.starts_with("READONLY"), "{words} on a replica: {e}");
    }
}

/// Every limiter at its largest limit, charged its largest quantity twice in a row: the
/// second call is a denial (retried when the first units leave), never an internal error.
///
/// skip twin: limits above 2^53 - 1, which the twin refuses (tests/twin.rs tests that refusal).
#[test]
fn the_largest_limits_deny_what_would_add_up_past_them() {
    let server = Server::start();
    let mut c = server.client();
    let max = i64::MAX;
    for (words, limit) in [
        (
            "CL.THROTTLE t 999999999999999999 1000000000000000000 1000000000 1000000000000000000",
            1_000_000_000_000_000_000,
        ),
        ("CL.WINDOW e 100000 10 100000", 100_000),
        ("CL.WINDOW p 9223372036854775807 10 PRECISION 1 9223372036854775807", max),
        ("CL.BUCKET b 9223372036854775807 9223372036854775807 60 9223372036854775807", max),
        ("CL.COUNTER c 999999999999999999 10 999999999999999999", 999_999_999_999_999_999),
        ("CL.ALL 2 {a}p {a}c WINDOW 9223372036854775807 10 PRECISION 1 QUANTITY 9223372036854775807 COUNTER 5 10", max),
    ] {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        let first: Vec<i64> = redis::FromRedisValue::from_redis_value(call(&mut c, &args).unwrap()).unwrap();
        assert_eq!(first[..3], [0, limit, 0], "{words}: admitted, nothing left");
        let second: Vec<i64> =
            redis::FromRedisValue::from_redis_value(call(&mut c, &args).unwrap_or_else(|e| panic!("{words}: {e}")))
                .unwrap();
        assert_eq!(second[..2], [1, limit], "{words}: denied");
        assert!(second[3] >= 1, "{words}: retried once the first units leave: {second:?}");
    }
}
