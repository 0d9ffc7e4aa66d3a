//! Redis trouble under load: the server paused (SIGSTOP) and killed. Every decision returns
//! within the deadline + 5 ms at p99, marked degraded with the chosen failure policy, never a
//! silent allow; once the server is back the client is on it again within one probe interval.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use harness::{Resume, Server, signal};
use redis_throttle_client::{
    BreakerConfig, Config, Decision, FailurePolicy, Policy, Reason, Source, Throttle, Verdict,
};

const DEADLINE: Duration = Duration::from_millis(30);
const PROBE: Duration = Duration::from_millis(300);

/// `tasks` tasks checking for `run`: each decision and its latency.
async fn load(client: &Throttle, policy: &Policy, tasks: usize, run: Duration) -> Vec<(Duration, Decision)> {
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let (client, policy) = (client.clone(), *policy);
        set.spawn(async move {
            let mut out = Vec::new();
            let end = Instant::now() + run;
            let mut i = 0u32;
            while Instant::now() < end {
                let start = Instant::now();
                let d = client.check(&policy, format!("user{t}:{}", i % 50)).await.unwrap();
                out.push((start.elapsed(), d));
                i += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            out
        });
    }
    let mut all = Vec::new();
    while let Some(r) = set.join_next().await {
        all.extend(r.unwrap());
    }
    all
}

/// The 99th percentile of the decisions' latencies, printed with the slowest and how many
/// waited for the deadline (the rest were answered at once by the open breaker).
fn p99(samples: &[(Duration, Decision)]) -> Duration {
    let mut latencies: Vec<Duration> = samples.iter().map(|(l, _)| *l).collect();
    latencies.sort();
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    let waited = samples
        .iter()
        .filter(|(_, d)| !matches!(d.source, Source::Degraded { reason: Reason::BreakerOpen, .. }))
        .count();
    eprintln!(
        "{} degraded decisions ({waited} not answered by the open breaker): p99 {p99:?}, slowest {:?}",
        samples.len(),
        latencies[latencies.len() - 1]
    );
    p99
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

/// The server's side of getting back: a relaunched server's first connection (and the
/// connection manager's reconnect) took up to ~50 ms on a loaded 2-core machine; the client's
/// promise is the probe interval plus one deadline.
const RECONNECT_SLACK: Duration = Duration::from_millis(100);

fn config(failure: FailurePolicy) -> Config {
    Config {
        deadline: DEADLINE,
        failure,
        breaker: BreakerConfig { failures: 3, probe_interval: PROBE },
        // A silent server is found within two deadlines (overload is tests/overload.rs's).
        server_timeout: DEADLINE * 2,
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_fails_closed_within_the_deadline_and_is_found_again() {
    let server = Server::start();
    let client = Throttle::connect_with(&server.url(), config(FailurePolicy::FailClosed)).await.unwrap();
    let open = Throttle::connect_with(&server.url(), config(FailurePolicy::FailOpen)).await.unwrap();
    let policy = Policy::parse("1000/s").unwrap();
    assert_eq!(client.check(&policy, "warm").await.unwrap().source, Source::Server);

    let pid = server.pid();
    signal(pid, libc::SIGSTOP);
    let _resume = Resume(pid);
    let samples = load(&client, &policy, 8, Duration::from_millis(800)).await;
    for (_, d) in &samples {
        assert!(matches!(d.verdict, Verdict::Denied { .. }), "fail closed never admits: {d:?}");
        match &d.source {
            Source::Degraded { policy: FailurePolicy::FailClosed, reason: Reason::Timeout | Reason::BreakerOpen } => {}
            other => panic!("expected a degraded decision, got {other:?}"),
        }
    }
    assert!(
        samples.iter().any(|(_, d)| matches!(&d.source, Source::Degraded { reason: Reason::BreakerOpen, .. })),
        "the breaker opened"
    );
    let p99 = p99(&samples);
    assert!(p99 <= DEADLINE + Duration::from_millis(5), "p99 {p99:?} over {} decisions", samples.len());
    // Fail open: admitted, and says so.
    let d = open.check(&policy, "x").await.unwrap();
    assert_eq!(d.verdict, Verdict::Allowed);
    assert!(d.is_degraded(), "{d:?}");

    signal(pid, libc::SIGCONT);
    let back = back_on_server(&client, &policy, Instant::now()).await;
    eprintln!("back on the server after {back:?}");
    assert!(back <= PROBE + DEADLINE + RECONNECT_SLACK, "back on the server after {back:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_falls_back_to_local_limits_and_is_found_again() {
    let mut server = Server::start();
    let client = Throttle::connect_with(&server.url(), config(FailurePolicy::Local { share: 2 })).await.unwrap();
    let policy = Policy::parse("10/m counter").unwrap();
    assert_eq!(client.check(&policy, "warm").await.unwrap().source, Source::Server);

    server.kill();
    let samples = load(&client, &policy, 8, Duration::from_millis(600)).await;
    let p99 = p99(&samples);
    assert!(p99 <= DEADLINE + Duration::from_millis(5), "p99 {p99:?} over {} decisions", samples.len());
    for (_, d) in &samples {
        assert!(matches!(&d.source, Source::Degraded { policy: FailurePolicy::Local { share: 2 }, .. }), "{d:?}");
        assert_eq!(d.limit, 5, "the local limit is the policy's divided by the share");
    }
    // Each key is limited locally: 5 of 10 per minute, as redis-throttle-core decides.
    let mut admitted = 0;
    for _ in 0..8 {
        let d = client.check(&policy, "one-key").await.unwrap();
        assert!(d.is_degraded());
        admitted += usize::from(d.allowed());
    }
    assert_eq!(admitted, 5);

    server.relaunch();
    let back = back_on_server(&client, &policy, Instant::now()).await;
    eprintln!("back on the server after {back:?}");
    assert!(back <= PROBE + DEADLINE + RECONNECT_SLACK, "back on the server after {back:?}");
}
