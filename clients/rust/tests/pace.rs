//! Pacing against the module: paced calls leave evenly spaced, whether the client sleeps or
//! the server blocks; a blocking call waits on a connection of its own, so calls on the shared
//! connection are not stuck behind it.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use harness::Server;
use redis_throttle_client::{Config, Paced, Policy, Rate, Throttle, Wait};

async fn spaced(client: &Throttle, key: &str, how: Wait) -> Vec<Duration> {
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (client, key) = (client.clone(), key.to_string());
        tasks.spawn(async move {
            let paced = client.pace(&key, Rate::per_second(10), Duration::from_secs(1), how).await.unwrap();
            assert!(matches!(paced, Paced::Go { .. }), "{paced:?}");
            start.elapsed()
        });
    }
    let mut done = Vec::new();
    while let Some(r) = tasks.join_next().await {
        done.push(r.unwrap());
    }
    done.sort();
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_calls_leave_evenly_spaced() {
    let server = Server::start();
    let client =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    for (key, how) in [("sleep", Wait::Sleep), ("block", Wait::Block)] {
        // Slot k is 100 ms after slot k - 1, the first at or after the start: no call leaves
        // before its slot (a call late on a loaded machine may leave closer to the next one).
        let done = spaced(&client, key, how).await;
        for (k, at) in done.iter().enumerate() {
            assert!(
                *at + Duration::from_millis(5) >= Duration::from_millis(100 * k as u64),
                "{how:?}: slot {k} left at {at:?}: {done:?}"
            );
        }
    }
    // With a jitter of up to 40 ms: never before its slot (k × 100 ms).
    let done = spaced(&client, "jitter", Wait::SleepWithJitter(Duration::from_millis(40))).await;
    for (k, at) in done.iter().enumerate() {
        assert!(*at >= Duration::from_millis(100 * k as u64), "slot {k} left at {at:?}: {done:?}");
    }
    eprintln!("with a 40 ms jitter, four paced calls left at {done:?}");

    // While blocking calls wait on the server, the shared connection keeps answering.
    let policy = Policy::parse("100/s").unwrap();
    let blocked = {
        let client = client.clone();
        tokio::spawn(async move {
            for _ in 0..3 {
                client.pace("slow", Rate::per_second(2), Duration::from_secs(2), Wait::Block).await.unwrap();
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..5 {
        let start = Instant::now();
        client.check(&policy, "other").await.unwrap();
        assert!(
            start.elapsed() < Duration::from_millis(100),
            "a check waited {:?} behind a blocking call",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    blocked.await.unwrap();

    // A blocked call waits as long as its slot is away, past the redis crate's default
    // response timeout (500 ms): the server replies at the slot, 1.5 s from now.
    let start = Instant::now();
    for _ in 0..2 {
        let paced = client.pace("far", Rate::per_minute(40), Duration::from_secs(3), Wait::Block).await.unwrap();
        assert!(matches!(paced, Paced::Go { .. }), "{paced:?}");
    }
    assert!(
        start.elapsed() >= Duration::from_millis(1400),
        "the second slot is 1.5 s after the first: {:?}",
        start.elapsed()
    );

    // No slot within MAXWAIT: refused, with when one frees.
    client.pace("busy", Rate::per_second(1), Duration::ZERO, Wait::Sleep).await.unwrap();
    match client.pace("busy", Rate::per_second(1), Duration::ZERO, Wait::Sleep).await.unwrap() {
        Paced::Refused { retry_after } => {
            assert!(retry_after > Duration::from_millis(900) && retry_after <= Duration::from_secs(1))
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}
