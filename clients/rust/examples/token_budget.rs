//! A token budget, check then debit: `make run` (a server with the module on port 6379), then
//! `cargo run -p redis-throttle-client --example token_budget` (or set REDIS_URL). The guides'
//! (docs/src/guides/rust-client.md, token-budgets.md) text between the `budget` markers is this
//! file's, checked by clients/rust/tests/debit.rs, which runs [`tour`].

use std::time::Duration;

use redis_throttle_client::{Config, ManualClock, Policy, Throttle};

/// An LLM call that used `tokens` (a stand-in).
async fn call_the_model(tokens: u32) -> u32 {
    tokens
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = Throttle::connect(&url).await?;
    tour(&client, &format!("budget:tenant7:{}", std::process::id()), &mut |line| println!("{line}")).await
}

/// The tour on `client`'s server with `key`, each line of what it found given to `report`.
pub async fn tour(
    client: &Throttle,
    key: &str,
    report: &mut dyn FnMut(String),
) -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: budget
    // 10,000 tokens a minute on a sliding window counted per second.
    let budget = Policy::parse("10000/m window precision 1s")?;
    for used in [7_200, 6_100, 500] {
        // Before the call: a check (nothing charged), refused once the budget is over.
        let check = client.debit(&budget, key, 0).await?;
        if !check.allowed() {
            report(format!("refused: over budget, retry after {:?}", check.retry_after()));
            continue;
        }
        // After it: a charge of what it used, counted whatever the limit says.
        let tokens = call_the_model(used).await;
        let charged = client.debit(&budget, key, tokens).await?;
        report(format!("used {tokens}: fitted {}, remaining {}", charged.allowed(), charged.remaining));
    }
    // ANCHOR_END: budget

    // The test kit decides debits with core's own arithmetic: the overdraft is repaid by time.
    let clock = ManualClock::at_unix_ms(1_700_000_000_000);
    let kit = Throttle::in_memory(clock.clone(), Config::default());
    kit.debit(&budget, "k", 13_300).await?;
    report(format!("test kit: {:?}", kit.debit(&budget, "k", 0).await?.verdict));
    clock.advance(Duration::from_secs(61));
    report(format!("test kit, a minute later: {:?}", kit.debit(&budget, "k", 0).await?.verdict));
    Ok(())
}
