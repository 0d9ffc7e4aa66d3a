//! Memory pressure: under `maxmemory` with `noeviction` every command answers the OOM error
//! and nothing changes; with an eviction policy, an evicted limiter behaves as a full one.

mod harness;

use harness::{Server, error_of, snapshot, throttle};

const CALLS: &[&str] = &[
    "CL.THROTTLE {key} 4 1 600",
    "CL.WINDOW {key} 5 600",
    "CL.WINDOW {key} 5 600 PRECISION 60",
    "CL.BUCKET {key} 5 1 600",
    "CL.COUNTER {key} 5 600",
];

fn words(i: usize, key: &str, quantity: i64) -> String {
    format!("{} {quantity}", CALLS[i].replace("{key}", key))
}

fn used_memory(server: &Server) -> i64 {
    server.info_field("memory", "used_memory").parse().unwrap()
}

/// Writes plain keys until the server refuses one with OOM.
fn fill_until_oom(c: &mut redis::Connection) {
    let blob = "x".repeat(10_000);
    for i in 0..100_000 {
        let r: redis::RedisResult<()> = redis::cmd("SET").arg(format!("filler:{i}")).arg(&blob).query(c);
        if let Err(e) = r {
            assert_eq!(e.code(), Some("OOM"), "{e}");
            return;
        }
    }
    panic!("the server never reached its maxmemory");
}

#[test]
fn noeviction_answers_oom_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    for i in 0..CALLS.len() {
        throttle(&mut c, &words(i, &format!("rl:{i}"), 2));
    }
    let limit = used_memory(&server) + 200_000;
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(limit).query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("noeviction").query(&mut c).unwrap();
    fill_until_oom(&mut c);
    let before = snapshot(&mut c);
    for i in 0..CALLS.len() {
        // Existing limiters, new ones, peeks and refunds alike: the command is deny-oom.
        for (key, quantity) in
            [(format!("rl:{i}"), 1), (format!("new:{i}"), 1), (format!("rl:{i}"), 0), (format!("rl:{i}"), -1)]
        {
            let w = words(i, &key, quantity);
            let args: Vec<&[u8]> = w.split_whitespace().map(str::as_bytes).collect();
            let e = error_of(&mut c, &args);
            assert!(e.starts_with("OOM"), "{w}: {e}");
        }
    }
    assert_eq!(snapshot(&mut c), before, "nothing changed");
    // With room again, the limiters continue where they were.
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(&mut c).unwrap();
    for (i, call) in CALLS.iter().enumerate() {
        assert_eq!(throttle(&mut c, &words(i, &format!("rl:{i}"), 0))[..3], [0, 5, 3], "{call}");
    }
}

#[test]
fn evicted_limiters_behave_as_full_ones() {
    for policy in ["volatile-ttl", "allkeys-lru"] {
        let server = Server::start();
        let mut c = server.client();
        let limiters = 200;
        for n in 0..limiters {
            for i in 0..CALLS.len() {
                assert_eq!(throttle(&mut c, &words(i, &format!("rl:{n}:{i}"), 5))[0], 0);
            }
        }
        let limit = used_memory(&server) + 300_000;
        let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(limit).query(&mut c).unwrap();
        let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg(policy).query(&mut c).unwrap();
        // Push well past the limit: the server evicts to make room.
        let blob = "x".repeat(10_000);
        for f in 0..200 {
            let _: redis::RedisResult<()> = redis::cmd("SET").arg(format!("filler:{f}")).arg(&blob).query(&mut c);
        }
        let evicted: i64 = server.info_field("stats", "evicted_keys").parse().unwrap();
        let exists: Vec<Vec<bool>> = (0..limiters)
            .map(|n| {
                (0..CALLS.len())
                    .map(|i| redis::cmd("EXISTS").arg(format!("rl:{n}:{i}")).query(&mut c).unwrap())
                    .collect()
            })
            .collect();
        // Room again (with volatile-ttl the fillers, without expiry, are never evicted).
        let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(&mut c).unwrap();
        let (mut gone, mut kept) = (0, 0);
        for n in 0..limiters {
            for i in 0..CALLS.len() {
                let key = format!("rl:{n}:{i}");
                let exists = exists[n][i];
                let reply = throttle(&mut c, &words(i, &key, 0));
                if exists {
                    kept += 1;
                    assert_eq!(reply[..3], [0, 5, 0], "{policy}: a kept limiter is still used up");
                } else {
                    gone += 1;
                    assert_eq!(reply, [0, 5, 5, -1, 0], "{policy}: an evicted limiter reads as full");
                }
            }
        }
        eprintln!(
            "{policy}: {evicted} keys evicted; {gone} limiters evicted (read as full), {kept} kept (still used up)"
        );
        assert!(gone > 0, "{policy}: some limiters were evicted");
    }
}

/// The other limiter commands are `deny-oom` too (CL.ALL, CL.PACE, CL.ACQUIRE, renewals and
/// peeks included); CL.RELEASE is not (like `ZREM`, it only ever frees memory): under
/// `noeviction` at `maxmemory` a holder can still give its lease back. CL.TOP (read-only) runs.
///
/// skip twin: the leases are the module's only.
#[test]
fn under_noeviction_a_lease_can_still_be_released() {
    let server = Server::start();
    let mut c = server.client();
    throttle(&mut c, "CL.ACQUIRE pool 5 600 a");
    throttle(&mut c, "CL.ACQUIRE pool 5 600 b");
    throttle(&mut c, "CL.PACE pacer 1 600");
    throttle(&mut c, "CL.COUNTER all:c 5 600");
    let limit = used_memory(&server) + 200_000;
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(limit).query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("noeviction").query(&mut c).unwrap();
    fill_until_oom(&mut c);
    let before = snapshot(&mut c);
    for words in [
        "CL.ACQUIRE pool 5 600 c",
        "CL.ACQUIRE pool 5 600 a",
        "CL.ACQUIRE fresh 5 600 a",
        "CL.PACE pacer 1 600",
        "CL.PACE pacer 1 600 QUANTITY 0",
        "CL.ALL 2 all:c all:t COUNTER 5 600 THROTTLE 4 1 600",
        "CL.ALL 1 all:c COUNTER 5 600 QUANTITY 0",
    ] {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        let e = error_of(&mut c, &args);
        assert!(e.starts_with("OOM"), "{words}: {e}");
    }
    assert_eq!(snapshot(&mut c), before, "nothing changed");
    let released: i64 = redis::cmd("CL.RELEASE").arg("pool").arg("a").query(&mut c).unwrap();
    assert_eq!(released, 1, "a release runs at maxmemory");
    let holders: Vec<String> = redis::cmd("ZRANGE").arg("pool").arg(0).arg(-1).query(&mut c).unwrap();
    assert_eq!(holders, ["b"]);
    let released: i64 = redis::cmd("CL.RELEASE").arg("pool").arg("nobody").query(&mut c).unwrap();
    assert_eq!(released, 0);
    let _: redis::Value = redis::cmd("CL.TOP").query(&mut c).unwrap();
}
