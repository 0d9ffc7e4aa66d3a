//! Overload is not failure: a burst the machine cannot answer at once waits for Redis, as
//! upstream's does, and is decided exactly; only Redis's own failures answer by `FAILURE_MODE`
//! and open the breaker. Through gRPC, on one Redis and on a 3-primary cluster, in both counting
//! modes (every hit counted; `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`), with default settings.

#[path = "../../tests/harness/mod.rs"]
mod harness;
mod rls;

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use harness::{Cluster, Server};
use rls::{Rls, descriptor, host_port, request, runtime};

const CONFIG: &str =
    "domain: burst\ndescriptors:\n  - { key: user, rate_limit: { unit: minute, requests_per_unit: 100 } }\n";

/// Waits, if needed, so that the next few seconds stay inside one minute (a burst must not
/// straddle two fixed windows).
async fn inside_one_minute(seconds: u64) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let into = now.as_secs() % 60;
    if into + seconds >= 60 {
        tokio::time::sleep(Duration::from_millis((60 - into) * 1000 + 200)).await;
    }
}

/// `calls` concurrent `ShouldRateLimit` for `value`: (OK, OVER_LIMIT, errors) and how long the
/// slowest took.
async fn burst(rls: &Rls, value: &str, calls: usize) -> (usize, usize, Vec<String>, Duration) {
    // A few connections, as a fleet of Envoys would open.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(rls.grpc().await);
    }
    let started = Instant::now();
    let tasks: Vec<_> = (0..calls)
        .map(|i| {
            let mut c = clients[i % clients.len()].clone();
            let r = request("burst", vec![descriptor(&[("user", value)])]);
            tokio::spawn(async move { c.should_rate_limit(r).await.map(|r| r.into_inner().overall_code) })
        })
        .collect();
    let (mut ok, mut over, mut errors) = (0, 0, Vec::new());
    for t in tasks {
        match t.await.unwrap() {
            Ok(code) if code == Code::Ok as i32 => ok += 1,
            Ok(code) if code == Code::OverLimit as i32 => over += 1,
            Ok(code) => errors.push(format!("code {code}")),
            Err(e) => errors.push(format!("{:?}: {}", e.code(), e.message())),
        }
    }
    (ok, over, errors, started.elapsed())
}

/// The whole proof on one service: the 2,000-call burst, the next one, a single call, the stats.
async fn a_burst_is_decided(rls: &Rls, what: &str, mut count: impl FnMut(&str) -> Option<i64>) {
    inside_one_minute(20).await;
    let value = format!("{what}-{}", std::process::id());
    let (ok, over, errors, took) = burst(rls, &value, 2000).await;
    assert_eq!((ok, over), (100, 1900), "{what}: {errors:?} in {took:?}\n{}", rls.log());
    assert!(errors.is_empty(), "{what}: {errors:?}");
    // Every hit counted, refused or not (upstream's meaning, in both modes for one descriptor).
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert_eq!(count(&format!("burst_user_{value}_{}", now / 60 * 60)), Some(2000), "{what}");
    // The next burst is decided as normal.
    let next = format!("{value}-next");
    let (ok, over, errors, _) = burst(rls, &next, 300).await;
    assert_eq!((ok, over, errors.len()), (100, 200, 0), "{what}: {errors:?}");
    let mut c = rls.grpc().await;
    let one = c
        .should_rate_limit(request("burst", vec![descriptor(&[("user", &format!("{value}-one"))])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((one.overall_code, one.statuses[0].limit_remaining), (Code::Ok as i32, 99), "{what}");
    // Stats add up, as upstream counts them (near: the hits past 80% of the limit).
    let stat = |s: &str| rls.stat(&format!("ratelimit.service.rate_limit.burst.user.{s}"));
    assert_eq!(stat("total_hits"), 2301, "{what}");
    assert_eq!(stat("within_limit"), 201, "{what}");
    assert_eq!(stat("over_limit"), 2100, "{what}");
    assert_eq!(stat("near_limit"), 40, "{what}");
    assert_eq!(rls.stat("ratelimit.service.call.should_rate_limit.redis_error"), 0, "{what}");
    assert_eq!(rls.stat("ratelimit_server.ShouldRateLimit.total_requests"), 2301, "{what}");
    let log = rls.log();
    assert!(!log.contains("circuit breaker open"), "{what}: the breaker tripped on a burst:\n{log}");
    println!("{what}: 2,000 concurrent calls decided in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_waits_for_redis_and_is_decided_exactly_on_one_redis_and_a_cluster() {
    rls::raise_file_limit();
    let server = Server::start();
    let cluster = Cluster::start(3, 0);
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let single = host_port(&server.url());
    let nodes: Vec<String> = cluster.urls().iter().map(|u| host_port(u)).collect();
    // Default settings: no DECISION_DEADLINE (the test harness sets one for other tests).
    for (what, url, extra) in [
        ("single", single.as_str(), vec![]),
        ("single-stop", single.as_str(), vec![("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")]),
        ("cluster", &nodes.join(","), vec![("REDIS_TYPE", "cluster")]),
        (
            "cluster-stop",
            &nodes.join(","),
            vec![("REDIS_TYPE", "cluster"), ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
        ),
    ] {
        let mut env = vec![("DECISION_DEADLINE", "")];
        env.extend(extra);
        let rls = Rls::start(&dir, url, &env);
        if what.starts_with("cluster") {
            let mut c = cluster.client();
            a_burst_is_decided(&rls, what, |k| redis::Commands::get(&mut c, k).ok()).await;
        } else {
            let mut c = server.client();
            a_burst_is_decided(&rls, what, |k| redis::Commands::get(&mut c, k).ok()).await;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Redis paused, then killed, with default settings but a short `REDIS_TIMEOUT`: a call waits for
/// Redis up to `REDIS_TIMEOUT` (or its caller's gRPC deadline), then `FAILURE_MODE` answers and the
/// breaker opens (its later calls answered at once); Redis back, the breaker closes and Redis
/// decides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_s_own_failure_opens_the_breaker_and_its_answer_closes_it() {
    let mut server = Server::start();
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let url = host_port(&server.url());
    let modes = ["error", "closed"];
    let services: Vec<Rls> = modes
        .iter()
        .map(|m| Rls::start(&dir, &url, &[("DECISION_DEADLINE", ""), ("REDIS_TIMEOUT", "1s"), ("FAILURE_MODE", m)]))
        .collect();
    let mut clients = Vec::new();
    for s in &services {
        clients.push(s.grpc().await);
    }
    let ask = |value: String| request("burst", vec![descriptor(&[("user", &value)])]);
    for fault in ["paused", "killed"] {
        for c in &mut clients {
            let r = c.should_rate_limit(ask(format!("before-{fault}"))).await.unwrap().into_inner();
            assert_eq!(r.overall_code, Code::Ok as i32);
        }
        let (pid, _resume) = rls::break_redis(&mut server, fault);
        for ((mode, c), rls) in modes.iter().zip(clients.iter_mut()).zip(&services) {
            if fault == "paused" {
                // The caller's own gRPC deadline bounds the wait: FAILURE_MODE answers before it,
                // and the error says which deadline passed.
                let started = Instant::now();
                let mut r = tonic::Request::new(ask(format!("{fault}-deadline")));
                r.set_timeout(Duration::from_millis(100));
                let answer = c.should_rate_limit(r).await;
                assert!(started.elapsed() < Duration::from_millis(500), "{mode}: {:?}", started.elapsed());
                match *mode {
                    "error" => {
                        let e = answer.unwrap_err();
                        assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
                        assert!(e.message().contains("the caller's gRPC deadline"), "{e:?}");
                        assert!(e.message().contains("FAILURE_MODE=error"), "{e:?}");
                    }
                    _ => assert_eq!(answer.unwrap().into_inner().overall_code, Code::OverLimit as i32),
                }
            }
            // The first calls wait for Redis (paused: up to REDIS_TIMEOUT), then FAILURE_MODE.
            let started = Instant::now();
            let (mut a, mut b, mut d) = (c.clone(), c.clone(), c.clone());
            let (ra, rb, rd) = tokio::join!(
                a.should_rate_limit(ask(format!("{fault}-a"))),
                b.should_rate_limit(ask(format!("{fault}-b"))),
                d.should_rate_limit(ask(format!("{fault}-d")))
            );
            let first = vec![ra, rb, rd];
            let waited = started.elapsed();
            if fault == "paused" {
                assert!(waited >= Duration::from_millis(900), "{mode}: waited {waited:?} for a paused Redis");
            }
            // The breaker is open: answered at once.
            let quick = Instant::now();
            let later = c.should_rate_limit(ask(format!("{fault}-later"))).await;
            assert!(quick.elapsed() < Duration::from_millis(300), "{mode} {fault}: {:?}", quick.elapsed());
            for r in first.into_iter().chain([later]) {
                match *mode {
                    "error" => {
                        let e = r.unwrap_err();
                        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
                        assert!(e.message().contains("FAILURE_MODE=error"), "{e:?}");
                    }
                    _ => assert_eq!(r.unwrap().into_inner().overall_code, Code::OverLimit as i32),
                }
            }
            rls.wait_log("circuit breaker open");
        }
        rls::mend_redis(&mut server, fault, pid);
        let back = Instant::now();
        for (mode, c) in modes.iter().zip(clients.iter_mut()) {
            loop {
                if let Ok(r) = c.should_rate_limit(ask(format!("back-{fault}"))).await
                    && r.into_inner().overall_code == Code::Ok as i32
                {
                    break;
                }
                assert!(back.elapsed() < Duration::from_secs(3), "{mode}: Redis back, but not asked");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        for rls in &services {
            rls.wait_log("circuit breaker closed");
        }
    }
    drop(services);
    let _ = std::fs::remove_dir_all(&dir);
}
