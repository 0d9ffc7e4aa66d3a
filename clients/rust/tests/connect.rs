//! Starting while Redis is down. `Throttle::connect` returns `Error::Connect` within
//! `Config::connect_timeout`, whether nothing listens or the server is paused (SIGSTOP);
//! `Throttle::connect_degraded` returns at once, the failure policy answers until the server
//! comes up, then the client detects the module (or the twin) and asks the server.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use harness::twin::{self, Form};
use harness::{Options, Resume, Server, signal};
use redis_throttle_client::{
    Backend, BreakerConfig, Config, Error, FailurePolicy, Policy, Reason, Source, Throttle, Verdict,
};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const PROBE: Duration = Duration::from_millis(100);

fn config(failure: FailurePolicy) -> Config {
    Config {
        deadline: Duration::from_millis(50),
        failure,
        connect_timeout: CONNECT_TIMEOUT,
        breaker: BreakerConfig { failures: 3, probe_interval: PROBE },
        ..Config::default()
    }
}

/// `connect_with`, or a test failure after 10 s (the bug: it never returned).
async fn connect(url: &str) -> (Result<Throttle, Error>, Duration) {
    let start = Instant::now();
    let result =
        tokio::time::timeout(Duration::from_secs(10), Throttle::connect_with(url, config(FailurePolicy::FailClosed)))
            .await
            .expect("connect returned within 10 s");
    (result, start.elapsed())
}

fn assert_connect_error(result: Result<Throttle, Error>, took: Duration, what: &str) {
    eprintln!("{what}: {:?} after {took:?}", result.as_ref().err());
    assert!(matches!(result, Err(Error::Connect(_))), "{what}: {:?}", result.as_ref().err());
    assert!(took <= CONNECT_TIMEOUT + Duration::from_millis(300), "{what}: returned after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_fails_within_its_timeout_when_nothing_listens() {
    let url = format!("redis://127.0.0.1:{}/", harness::free_port(false));
    let (result, took) = connect(&url).await;
    assert_connect_error(result, took, "nothing listening");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_fails_within_its_timeout_when_the_server_is_paused() {
    let server = Server::start();
    let pid = server.pid();
    signal(pid, libc::SIGSTOP);
    let _resume = Resume(pid);
    let (result, took) = connect(&server.url()).await;
    assert_connect_error(result, took, "server paused");
}

/// Checks until a decision comes from the server; how long that took.
async fn until_on_server(client: &Throttle, policy: &Policy) -> Duration {
    let start = Instant::now();
    loop {
        let d = client.check(policy, "k").await.unwrap();
        if d.source == Source::Server {
            return start.elapsed();
        }
        assert!(d.is_degraded(), "{d:?}");
        assert!(start.elapsed() < Duration::from_secs(5), "never on the server: {d:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_started_degraded_answers_by_its_policy_until_the_server_comes_up() {
    let mut server = Server::start();
    server.kill();
    let policy = Policy::parse("5/h").unwrap();
    let closed = Throttle::connect_degraded(&server.url(), config(FailurePolicy::FailClosed)).unwrap();
    let open = Throttle::connect_degraded(&server.url(), config(FailurePolicy::FailOpen)).unwrap();
    assert_eq!(closed.backend(), Backend::Unknown);
    for _ in 0..3 {
        let start = Instant::now();
        let d = closed.check(&policy, "k").await.unwrap();
        assert!(start.elapsed() < Duration::from_millis(50), "answered at once");
        assert!(matches!(d.verdict, Verdict::Denied { .. }), "{d:?}");
        assert!(
            matches!(&d.source, Source::Degraded { reason: Reason::Connection(_), policy: FailurePolicy::FailClosed }),
            "{d:?}"
        );
        let d = open.check(&policy, "k").await.unwrap();
        assert!(d.allowed() && d.is_degraded(), "{d:?}");
    }
    // Leases fail closed, marked degraded.
    assert!(closed.acquire("lease", 1, Duration::from_secs(1)).await.unwrap().unwrap_err().is_degraded());

    server.relaunch();
    let took = until_on_server(&closed, &policy).await;
    eprintln!("on the server {took:?} after the relaunch");
    assert_eq!(closed.backend(), Backend::Module);
    assert!(took <= Duration::from_secs(2), "{took:?}");
    until_on_server(&open, &policy).await;
    // The server now counts: 5 per hour, both clients on one key.
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += usize::from(closed.check(&policy, "counted").await.unwrap().allowed());
        admitted += usize::from(open.check(&policy, "counted").await.unwrap().allowed());
    }
    assert_eq!(admitted, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_started_degraded_on_a_paused_server_finds_it_when_it_resumes() {
    let server = Server::start();
    let pid = server.pid();
    signal(pid, libc::SIGSTOP);
    let resume = Resume(pid);
    let policy = Policy::parse("5/h").unwrap();
    let client = Throttle::connect_degraded(&server.url(), config(FailurePolicy::Local { share: 1 })).unwrap();
    let mut admitted = 0;
    for _ in 0..8 {
        let d = client.check(&policy, "k").await.unwrap();
        assert!(matches!(&d.source, Source::Degraded { policy: FailurePolicy::Local { share: 1 }, .. }), "{d:?}");
        admitted += usize::from(d.allowed());
    }
    assert_eq!(admitted, 5, "limited locally meanwhile");
    tokio::time::sleep(CONNECT_TIMEOUT).await;
    assert_eq!(client.backend(), Backend::Unknown);
    drop(resume);
    let took = until_on_server(&client, &policy).await;
    eprintln!("on the server {took:?} after SIGCONT");
    assert!(took <= CONNECT_TIMEOUT + PROBE + Duration::from_millis(500), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_started_degraded_detects_the_twin_once_it_is_loaded() {
    let server = Server::with(Options::default().without_module());
    let client = Throttle::connect_degraded(&server.url(), config(FailurePolicy::FailClosed)).unwrap();
    let policy = Policy::parse("5/h").unwrap();
    tokio::time::sleep(PROBE * 3).await;
    // Neither the module nor the twin: still degraded, still trying.
    assert_eq!(client.backend(), Backend::Unknown);
    assert!(client.check(&policy, "k").await.unwrap().is_degraded());
    twin::load(&mut server.client(), Form::Library, &twin::shipped(Form::Library));
    until_on_server(&client, &policy).await;
    assert_eq!(client.backend(), Backend::Twin);
}

/// The connections of `server` whose last command was one of the limiters' (`CLIENT LIST`).
fn limiter_connections(server: &Server) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut server.client()).unwrap();
    list.lines().filter(|l| l.contains(" cmd=cl.")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_spread_calls_and_share_every_limit_exactly() {
    let server = Server::start();
    let before: String = redis::cmd("CLIENT").arg("LIST").query(&mut server.client()).unwrap();
    let config = Config { connections: 3, deadline: Duration::from_secs(2), ..Config::default() };
    let client = Throttle::connect_with(&server.url(), config).await.unwrap();
    let after: String = redis::cmd("CLIENT").arg("LIST").query(&mut server.client()).unwrap();
    // The test's own connection appears in both lists.
    assert_eq!(after.lines().count(), before.lines().count() + 3, "{after}");
    // 60 concurrent calls against 10 a minute: exactly 10 admitted, whichever connection each took.
    let policy = Policy::parse("10/m").unwrap();
    let tasks: Vec<_> = (0..60)
        .map(|_| {
            let (client, policy) = (client.clone(), policy);
            tokio::spawn(async move { client.check(&policy, "shared").await.unwrap().allowed() })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted, 10);
    assert_eq!(limiter_connections(&server), 3, "every connection took calls");
    // The default: one connection for every call.
    let single =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    let with_single: String = redis::cmd("CLIENT").arg("LIST").query(&mut server.client()).unwrap();
    assert_eq!(with_single.lines().count(), after.lines().count() + 1);
    for _ in 0..5 {
        single.check(&policy, "other").await.unwrap();
    }
}
