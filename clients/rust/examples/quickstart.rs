//! `make run` (a server with the module on port 6379), then
//! `cargo run -p redis-throttle-client --example quickstart` (or set REDIS_URL).

use std::time::Duration;

use redis_throttle_client::{Config, FailurePolicy, ManualClock, Policy, Quota, Rate, Throttle};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // Fail closed within 50 ms by default; here: decide locally with a share of the limit.
    let config = Config { failure: FailurePolicy::Local { share: 4 }, ..Config::default() };
    let client = Throttle::connect_with(&url, config).await?;
    println!("connected: {:?}", client.backend());

    // Twenty per second, at most five at once: the constructor and the spec string agree.
    let policy = Policy::throttle_with_burst(Rate::per_second(20), 5)?;
    assert_eq!(policy, "20/s burst 5".parse()?);
    for i in 1..=7 {
        let d = client.check(&policy, "quickstart:user42").await?;
        println!(
            "call {i}: {:?}, remaining {}, retry after {:?} ({:?})",
            d.verdict,
            d.remaining,
            d.retry_after(),
            d.source
        );
    }

    // Several limits at one instant: the binding one answers.
    let hour = Policy::parse("1000/h window")?;
    let d = client.check_all(&[(&policy, b"quickstart:{user7}:s", 1), (&hour, b"quickstart:{user7}:h", 1)]).await?;
    println!("check_all: {:?}, binding policy #{}, remaining {}", d.verdict, d.binding, d.remaining);

    // A calendar quota: 100,000 units per month from the 1st, Berlin time; 500 taken at once.
    let monthly = Policy::quota(Quota::per_month(100_000).tz("Europe/Berlin")?)?;
    assert_eq!(monthly, "100000/month quota tz Europe/Berlin".parse()?);
    let d = client.check_n(&monthly, "quickstart:tenant9", 500).await?;
    println!("monthly quota: {:?}, remaining {}, period ends in {:?}", d.verdict, d.remaining, d.reset_after);

    // The test kit: the module's decisions in memory, with a clock you move.
    let clock = ManualClock::at_unix_ms(1_700_000_000_000);
    let kit = Throttle::in_memory(clock.clone(), Config::default());
    let per_minute = Policy::parse("2/m counter")?;
    for _ in 0..3 {
        println!("test kit: {:?}", kit.check(&per_minute, "k").await?.verdict);
    }
    clock.advance(Duration::from_secs(60));
    println!("test kit, a minute later: {:?}", kit.check(&per_minute, "k").await?.verdict);
    Ok(())
}
