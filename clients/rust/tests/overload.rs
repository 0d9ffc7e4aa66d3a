//! Overload is not failure: a burst whose calls pass their deadline while the server answers
//! never opens the breaker (each late call gets the failure policy's answer); a silent server
//! does, within its `server_timeout`. A caller's own shorter deadline (`within`).

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use harness::{Resume, Server, signal};
use redis_throttle_client::{BreakerConfig, Config, FailurePolicy, Policy, Reason, Source, Throttle};

const DEADLINE: Duration = Duration::from_millis(30);
const PROBE: Duration = Duration::from_millis(300);

fn config(failure: FailurePolicy) -> Config {
    Config {
        deadline: DEADLINE,
        failure,
        breaker: BreakerConfig { failures: 3, probe_interval: PROBE },
        ..Config::default()
    }
}

/// Checks until the server answers again; how long that took.
async fn back_on_server(client: &Throttle, policy: &Policy, since: Instant) -> Duration {
    loop {
        let d = client.check(policy, "probe").await.unwrap();
        if d.source == Source::Server {
            return since.elapsed();
        }
        assert!(since.elapsed() < Duration::from_secs(10), "the client never went back to the server");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_deadline_is_overload_and_never_opens_the_breaker() {
    let mut server = Server::start();
    // A deadline far shorter than 2,000 concurrent calls take on 2 cores.
    let cfg = Config { deadline: Duration::from_millis(2), ..config(FailurePolicy::FailOpen) };
    let client = Throttle::connect_with(&server.url(), cfg).await.unwrap();
    let policy = Policy::parse("100/m counter").unwrap();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..1000 {
        let (client, policy) = (client.clone(), policy);
        set.spawn(async move { client.check(&policy, format!("burst{}", i % 10)).await.unwrap() });
    }
    let mut late = 0;
    while let Some(d) = set.join_next().await {
        let d = d.unwrap();
        match &d.source {
            Source::Degraded { reason: Reason::BreakerOpen, .. } => panic!("the breaker opened on a burst: {d:?}"),
            Source::Degraded { reason, .. } => {
                assert_eq!(*reason, Reason::Timeout);
                late += 1;
            }
            _ => {}
        }
    }
    eprintln!("{late} of 1,000 calls answered by the failure policy at the 2 ms deadline; the breaker stayed closed");
    assert!(!client.is_degraded());
    // A view with a shorter deadline of its own (a caller's), sharing everything else.
    let patient = Throttle::connect_with(&server.url(), config(FailurePolicy::FailClosed)).await.unwrap();
    assert_eq!(patient.within(Duration::from_millis(5)).deadline(), Duration::from_millis(5));
    assert_eq!(patient.within(Duration::from_secs(5)).deadline(), DEADLINE, "never longer than configured");
    // The server silent: the same timeouts are its failure and open the breaker.
    let pid = server.pid();
    signal(pid, libc::SIGSTOP);
    let _resume = Resume(pid);
    let paused = Instant::now();
    while !patient.is_degraded() {
        let d = patient.within(Duration::from_millis(10)).check(&policy, "silent").await.unwrap();
        assert!(d.is_degraded());
        assert!(
            paused.elapsed() < Duration::from_secs(2),
            "a silent server opens the breaker within its server_timeout"
        );
    }
    eprintln!("breaker open {:?} after the server stopped answering", paused.elapsed());
    signal(pid, libc::SIGCONT);
    let back = back_on_server(&patient, &policy, Instant::now()).await;
    assert!(back <= PROBE + DEADLINE + Duration::from_millis(100), "back on the server after {back:?}");
    server.kill();
}
