//! Debits (`DEBIT`) from the client: a charge for units already used, counted whatever the limit
//! says. Check (0) → debit past the limit → refused → admitted again once time has repaid the
//! overdraft, on every algorithm, on the module, the twin and a cluster (one slot for
//! `debit_all`, each slot for `check_each`), and the same decisions from the in-memory test kit; the deny cache
//! never answers a debit (but a debit's overdraw denies later takes); a call of several limiters
//! debits them all or none; a debit dropped half-way leaves no state behind.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::time::Duration;

use harness::{Cluster, Server};
use redis_throttle_client::{Config, ManualClock, Policy, Source, Throttle, Verdict};

/// One limit of 10 a second on every algorithm (the quota per minute: it has no 1 s period).
fn policies() -> Vec<Policy> {
    ["10/s", "10/s window", "10/s window precision 100ms", "10/s bucket", "10/s counter", "10/min quota"]
        .iter()
        .map(|s| Policy::parse(s).unwrap())
        .collect()
}

/// The whole sequence on `client`, for `policy` on `key`; `pass` lets time go by.
async fn overdraw_then_repay(client: &Throttle, policy: &Policy, key: &str, pass: impl AsyncFn(Duration)) {
    let what = format!("{policy}");
    let check = client.debit(policy, key, 0).await.unwrap();
    assert!(check.allowed() && check.remaining == 10, "{what}: a check of 0 takes nothing: {check:?}");
    let fits = client.debit(policy, key, 4).await.unwrap();
    assert!(fits.allowed(), "{what}: 4 of 10 fit: {fits:?}");
    assert_eq!(fits.remaining, 6, "{what}");
    // 9 more overdraw: counted anyway, the decision says they did not fit.
    let over = client.debit(policy, key, 9).await.unwrap();
    assert!(!over.allowed(), "{what}: {over:?}");
    assert_eq!(over.remaining, 0, "{what}");
    assert!(!client.peek(policy, key).await.unwrap().allowed(), "{what}: over its limit, a peek is refused");
    assert!(!client.check(policy, key).await.unwrap().allowed(), "{what}: a take is refused");
    // The overdraft is repaid by time (a quota: by its next period).
    let wait = match over.verdict {
        Verdict::Denied { retry_after } => retry_after,
        other => panic!("{what}: {other:?}"),
    };
    pass(wait + Duration::from_millis(5)).await;
    let after = client.check(policy, key).await.unwrap();
    assert!(after.allowed(), "{what}: repaid after {wait:?}: {after:?} (the overdraw: {over:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debits_overdraw_and_are_repaid_by_time_on_every_algorithm() {
    let server = Server::start();
    let client = Throttle::connect(&server.url()).await.unwrap();
    for policy in policies().iter().filter(|p| !p.to_string().contains("quota")) {
        overdraw_then_repay(&client, policy, &format!("debit:{policy}:{}", std::process::id()), async |d| {
            tokio::time::sleep(d).await
        })
        .await;
    }
    // The test kit: the same decisions, by core's own arithmetic, on a manual clock (the quota
    // too: its minute passes at once).
    let clock = ManualClock::at_unix_ms(1_700_000_000_000);
    let kit = Throttle::in_memory(clock.clone(), Config::default());
    for policy in policies() {
        let clock = clock.clone();
        overdraw_then_repay(&kit, &policy, &format!("kit:{policy}"), async move |d| clock.advance(d)).await;
    }
    // A policy that debits (the spec word `debit`) makes every call of it a charge.
    let budget = Policy::parse("100/m window debit").unwrap();
    assert!(client.check_n(&budget, "budget", 150).await.unwrap().verdict != Verdict::Allowed);
    assert!(!client.peek(&budget, "budget").await.unwrap().allowed(), "the 150 were counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_twin_the_same_debits() {
    // A server without the module, the twin loaded by the crate itself.
    let server = Server::with(harness::Options::default().without_module());
    redis_throttle_client::load_twin(&redis::Client::open(server.url()).unwrap()).await.unwrap();
    let client = Throttle::connect(&server.url()).await.unwrap();
    assert_eq!(client.backend(), redis_throttle_client::Backend::Twin);
    for policy in policies().iter().filter(|p| !p.to_string().contains("quota")) {
        overdraw_then_repay(&client, policy, &format!("twin:{policy}"), async |d| tokio::time::sleep(d).await).await;
    }
    // Several at once (FCALL cl_all … DEBIT), and each on its own in one round trip.
    let (a, b) = (Policy::parse("3/m counter").unwrap(), Policy::parse("50/m counter").unwrap());
    let d = client.debit_all(&[(&a, b"{twin}:a", 5), (&b, b"{twin}:b", 5)]).await.unwrap();
    assert!(!d.allowed());
    assert_eq!(d.each[1].remaining, 45);
    let d = client
        .check_each(&[(&a, b"twin-each:a".as_slice(), 1), (&a.debiting(), b"twin-each:b".as_slice(), 9)])
        .await
        .unwrap();
    assert!(d[0].allowed() && !d[1].allowed(), "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_never_answers_a_debit_and_calls_debit_all_or_none() {
    let server = Server::start();
    let client = Throttle::connect(&server.url()).await.unwrap();
    let policy = Policy::parse("5/m counter").unwrap();
    // A take refused: the cache holds the denial for takes...
    for _ in 0..6 {
        client.check(&policy, "cached").await.unwrap();
    }
    assert_eq!(client.check(&policy, "cached").await.unwrap().source, Source::DenyCache);
    // ...but a debit always reaches the server (and is counted there).
    let before: i64 = redis::Commands::get(&mut server.client(), "cached").unwrap();
    let d = client.debit(&policy, "cached", 2).await.unwrap();
    assert_eq!(d.source, Source::Server);
    let after: i64 = redis::Commands::get(&mut server.client(), "cached").unwrap();
    assert_eq!(after, before + 2);
    // A debit's overdraw denies later takes from the cache (the limiter is over its limit).
    let fresh = Policy::parse("5/m window").unwrap();
    assert!(!client.debit(&fresh, "overdrawn", 7).await.unwrap().allowed());
    assert!(!client.check(&fresh, "overdrawn").await.unwrap().allowed());
    assert_eq!(client.check(&fresh, "overdrawn").await.unwrap().source, Source::DenyCache);
    // One call of several limiters: all debit (CL.ALL … DEBIT: every one counts, whether or not
    // another overdrew), or none; a mix is refused before sending.
    let (a, b) = (Policy::parse("3/m counter").unwrap(), Policy::parse("50/m counter").unwrap());
    let d = client.debit_all(&[(&a, b"all:{x}:a", 5), (&b, b"all:{x}:b", 5)]).await.unwrap();
    assert!(!d.allowed());
    assert_eq!((d.binding, d.each[1].remaining), (0, 45), "the second counted its 5 though the first overdrew");
    let mixed = client.check_all(&[(&a.debiting(), b"all:{y}:a", 1), (&b, b"all:{y}:b", 1)]).await;
    assert!(mixed.unwrap_err().to_string().contains("debits them all or takes from them all"));
    // check_each mixes takes and debits freely.
    let d =
        client.check_each(&[(&a, b"each:a".as_slice(), 1), (&a.debiting(), b"each:b".as_slice(), 9)]).await.unwrap();
    assert!(d[0].allowed() && !d[1].allowed());
    assert_eq!(client.peek(&a, "each:b").await.unwrap().remaining, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_each_slot_and_one_slot_debit() {
    let cluster = Cluster::start(3, 0);
    let conn = redis::cluster::ClusterClient::new(cluster.urls()).unwrap().get_async_connection().await.unwrap();
    let client = Throttle::from_cluster(conn, Config::default()).await.unwrap();
    let policy = Policy::parse("10/m window").unwrap().debiting();
    let keys: Vec<String> = (0..8).map(|i| format!("tok{i}")).collect();
    let calls: Vec<(&Policy, &[u8], i64)> = keys.iter().map(|k| (&policy, k.as_bytes(), 12)).collect();
    let d = client.check_each(&calls).await.unwrap();
    assert!(d.iter().all(|d| !d.allowed() && d.source == Source::Server), "{d:?}");
    for k in &keys {
        assert!(!client.peek(&policy, k).await.unwrap().allowed(), "{k} was charged on its node");
    }
    // debit_all across slots: the parts in parallel, nothing given back (a charge is never
    // refused).
    let plain = Policy::parse("10/m counter").unwrap();
    let d = client
        .check_all_slots(&[(&plain.debiting(), b"x:a".as_slice(), 11), (&plain.debiting(), b"x:b-1".as_slice(), 3)])
        .await
        .unwrap();
    assert!(!d.allowed());
    assert_eq!(client.peek(&plain, "x:b-1").await.unwrap().remaining, 7, "the other slot's charge stands");
    let d = client.debit_all(&[(&plain, b"{t}a".as_slice(), 2), (&plain, b"{t}b".as_slice(), 3)]).await.unwrap();
    assert!(d.allowed() && d.each.len() == 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debit_dropped_half_way_leaves_nothing_behind() {
    let server = Server::start();
    let config = Config { deadline: Duration::from_secs(5), ..Config::default() };
    let client = Throttle::connect_with(&server.url(), config).await.unwrap();
    let policy = Policy::parse("10/m bucket").unwrap();
    let pid = server.pid();
    harness::signal(pid, libc::SIGSTOP);
    let resume = harness::Resume(pid);
    // Dropped while the server is paused: the caller gave up.
    let dropped = tokio::time::timeout(Duration::from_millis(50), client.debit(&policy, "drop", 3)).await;
    assert!(dropped.is_err());
    drop(resume);
    // The client is as it was: not degraded, the next debit is the server's.
    let d = client.debit(&policy, "next", 1).await.unwrap();
    assert_eq!(d.source, Source::Server);
    assert!(!client.is_degraded());
    assert_eq!(client.deny_cache_len(), 0);
}

/// The token-budget example (`examples/token_budget.rs`, compiled into this test) runs and
/// prints what the guides say, and the guides' Rust text is the example's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_budget_example_runs_and_the_guides_show_it() {
    let server = Server::start();
    let client = Throttle::connect(&server.url()).await.unwrap();
    let mut lines = Vec::new();
    token_budget::tour(&client, "budget:example", &mut |l| lines.push(l)).await.unwrap();
    let stdout = lines.join("\n");
    for line in [
        "used 7200: fitted true, remaining 2800",
        "used 6100: fitted false, remaining 0",
        "refused: over budget",
        "test kit: Denied",
        "test kit, a minute later: Allowed",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}");
    }
    let example = include_str!("../examples/token_budget.rs");
    let start = example.find("// ANCHOR: budget\n").unwrap() + "// ANCHOR: budget\n".len();
    let snippet = &example[start..example.find("    // ANCHOR_END: budget").unwrap()];
    let snippet: String = snippet.lines().map(|l| l.strip_prefix("    ").unwrap_or(l)).collect::<Vec<_>>().join("\n");
    for guide in ["docs/src/guides/rust-client.md", "docs/src/guides/token-budgets.md"] {
        let text = std::fs::read_to_string(harness::workspace_root().join(guide)).unwrap();
        assert!(text.contains(&snippet), "{guide} does not show the example's text:\n{snippet}");
    }
}

#[path = "../examples/token_budget.rs"]
#[allow(dead_code)]
mod token_budget;
