//! The client's own costs (run in release against `make run`'s server, or set REDIS_URL;
//! `make bench` runs it through bench/client.sh):
//! `cargo run --release -p redis-throttle-client --example overhead`
//!
//! - a round trip through the client vs the same CL.THROTTLE through a raw `redis` connection,
//!   one at a time (latency) and from 64 concurrent tasks (throughput);
//! - a deny-cache hit; a decision of the in-memory backend (the test kit, and the `Local`
//!   failure policy's work).

use std::time::{Duration, Instant};

use redis_throttle_client::{Config, ManualClock, Policy, Throttle};

const ROUND_TRIPS: u32 = 20_000;
const LOCAL: u32 = 1_000_000;
const TASKS: u32 = 64;

fn per_call(total: Duration, n: u32) -> f64 {
    total.as_secs_f64() * 1e6 / f64::from(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let policy = Policy::parse("1000000000/s")?;
    let uncached = Config { deny_cache: 0, deadline: Duration::from_secs(1), ..Config::default() };
    let client = Throttle::connect_with(&url, uncached).await?;
    let mut raw = redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;

    // Interleaved rounds, so both see the same server and machine load.
    let (mut raw_time, mut client_time) = (Duration::ZERO, Duration::ZERO);
    for round in 0..10 {
        let start = Instant::now();
        for _ in 0..ROUND_TRIPS / 10 {
            let cmd = redis::cmd("CL.THROTTLE")
                .arg("overhead:raw")
                .arg(999_999_999)
                .arg(1_000_000_000)
                .arg(1000)
                .arg(1)
                .arg("MS")
                .clone();
            let _: Vec<i64> = cmd.query_async(&mut raw).await?;
        }
        raw_time += start.elapsed();
        let start = Instant::now();
        for _ in 0..ROUND_TRIPS / 10 {
            client.check(&policy, "overhead:client").await?;
        }
        client_time += start.elapsed();
        let _ = round;
    }
    let (r, c) = (per_call(raw_time, ROUND_TRIPS), per_call(client_time, ROUND_TRIPS));
    println!("round trip: raw redis {r:.2} µs, client {c:.2} µs ({:+.1}%)", (c / r - 1.0) * 100.0);

    // Throughput: 64 tasks, interleaved rounds: raw calls on a multiplexed connection; the
    // client on a ConnectionManager (Throttle::connect); the client on that same multiplexed
    // connection (Throttle::from_multiplexed).
    let on_raw = Throttle::from_multiplexed(raw.clone(), uncached).await?;
    let mut rates = [0.0f64; 3];
    const ROUNDS: u32 = 5;
    let per_task = ROUND_TRIPS / TASKS / 2;
    for _ in 0..ROUNDS {
        for (which, rate) in rates.iter_mut().enumerate() {
            let mut tasks = tokio::task::JoinSet::new();
            let start = Instant::now();
            for t in 0..TASKS {
                let (mut raw, client) = (raw.clone(), if which == 1 { client.clone() } else { on_raw.clone() });
                tasks.spawn(async move {
                    for _ in 0..per_task {
                        if which == 0 {
                            let cmd = redis::cmd("CL.THROTTLE")
                                .arg(format!("overhead:raw:{t}"))
                                .arg(999_999_999)
                                .arg(1_000_000_000)
                                .arg(1000)
                                .arg(1)
                                .arg("MS")
                                .clone();
                            let _: Vec<i64> = cmd.query_async(&mut raw).await.expect("raw call");
                        } else {
                            client.check(&policy, format!("overhead:client:{t}")).await.expect("client call");
                        }
                    }
                });
            }
            tasks.join_all().await;
            *rate += f64::from(per_task * TASKS) / start.elapsed().as_secs_f64() / f64::from(ROUNDS);
        }
    }
    let [r, m, c] = rates;
    println!(
        "throughput, {TASKS} tasks: raw redis {r:.0}/s; client on a ConnectionManager {m:.0}/s ({:+.1}%), on the same multiplexed connection {c:.0}/s ({:+.1}%)",
        (m / r - 1.0) * 100.0,
        (c / r - 1.0) * 100.0
    );

    // A deny-cache hit.
    let cached = Throttle::connect(&url).await?;
    let tight = Policy::parse("1/h counter")?;
    let key = format!("overhead:deny:{}", std::process::id());
    cached.check(&tight, &key).await?;
    assert!(!cached.check(&tight, &key).await?.allowed());
    let start = Instant::now();
    for _ in 0..LOCAL {
        let d = cached.check(&tight, &key).await?;
        debug_assert!(!d.allowed());
    }
    println!("deny-cache hit: {:.3} µs", per_call(start.elapsed(), LOCAL));

    // A local decision (the test kit; the Local failure policy does the same work).
    let kit = Throttle::in_memory(ManualClock::at_unix_ms(1_700_000_000_000), Config::default());
    let start = Instant::now();
    for _ in 0..LOCAL {
        kit.check(&policy, "hot").await?;
    }
    println!("local decision: {:.3} µs", per_call(start.elapsed(), LOCAL));
    Ok(())
}
