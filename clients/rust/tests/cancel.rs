//! Cancellation: every public future of the client dropped at each of its await points (the
//! caller's own timeout, `select!`, an aborted task), with the server paused (SIGSTOP) and
//! after it returns (SIGCONT), and with the server up. Afterwards the client is correct: it
//! goes back to the server within one probe interval (a cancelled probe never leaves the
//! breaker open for ever), and no lease stays held by a call that was cancelled.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use harness::{Resume, Server, signal};
use redis_throttle_client::{BreakerConfig, Config, FailurePolicy, Policy, Rate, Source, Throttle, Wait};

const DEADLINE: Duration = Duration::from_millis(200);
const PROBE: Duration = Duration::from_millis(100);
/// A lease far longer than the test, so a slot freed in time was released, not expired.
const LONG_LEASE: Duration = Duration::from_secs(60);

type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Makes one call's future from a client.
type Make = fn(Throttle) -> Call;

/// Drops the future once it has returned `Pending` `pendings` times: `true` if it ended first.
struct CancelAfter {
    future: Call,
    pendings: usize,
}

impl Future for CancelAfter {
    type Output = bool;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        match self.future.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(true),
            Poll::Pending => {
                self.pendings -= 1;
                if self.pendings == 0 { Poll::Ready(false) } else { Poll::Pending }
            }
        }
    }
}

/// Every public future, by name, made from a client (each ignores its result: cancellation is
/// under test, not the answers).
fn calls() -> Vec<(&'static str, Make)> {
    fn policy() -> Policy {
        Policy::parse("1000/s").unwrap()
    }
    vec![
        ("check", |c| Box::pin(async move { drop(c.check(&policy(), "k").await) })),
        ("check_n", |c| Box::pin(async move { drop(c.check_n(&policy(), "k", 3).await) })),
        ("peek", |c| Box::pin(async move { drop(c.peek(&policy(), "k").await) })),
        ("refund", |c| Box::pin(async move { drop(c.refund(&policy(), "k", 1).await) })),
        ("check_all", |c| {
            Box::pin(async move {
                let (a, b) = (policy(), Policy::parse("10000/h").unwrap());
                drop(c.check_all(&[(&a, b"{u}:s", 1), (&b, b"{u}:h", 1)]).await)
            })
        }),
        ("reserve + drop", |c| {
            Box::pin(async move { drop(c.reserve(&policy(), "r", 5, Duration::from_secs(5)).await) })
        }),
        ("reserve + finish", |c| {
            Box::pin(async move {
                if let Ok(Ok(r)) = c.reserve(&policy(), "r", 5, Duration::from_secs(5)).await {
                    r.finish().await;
                }
            })
        }),
        ("acquire + drop", |c| Box::pin(async move { drop(c.acquire("lease", 5, LONG_LEASE).await) })),
        ("acquire + release", |c| {
            Box::pin(async move {
                if let Ok(Ok(lease)) = c.acquire("lease", 5, LONG_LEASE).await {
                    let _ = lease.release().await;
                }
            })
        }),
        ("pace sleep", |c| {
            Box::pin(async move { drop(c.pace("p", Rate::per_second(20), Duration::from_secs(1), Wait::Sleep).await) })
        }),
        ("pace block", |c| {
            Box::pin(async move { drop(c.pace("p", Rate::per_second(20), Duration::from_secs(1), Wait::Block).await) })
        }),
        ("held_policies", |c| {
            Box::pin(async move { drop(c.held_policies("throttle:policies", Duration::from_secs(60)).await) })
        }),
        ("top", |c| Box::pin(async move { drop(c.top(5).await) })),
        ("info", |c| Box::pin(async move { drop(c.info().await) })),
    ]
}

fn holders(server: &Server, key: &str) -> i64 {
    let now: i64 = harness::server_ms(&mut server.client());
    redis::cmd("ZCOUNT").arg(key).arg(format!("({now}")).arg("+inf").query(&mut server.client()).unwrap()
}

/// Checks until the server answers again; how long that took.
async fn back_on_server(client: &Throttle, what: &str) -> Duration {
    let since = Instant::now();
    loop {
        let d = client.check(&Policy::parse("1000/s").unwrap(), "probe").await.unwrap();
        if d.source == Source::Server {
            return since.elapsed();
        }
        assert!(since.elapsed() < Duration::from_secs(3), "{what}: the client never went back to the server: {d:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// After a cancellation: the client is back on the server within a probe interval plus a
/// deadline, and no lease is held (every acquire was cancelled or released).
async fn assert_correct(server: &Server, client: &Throttle, what: &str) {
    let back = back_on_server(client, what).await;
    assert!(back <= PROBE + DEADLINE + Duration::from_millis(150), "{what}: back on the server after {back:?}");
    let start = Instant::now();
    while holders(server, "lease") != 0 {
        assert!(start.elapsed() < Duration::from_secs(2), "{what}: a cancelled call left a lease held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn config() -> Config {
    Config {
        deadline: DEADLINE,
        failure: FailurePolicy::FailOpen,
        breaker: BreakerConfig { failures: 1, probe_interval: PROBE },
        // A call unanswered within its deadline is the server's failure at once.
        server_timeout: DEADLINE,
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_it_probes_a_paused_server_leaves_the_client_correct() {
    let server = Server::start();
    let pid = server.pid();
    let _resume = Resume(pid);
    let client = Throttle::connect_with(&server.url(), config()).await.unwrap();
    let warm = Policy::parse("1000/s").unwrap();
    for (name, make) in calls() {
        for pendings in 1.. {
            signal(pid, libc::SIGSTOP);
            // Open the breaker (one failure), then wait until the next call is its probe.
            let d = client.check(&warm, "opener").await.unwrap();
            assert!(d.is_degraded(), "{d:?}");
            assert!(client.is_degraded());
            tokio::time::sleep(PROBE + Duration::from_millis(10)).await;
            let ended = CancelAfter { future: make(client.clone()), pendings }.await;
            signal(pid, libc::SIGCONT);
            assert_correct(&server, &client, &format!("{name}, cancelled at await point {pendings} (server paused)"))
                .await;
            if ended {
                eprintln!("{name}: {pendings} await points with the server paused");
                break;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_at_any_await_point_leaves_the_client_correct() {
    let server = Server::start();
    let client = Throttle::connect_with(&server.url(), config()).await.unwrap();
    for (name, make) in calls() {
        let start = Instant::now();
        for pendings in 1.. {
            let ended = CancelAfter { future: make(client.clone()), pendings }.await;
            assert_correct(&server, &client, &format!("{name}, cancelled at await point {pendings}")).await;
            if ended {
                eprintln!("{name}: {pendings} await points, {:?}", start.elapsed());
                break;
            }
            assert!(pendings < 50, "{name}: still pending after 50 polls");
        }
    }
}

/// A lease dropped while its renewal task is the breaker's probe: the library aborts its own
/// task mid-call. The next call probes, and the client is back on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_dropped_while_its_renewal_probes_leaves_the_breaker_working() {
    let server = Server::start();
    let pid = server.pid();
    let _resume = Resume(pid);
    let deadline = Duration::from_secs(1);
    let config =
        Config { deadline, breaker: BreakerConfig { failures: 1, probe_interval: PROBE }, ..Config::default() };
    let client = Throttle::connect_with(&server.url(), config).await.unwrap();
    // Renewed every 200 ms.
    let lease = client.acquire("renewed", 1, Duration::from_millis(600)).await.unwrap().unwrap();
    signal(pid, libc::SIGSTOP);
    // The renewal at ~200 ms waits its deadline (to ~1.2 s) and opens the breaker; the next,
    // at ~1.4 s, is the probe and waits to ~2.4 s. Drop the guard in between.
    tokio::time::sleep(Duration::from_millis(1900)).await;
    assert!(client.is_degraded(), "the renewals opened the breaker");
    drop(lease);
    signal(pid, libc::SIGCONT);
    tokio::time::sleep(PROBE).await;
    let back = back_on_server(&client, "lease dropped mid-renewal").await;
    assert!(back <= PROBE + deadline, "back on the server after {back:?}");
}
