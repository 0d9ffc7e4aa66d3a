//! The test kit (`Throttle::in_memory`, `redis-throttle-core` with a manual clock) against the
//! module: the same random calls (every algorithm, parameters changed on live keys, peeks,
//! refunds, quantities above the limit, debits (`DEBIT`: past the limit, 0 as a check), CL.ALL
//! with and without `DEBIT`, calendar quotas in zones and from anchors) at
//! the same instants give the same decisions, and the kit's keys hold the module's bytes and
//! absolute expiries.
//!
//! One instant, no tolerance: the module's clock is pinned (`CL.DEBUG CLOCK`, loaded with
//! `DEBUG-COMMANDS yes`) to the kit's before every call. The pinned clock runs a day ahead of
//! the server's real one, so Redis's own expiry (by its real clock) never acts during the run;
//! instead the test expires a key on the server when the pinned clock passes its expiry (the
//! kit forgets it then), as a server whose clock is the pinned one would.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::time::Duration;

use harness::{Options, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis_throttle_client::{Config, ManualClock, Policy, Throttle};

const CALLS: usize = 3_000;
const KEYS: [&str; 8] = ["t", "t2", "w", "wp", "b", "c", "q", "q2"];

fn policies() -> Vec<(Policy, &'static str)> {
    [
        ("5/s", "t"),
        ("30/m burst 3", "t"),
        ("7/1500ms burst 2", "t2"),
        ("4/s window", "w"),
        ("6/2s window", "w"),
        ("50/10s window precision 1s", "wp"),
        ("50/10s window precision 500ms", "wp"),
        ("3/s bucket burst 5", "b"),
        ("1/700ms bucket burst 2", "b"),
        ("4/2s counter", "c"),
        ("3/1s counter", "c"),
        // Calendar quotas: minutes cross many boundaries in a run; an anchor off the second,
        // an offset and an IANA zone; a changed period on a live key carries its count.
        ("5/min quota", "q"),
        ("6/min quota anchor 2026-01-01T00:00:17.250Z", "q"),
        ("4/min quota tz +05:30", "q"),
        ("30/h quota tz Asia/Kolkata", "q2"),
        ("25/h quota", "q2"),
        ("40/day quota tz Europe/Berlin", "q2"),
    ]
    .into_iter()
    .map(|(spec, key)| (Policy::parse(spec).unwrap(), key))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_kit_decides_exactly_as_the_module() {
    let server = Server::with(Options::default().debug_commands());
    let mut raw = server.client();
    let config = Config { deny_cache: 0, deadline: Duration::from_secs(5), ..Config::default() };
    let module = Throttle::connect_with(&server.url(), config).await.unwrap();
    let real_ms = harness::server_ms(&mut raw);
    let clock = ManualClock::at_unix_ms(real_ms + 86_400_000);
    let kit = Throttle::in_memory(clock.clone(), Config::default());
    let mut now_us = (real_ms + 86_400_000) * 1000;

    let seed: u64 = std::env::var("THROTTLE_DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    let mut rng = StdRng::seed_from_u64(seed);
    let policies = policies();
    for call in 0..CALLS {
        // Move both clocks on by the same step: often none, sometimes across a whole window.
        let step_us: i64 = match rng.random_range(0..10) {
            0..=2 => 0,
            3..=6 => rng.random_range(1..400_000),
            7..=8 => rng.random_range(1..20) * 1000,
            _ => rng.random_range(1_000_000..4_000_000),
        };
        now_us += step_us;
        clock.set_unix_ms(0);
        clock.advance(Duration::from_micros(u64::try_from(now_us).unwrap()));
        redis::cmd("CL.DEBUG").arg("CLOCK").arg(now_us).query::<()>(&mut raw).unwrap();
        for key in KEYS {
            if kit.stored(key).is_none() {
                redis::cmd("DEL").arg(key).query::<()>(&mut raw).unwrap();
            }
        }

        let context = format!("seed {seed}, call {call}");
        if rng.random_bool(0.15) {
            // CL.ALL of two or three limiters on distinct keys.
            let n = rng.random_range(2..=3);
            let mut picked: Vec<&(Policy, &str)> = Vec::new();
            while picked.len() < n {
                let p = &policies[rng.random_range(0..policies.len())];
                if picked.iter().all(|q| q.1 != p.1) {
                    picked.push(p);
                }
            }
            let calls: Vec<(&Policy, &[u8], u32)> =
                picked.iter().map(|(p, k)| (p, k.as_bytes(), rng.random_range(1..=2))).collect();
            let (a, b) = if rng.random_bool(0.3) {
                (module.debit_all(&calls).await, kit.debit_all(&calls).await)
            } else {
                (module.check_all(&calls).await, kit.check_all(&calls).await)
            };
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(
                        (a.numbers(), a.binding, &a.each),
                        (b.numbers(), b.binding, &b.each),
                        "{context}: CL.ALL {calls:?}"
                    );
                }
                (a, b) => assert_eq!(format!("{:?}", a.map(|_| ())), format!("{:?}", b.map(|_| ())), "{context}"),
            }
        } else {
            let (policy, key) = &policies[rng.random_range(0..policies.len())];
            let (a, b) = match rng.random_range(0..10) {
                0 => (module.peek(policy, key).await, kit.peek(policy, key).await),
                1 => {
                    let n = rng.random_range(1..=3);
                    (module.refund(policy, key, n).await, kit.refund(policy, key, n).await)
                }
                2 => {
                    let n = u32::try_from(policy.limit()).unwrap() + 1;
                    (module.check_n(policy, key, n).await, kit.check_n(policy, key, n).await)
                }
                3 | 4 => {
                    // A charge: up to two over the limit, 0 as a check.
                    let n = rng.random_range(0..=u32::try_from(policy.limit()).unwrap() + 2);
                    (module.debit(policy, key, n).await, kit.debit(policy, key, n).await)
                }
                _ => {
                    let n = rng.random_range(1..=2);
                    (module.check_n(policy, key, n).await, kit.check_n(policy, key, n).await)
                }
            };
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    if std::env::var("THROTTLE_DIFF_TRACE").is_ok() {
                        eprintln!("{context} now_us {now_us}: {policy} on {key}: {:?}", a.numbers());
                    }
                    assert_eq!(a.numbers(), b.numbers(), "{context}: {policy} on {key}")
                }
                (Err(a), Err(b)) => {
                    // The same refusal (WRONGTYPE when a key changes algorithm is impossible here:
                    // each key keeps one algorithm).
                    panic!("{context}: both refused: {a} / {b}");
                }
                (a, b) => panic!("{context}: {policy} on {key}: module {a:?}, kit {b:?}"),
            }
        }
        for key in KEYS {
            if let Some((bytes, expires)) = kit.stored(key) {
                let server_bytes: Vec<u8> = redis::cmd("GET").arg(key).query(&mut raw).unwrap();
                let server_expiry = harness::pexpiretime(&mut raw, key);
                assert_eq!((&server_bytes, Some(server_expiry)), (&bytes, expires), "{context}: key {key}");
            }
        }
    }
}
