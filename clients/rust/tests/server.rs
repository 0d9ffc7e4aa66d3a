//! The client against real servers: the module, the Functions twin alone, and neither.
//! Decisions carry the server's numbers in milliseconds; the deny cache saves the round trips
//! it claims (counted by the server's own INFO commandstats) and stays within its bound.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::time::Duration;

use harness::twin::{self, Form};
use harness::{Options, Server};
use redis_throttle_client::policy::Quota;
use redis_throttle_client::{Backend, Config, Error, HeldPolicies, Policy, Refresh, Source, Throttle, Verdict};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn twin_server() -> Server {
    let server = Server::with(Options::default().without_module());
    twin::load(&mut server.client(), Form::Library, &twin::shipped(Form::Library));
    server
}

/// A server with the module, one with only the twin, and a client of each.
async fn module_and_twin() -> (Server, Server, Throttle, Throttle) {
    let (module, twin) = (Server::start(), twin_server());
    let on_module = Throttle::connect(&module.url()).await.unwrap();
    let on_twin = Throttle::connect(&twin.url()).await.unwrap();
    (module, twin, on_module, on_twin)
}

/// The decisions a sequence of calls gets, times dropped where the server's clock moves
/// between calls (kept: verdicts, limits, remaining).
async fn sequence(client: &Throttle) -> Vec<(Verdict, i64, i64)> {
    let throttle = Policy::parse("30/m burst 16").unwrap();
    let window = Policy::parse("3/m window").unwrap();
    let bucket = Policy::parse("2/m bucket burst 4").unwrap();
    let counter = Policy::parse("2/m counter").unwrap();
    let mut out = Vec::new();
    for (policy, key) in [(&throttle, "t"), (&window, "w"), (&bucket, "b"), (&counter, "c")] {
        for step in 0..6 {
            let d = match step {
                0 => client.peek(policy, key).await,
                4 => client.refund(policy, key, 1).await,
                5 => client.check_n(policy, key, 100).await,
                _ => client.check(policy, key).await,
            }
            .unwrap();
            let d = match d.verdict {
                Verdict::Denied { .. } => (Verdict::Denied { retry_after: Duration::ZERO }, d.limit, d.remaining),
                v => (v, d.limit, d.remaining),
            };
            out.push(d);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_decisions_are_the_commands_replies_in_milliseconds() {
    let server = Server::start();
    let client = Throttle::connect(&server.url()).await.unwrap();
    assert_eq!(client.backend(), Backend::Module);

    // redis-cell's documented example: CL.THROTTLE user123 15 30 60 → 0 16 15 -1 2 (seconds).
    let policy = Policy::parse("30/m burst 16").unwrap();
    let first = std::time::Instant::now();
    let d = client.check(&policy, "user123").await.unwrap();
    assert_eq!((d.verdict, d.limit, d.remaining, d.source.clone()), (Verdict::Allowed, 16, 15, Source::Server));
    assert_eq!(d.reset_after, ms(2000), "MS replies: exactly one emission interval");
    let d = client.check(&policy, "user123").await.unwrap();
    // Two intervals from the first call's instant, so less the milliseconds since (on a loaded
    // machine the second call can leave a few ms after the first).
    let since = first.elapsed().as_millis() as u64 + 1;
    assert_eq!(d.remaining, 14);
    assert!(
        d.reset_after <= ms(4000) && d.reset_after >= ms(4000 - since.min(4000)),
        "reset_after {:?}, {since} ms after the first call",
        d.reset_after
    );
    // A peek consumes nothing; a refund gives back.
    assert_eq!(client.peek(&policy, "user123").await.unwrap().remaining, 14);
    assert_eq!(client.refund(&policy, "user123", 1).await.unwrap().remaining, 15);
    // More than the limit can ever admit: its own verdict.
    let d = client.check_n(&policy, "user123", 17).await.unwrap();
    assert_eq!(d.verdict, Verdict::Never);

    // Burst 5, one per 10 s: the sixth is denied for 10 s.
    let policy = Policy::parse("1/10s burst 5").unwrap();
    for remaining in (0..5).rev() {
        assert_eq!(client.check(&policy, "k").await.unwrap().remaining, remaining);
    }
    let d = client.check(&policy, "k").await.unwrap();
    assert_eq!(d.source, Source::Server);
    let wait = d.retry_after().unwrap();
    assert!(wait > ms(9_900) && wait <= ms(10_000), "{wait:?}");

    // Dashboards: CL.TOP lists the denied key, INFO throttle counts the denial.
    let top = client.top(5).await.unwrap();
    assert_eq!(top.first(), Some(&(b"k".to_vec(), 1)), "{top:?}");
    let info = client.info().await.unwrap();
    assert_eq!(
        info.get("cl_throttle_denied").map(String::as_str),
        Some("2"),
        "the never-admitted call and this one: {info:?}"
    );
    assert_eq!(info.get("mode").map(String::as_str), Some("enforce"));

    // A key of another kind: the server's error, not a degraded answer.
    redis::cmd("SET").arg("plain").arg("x").query::<()>(&mut server.client()).unwrap();
    let counter = Policy::parse("5/s counter").unwrap();
    match client.check(&counter, "plain").await {
        Err(Error::Server(e)) => assert!(e.to_string().contains("WRONGTYPE") || e.to_string().contains("valid"), "{e}"),
        other => panic!("expected the server's error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_twin_is_detected_and_decides_as_the_module() {
    let (_module, twin, on_module, on_twin) = module_and_twin().await;
    assert_eq!((on_module.backend(), on_twin.backend()), (Backend::Module, Backend::Twin));
    let expected = sequence(&on_module).await;
    assert_eq!(sequence(&on_twin).await, expected);
    assert!(twin.command_calls("fcall") > 0 && twin.command_calls("cl.throttle") == 0);

    // check_all through the twin's cl_all, as through CL.ALL.
    let (a, b) = (Policy::parse("5/s").unwrap(), Policy::parse("2/h counter").unwrap());
    for client in [&on_module, &on_twin] {
        let d = client.check_all(&[(&a, b"{u}:a", 1), (&b, b"{u}:b", 1)]).await.unwrap();
        assert_eq!((d.verdict, d.binding, d.each.len()), (Verdict::Allowed, 1, 2));
        assert_eq!((d.each[0].remaining, d.each[1].remaining), (4, 1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_quotas_on_the_module_and_the_twin() {
    let (module, twin, on_module, on_twin) = module_and_twin().await;
    let daily = Policy::quota(Quota::per_day(3).tz("+05:30").unwrap()).unwrap();
    assert_eq!(daily, Policy::parse("3/day quota tz +05:30").unwrap());
    let burst = Policy::parse("2/s").unwrap();
    for (client, server) in [(&on_module, &module), (&on_twin, &twin)] {
        for remaining in [2, 1, 0] {
            let d = client.check(&daily, "q").await.unwrap();
            assert_eq!((d.verdict, d.limit, d.remaining), (Verdict::Allowed, 3, remaining));
        }
        let d = client.check(&daily, "q").await.unwrap();
        // Denied until the next local midnight in +05:30, which is also when the key expires.
        let wait = d.retry_after().unwrap();
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(86_400), "{wait:?}");
        assert_eq!(wait, d.reset_after);
        let expires_at = harness::pexpiretime(&mut server.client(), "q");
        let local_ms = (expires_at + 19_800_000) % 86_400_000;
        assert_eq!(local_ms, 0, "the key expires at local midnight: {expires_at}");
        assert_eq!(client.check_n(&daily, "q", 4).await.unwrap().verdict, Verdict::Never);
        assert_eq!(client.refund(&daily, "q", 1).await.unwrap().remaining, 1);
        // In CL.ALL: two per second and the day's quota, decided together.
        let d = client.check_all(&[(&burst, b"{u}:s", 1), (&daily, b"{u}:q", 1)]).await.unwrap();
        assert_eq!((d.verdict, d.each[1].remaining), (Verdict::Allowed, 2));
    }
    assert_eq!(module.command_calls("cl.quota"), 6);

    // An IANA zone needs the module's tz database: the twin has none, and the client says so
    // before sending.
    let berlin = Policy::parse("1000/day quota tz Europe/Berlin").unwrap();
    assert!(on_module.check(&berlin, "b").await.unwrap().allowed());
    let sent = twin.command_calls("fcall");
    match on_twin.check(&berlin, "b").await {
        Err(Error::Invalid(text)) => assert!(
            text.contains("Europe/Berlin") && text.contains("Functions twin") && text.contains("fixed offset"),
            "{text}"
        ),
        other => panic!("expected a clear error, got {other:?}"),
    }
    assert!(matches!(
        on_twin.check_all(&[(&burst, b"{u}:s", 1), (&berlin, b"{u}:b", 1)]).await,
        Err(Error::Invalid(_))
    ));
    assert_eq!(twin.command_calls("fcall"), sent, "nothing sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_neither_is_a_startup_error() {
    let bare = Server::with(Options::default().without_module());
    match Throttle::connect(&bare.url()).await {
        Err(Error::NoLimiter(text)) => assert!(text.contains("neither") && text.contains("FUNCTION LOAD"), "{text}"),
        Err(e) => panic!("expected NoLimiter, got {e}"),
        Ok(_) => panic!("expected NoLimiter, got a client"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_all_names_the_binding_policy_and_writes_nothing_when_one_denies() {
    let server = Server::start();
    let client = Throttle::connect(&server.url()).await.unwrap();
    let per_second = Policy::parse("10/s").unwrap();
    let per_hour = Policy::parse("3/h window").unwrap();
    let tokens = Policy::parse("100/m bucket burst 500").unwrap();
    let calls =
        [(&per_second, &b"{user42}:s"[..], 1), (&per_hour, &b"{user42}:h"[..], 1), (&tokens, &b"{user42}:t"[..], 100)];
    for remaining in [2, 1, 0] {
        let d = client.check_all(&calls).await.unwrap();
        assert_eq!((d.verdict, d.binding, d.remaining), (Verdict::Allowed, 1, remaining));
    }
    let d = client.check_all(&calls).await.unwrap();
    // The hour's window denies; the others admit, and nothing is written for any key.
    assert!(matches!(d.verdict, Verdict::Denied { .. }));
    assert_eq!(d.binding, 1);
    assert!(d.retry_after().unwrap() > ms(3_590_000));
    assert_eq!(d.each[0].verdict, Verdict::Allowed, "each policy's own numbers");
    let peek = client.peek(&per_second, "{user42}:s").await.unwrap();
    assert_eq!(peek.remaining, 7, "three admitted calls, the denied one wrote nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_denials_inside_retry_after_make_one_server_call() {
    let server = Server::start();
    let client = Throttle::connect(&server.url()).await.unwrap();
    let policy = Policy::parse("2/m counter").unwrap();
    for _ in 0..2 {
        assert!(client.check(&policy, "hot").await.unwrap().allowed());
    }
    let first = client.check(&policy, "hot").await.unwrap();
    assert_eq!(first.source, Source::Server);
    assert!(matches!(first.verdict, Verdict::Denied { .. }));
    for _ in 0..10_000 {
        let d = client.check(&policy, "hot").await.unwrap();
        assert_eq!(d.source, Source::DenyCache);
        assert!(d.retry_after().unwrap() <= first.retry_after().unwrap());
    }
    assert_eq!(
        server.command_calls("cl.counter"),
        3,
        "two admitted, one denied: the 10,000 repeats never reached the server"
    );

    // A smaller request, a changed policy, and a peek are not answered by the cache.
    let raised = Policy::parse("3/m counter").unwrap();
    let d = client.check(&raised, "hot").await.unwrap();
    assert_eq!((d.source.clone(), d.allowed()), (Source::Server, true), "raising the limit changes the cache key");
    assert_eq!(client.peek(&policy, "hot").await.unwrap().source, Source::Server);
    // A refund through this client forgets the denial.
    client.refund(&policy, "hot", 2).await.unwrap();
    assert_eq!(client.check(&policy, "hot").await.unwrap().source, Source::Server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_denied_keys_stay_within_the_cache_bound() {
    let server = Server::start();
    let config = Config { deny_cache: 1_000, deadline: Duration::from_secs(2), ..Config::default() };
    let client = Throttle::connect_with(&server.url(), config).await.unwrap();
    let policy = Policy::parse("1/m counter").unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..8u32 {
        let (client, policy) = (client.clone(), policy);
        tasks.spawn(async move {
            for i in 0..1_000u32 {
                let key = format!("k{t}:{i}");
                assert!(client.check(&policy, &key).await.unwrap().allowed());
                assert!(!client.check(&policy, &key).await.unwrap().allowed());
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert!(
        client.deny_cache_len() <= client.deny_cache_capacity(),
        "{} > {}",
        client.deny_cache_len(),
        client.deny_cache_capacity()
    );
    assert!(client.deny_cache_capacity() <= 1_024);
}

/// Edits of the hash reach `held` within a second (each wait measured and returned); an
/// invalid edit keeps the last good policy and is reported; a removal removes.
fn edits_arrive(server: &Server, held: &HeldPolicies) -> Vec<Duration> {
    let hset = |value: &str| {
        redis::cmd("HSET").arg("throttle:policies").arg("api").arg(value).query::<()>(&mut server.client()).unwrap()
    };
    let mut waits = Vec::new();
    let mut wait = |what: &str, ok: &dyn Fn() -> bool| {
        let start = std::time::Instant::now();
        while !ok() {
            assert!(start.elapsed() < Duration::from_secs(1), "{what} did not arrive within a second");
            std::thread::sleep(Duration::from_millis(1));
        }
        waits.push(start.elapsed());
    };
    assert_eq!(held.get("api"), Some(Policy::parse("2/m counter").unwrap()));
    hset("2/m countr");
    wait("the invalid edit's report", &|| !held.errors().is_empty());
    assert_eq!(held.get("api"), Some(Policy::parse("2/m counter").unwrap()), "the last good policy stays");
    assert!(held.errors()[0].2.contains("countr"), "{:?}", held.errors());
    hset("5/m counter");
    wait("the edit", &|| held.get("api") == Some(Policy::parse("5/m counter").unwrap()));
    assert!(held.errors().is_empty());
    hset("1000/month quota tz Europe/Berlin");
    wait("the quota", &|| held.get("api") == Some(Policy::parse("1000/month quota tz Europe/Berlin").unwrap()));
    redis::cmd("HDEL").arg("throttle:policies").arg("api").query::<()>(&mut server.client()).unwrap();
    wait("the removal", &|| held.get("api").is_none());
    waits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_policies_follow_edits_through_invalidation_messages() {
    let server = Server::start();
    redis::cmd("HSET")
        .arg("throttle:policies")
        .arg("api")
        .arg("2/m counter")
        .query::<()>(&mut server.client())
        .unwrap();
    let client = Throttle::connect(&server.url()).await.unwrap();
    // Polled only every minute: only an invalidation message can bring an edit within a second.
    let held = client.held_policies("throttle:policies", Duration::from_secs(60)).await.unwrap();
    assert_eq!(held.refresh(), &Refresh::Tracking);
    // Another process's client: every client is told.
    let other = Throttle::connect(&server.url())
        .await
        .unwrap()
        .held_policies("throttle:policies", Duration::from_secs(60))
        .await
        .unwrap();
    let waits = edits_arrive(&server, &held);
    eprintln!("edits arrived through invalidation after {waits:?}");
    let start = std::time::Instant::now();
    while other.get("api").is_some() {
        assert!(start.elapsed() < Duration::from_secs(1), "the other client did not see the removal within a second");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    redis::cmd("HSET")
        .arg("throttle:policies")
        .arg("api")
        .arg("7/m counter")
        .query::<()>(&mut server.client())
        .unwrap();
    let start = std::time::Instant::now();
    while other.get("api") != Some(Policy::parse("7/m counter").unwrap()) || held.get("api") != other.get("api") {
        assert!(start.elapsed() < Duration::from_secs(1), "both clients within a second");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    // The connection lost (CLIENT KILL of every other client): the client reconnects, tracks
    // again, and reads what changed meanwhile.
    redis::cmd("HSET")
        .arg("throttle:policies")
        .arg("api")
        .arg("2/m counter")
        .query::<()>(&mut server.client())
        .unwrap();
    let mut admin = server.client();
    redis::cmd("CLIENT").arg("KILL").arg("SKIPME").arg("yes").arg("TYPE").arg("normal").exec(&mut admin).unwrap();
    redis::cmd("HSET").arg("throttle:policies").arg("api").arg("3/m counter").query::<()>(&mut admin).unwrap();
    let start = std::time::Instant::now();
    while held.get("api") != Some(Policy::parse("3/m counter").unwrap()) {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "the edit after a reconnect did not arrive: {:?}",
            held.get("api")
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!("after the connection was killed: {:?}", start.elapsed());
    redis::cmd("HSET").arg("throttle:policies").arg("api").arg("4/m counter").query::<()>(&mut admin).unwrap();
    let start = std::time::Instant::now();
    while held.get("api") != Some(Policy::parse("4/m counter").unwrap()) {
        assert!(start.elapsed() < Duration::from_secs(1), "tracking did not resume");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_policies_are_polled_where_tracking_is_refused() {
    // An ACL that refuses CLIENT TRACKING (as some managed services do).
    let server = Server::with(Options::default().arg("--user default on nopass ~* &* +@all -client|tracking"));
    redis::cmd("HSET")
        .arg("throttle:policies")
        .arg("api")
        .arg("2/m counter")
        .query::<()>(&mut server.client())
        .unwrap();
    let client = Throttle::connect(&server.url()).await.unwrap();
    let held = client.held_policies("throttle:policies", Duration::from_millis(100)).await.unwrap();
    match held.refresh() {
        Refresh::Polling(reason) => assert!(reason.contains("NOPERM") || reason.contains("tracking"), "{reason}"),
        other => panic!("expected polling, got {other:?}"),
    }
    let waits = edits_arrive(&server, &held);
    eprintln!("edits arrived by polling every 100 ms after {waits:?}");
}
