//! The built service against real servers: Redis with the module, Redis with only the Functions
//! twin, and a 3-primary cluster. gRPC `ShouldRateLimit` and health, `POST /json`,
//! `/healthcheck`, `/rlconfig`, `/stats`; upstream's keys in Redis; reloads (a bad one keeps the
//! old configuration); refused variables; the failure modes with Redis paused and killed; TLS
//! and mTLS on the gRPC listener.

#[path = "../../tests/harness/mod.rs"]
mod harness;
mod rls;

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use harness::{Cluster, Server};
use redis::Commands;
use rls::{CONFIG, Rls, descriptor, host_port, request, runtime};

/// What every backend must do the same way.
async fn scenarios(rls: &Rls, mut redis_get: impl FnMut(&str) -> Option<i64>) {
    let mut client = rls.grpc().await;
    // 50 concurrent requests against 3 a minute: exactly 3 admitted.
    let mut handles = Vec::new();
    for _ in 0..50 {
        let mut c = client.clone();
        handles.push(tokio::spawn(async move {
            c.should_rate_limit(request("gw", vec![descriptor(&[("three", "u1")])]))
                .await
                .unwrap()
                .into_inner()
                .overall_code
        }));
    }
    let mut ok = 0;
    for h in handles {
        if h.await.unwrap() == Code::Ok as i32 {
            ok += 1;
        }
    }
    assert_eq!(ok, 3, "{}", rls.log());
    // Upstream's key: domain_key_value_windowstart, holding the count (every hit, as upstream's).
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let key = format!("gw_three_u1_{}", now / 60 * 60);
    let other = format!("gw_three_u1_{}", (now / 60 - 1) * 60);
    assert_eq!(redis_get(&key).or_else(|| redis_get(&other)), Some(50));
    assert_eq!(rls.stat("ratelimit.service.rate_limit.gw.three.total_hits"), 50);
    assert_eq!(rls.stat("ratelimit.service.rate_limit.gw.three.over_limit"), 47);

    // Each algorithm refuses past its limit.
    for (key, admitted) in [("gcra", 2), ("sliding", 2), ("bucket", 2), ("calendar", 2), ("hour", 10)] {
        for i in 0..admitted + 1 {
            let r =
                client.should_rate_limit(request("gw", vec![descriptor(&[(key, "u1")])])).await.unwrap().into_inner();
            let want = if i < admitted { Code::Ok } else { Code::OverLimit };
            assert_eq!(r.overall_code, want as i32, "{key} hit {i}: {r:?}");
            assert!(r.statuses[0].duration_until_reset.is_some());
        }
    }

    // /json: 200, 429 and 400 as upstream answers them.
    let (code, body) = Rls::http(
        &rls.http,
        "POST",
        "/json",
        r#"{"domain":"gw","descriptors":[{"entries":[{"key":"three","value":"json"}]}]}"#,
    );
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["overallCode"], "OK");
    assert_eq!(v["statuses"][0]["currentLimit"], serde_json::json!({"requestsPerUnit": 3, "unit": "MINUTE"}));
    assert_eq!(v["statuses"][0]["limitRemaining"], 2);
    for _ in 0..2 {
        Rls::http(
            &rls.http,
            "POST",
            "/json",
            r#"{"domain":"gw","descriptors":[{"entries":[{"key":"three","value":"json"}]}]}"#,
        );
    }
    let (code, body) = Rls::http(
        &rls.http,
        "POST",
        "/json",
        r#"{"domain":"gw","descriptors":[{"entries":[{"key":"three","value":"json"}]}]}"#,
    );
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("\"OVER_LIMIT\""), "{body}");
    let (code, _) = Rls::http(&rls.http, "POST", "/json", "{not json");
    assert_eq!(code, 400);
    let (code, _) = Rls::http(&rls.http, "POST", "/json", r#"{"domain":"","descriptors":[]}"#);
    assert_eq!(code, 400);

    // Health, on HTTP and gRPC (service `ratelimit`), and the debug port.
    assert_eq!(Rls::http(&rls.http, "GET", "/healthcheck", ""), (200, "OK".to_string()));
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", rls.grpc)).unwrap().connect().await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest { service: "ratelimit".into() })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);
    let (_, dump) = Rls::http(&rls.debug, "GET", "/rlconfig", "");
    assert!(
        dump.contains("gw.three: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n"),
        "{dump}"
    );
    assert!(dump.contains("gw.gcra: unit=MINUTE requests_per_unit=60"), "{dump}");
    assert_eq!(rls.stat("ratelimit.service.config_load_success"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_module() {
    let server = Server::start();
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let rls = Rls::start(&dir, &host_port(&server.url()), &[]);
    let mut c = server.client();
    scenarios(&rls, |k| c.get(k).ok()).await;

    // A reload: a good change applies, a bad one is counted and keeps the old configuration.
    std::fs::write(
        dir.join("ratelimit/config/config.yaml"),
        CONFIG.replace("requests_per_unit: 3 }", "requests_per_unit: 5 }"),
    )
    .unwrap();
    rls.wait_stat("ratelimit.service.config_load_success", 2);
    let mut client = rls.grpc().await;
    let r =
        client.should_rate_limit(request("gw", vec![descriptor(&[("three", "reload")])])).await.unwrap().into_inner();
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().requests_per_unit, 5);
    std::fs::write(
        dir.join("ratelimit/config/config.yaml"),
        "domain: gw\ndescriptors:\n  - key: three\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    )
    .unwrap();
    rls.wait_stat("ratelimit.service.config_load_error", 1);
    // Named as upstream names it: relative to the watched directory (here the app directory,
    // RUNTIME_WATCH_ROOT=false), the extension kept.
    rls.wait_log("config.yaml: invalid rate limit unit 'fortnight'");
    let r =
        client.should_rate_limit(request("gw", vec![descriptor(&[("three", "reload")])])).await.unwrap().into_inner();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_twin() {
    let server = rls::twin_server();
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let rls = Rls::start(&dir, &host_port(&server.url()), &[]);
    let mut c = server.client();
    scenarios(&rls, |k| c.get(k).ok()).await;
    // No module command reached the server: the twin decided.
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut c).unwrap();
    assert!(info.contains("cmdstat_fcall"), "{info}");
    assert!(!info.to_ascii_lowercase().contains("cmdstat_cl."), "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_all_or_nothing_across_slots() {
    let cluster = Cluster::start(3, 0);
    let urls: Vec<String> = cluster.urls().iter().map(|u| host_port(u)).collect();
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let rls = Rls::start(&dir, &urls.join(","), &[("REDIS_TYPE", "cluster")]);
    let mut c = cluster.client();
    scenarios(&rls, |k| c.get(k).ok()).await;

    // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: the descriptors of a request, in different
    // slots, decided all or nothing (refunds of the admitting slots when another refuses).
    let all = Rls::start(
        &dir,
        &urls.join(","),
        &[("REDIS_TYPE", "cluster"), ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
    );
    let mut client = all.grpc().await;
    let (a, b) = (("hour", "tenant-a"), ("three", "tenant-b"));
    let slot = |k: &[u8]| redis::cluster_routing::Slot::for_key(k);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert_ne!(
        slot(format!("gw_hour_tenant-a_{}", now / 3600 * 3600).as_bytes()),
        slot(format!("gw_three_tenant-b_{}", now / 60 * 60).as_bytes())
    );
    let mut admitted = 0;
    for i in 0..6 {
        let r = client
            .should_rate_limit(request("gw", vec![descriptor(&[a]), descriptor(&[b])]))
            .await
            .unwrap()
            .into_inner();
        if r.overall_code == Code::Ok as i32 {
            admitted += 1;
        } else {
            // The hourly limit keeps what it had: nothing charged for a refused request.
            assert_eq!(r.statuses[0].limit_remaining, 7, "hit {i}: {r:?}");
        }
    }
    assert_eq!(admitted, 3);
    let hour_key = format!("gw_hour_tenant-a_{}", now / 3600 * 3600);
    let held: Option<i64> = c.get(&hour_key).ok();
    assert_eq!(held, Some(3), "the hourly key holds the admitted requests only");
    // Upstream's stop-increment: the key that went over is counted still (every hit of a fixed
    // window is), only the others stop.
    let minute = |t: i64| format!("gw_three_tenant-b_{}", t / 60 * 60);
    let three: Option<i64> = c.get(minute(now)).ok().or_else(|| c.get(minute(now - 60)).ok());
    assert_eq!(three, Some(6), "3 admitted and 3 over, all counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_modes_answer_within_the_deadline_and_recover_within_a_second() {
    let mut server = Server::start();
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let url = host_port(&server.url());
    let deadline = [("DECISION_DEADLINE", "50ms")];
    let modes = ["error", "open", "closed", "local", "closed-all"];
    // closed-all: all or nothing (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), asked two descriptors.
    let services: Vec<Rls> = modes
        .iter()
        .map(|m| match *m {
            "closed-all" => Rls::start(
                &dir,
                &url,
                &[deadline[0], ("FAILURE_MODE", "closed"), ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
            ),
            m => Rls::start(&dir, &url, &[deadline[0], ("FAILURE_MODE", m)]),
        })
        .collect();
    let mut clients = Vec::new();
    for s in &services {
        clients.push(s.grpc().await);
    }
    // Warm up: every service has reached Redis.
    for c in &mut clients {
        assert_eq!(
            c.should_rate_limit(request("gw", vec![descriptor(&[("hour", "warm")])]))
                .await
                .unwrap()
                .into_inner()
                .overall_code,
            Code::Ok as i32
        );
    }
    let expect = |mode: &str,
                  r: Result<
        tonic::Response<envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse>,
        tonic::Status,
    >| match mode {
        // Killed: Redis unreachable (UNAVAILABLE); paused: DECISION_DEADLINE passed (Redis may
        // only be slow: DEADLINE_EXCEEDED). Either says which, and that FAILURE_MODE=error chose it.
        "error" => {
            let e = r.unwrap_err();
            assert!(matches!(e.code(), tonic::Code::Unavailable | tonic::Code::DeadlineExceeded), "{e:?}");
            assert!(e.message().contains("FAILURE_MODE=error"), "{e:?}");
        }
        "open" => assert_eq!(r.unwrap().into_inner().overall_code, Code::Ok as i32),
        "closed" | "closed-all" => assert_eq!(r.unwrap().into_inner().overall_code, Code::OverLimit as i32),
        _ => {
            r.unwrap();
        }
    };
    for fault in ["paused", "killed"] {
        let (pid, _resume) = rls::break_redis(&mut server, fault);
        for (mode, c) in modes.iter().zip(clients.iter_mut()) {
            for i in 0..5 {
                let started = Instant::now();
                let mut descriptors = vec![descriptor(&[("hour", &format!("{fault}-{i}"))])];
                if *mode == "closed-all" {
                    descriptors.push(descriptor(&[("three", &format!("{fault}-{i}"))]));
                }
                let r = c.should_rate_limit(request("gw", descriptors)).await;
                assert!(
                    started.elapsed() < Duration::from_millis(1000),
                    "{mode} with Redis {fault}: {:?}",
                    started.elapsed()
                );
                expect(mode, r);
            }
        }
        // Local limiting keeps the limit alone: 3 a minute, here.
        let local = &mut clients[3];
        let mut admitted = 0;
        for _ in 0..6 {
            if local
                .should_rate_limit(request("gw", vec![descriptor(&[("three", &format!("local-{fault}"))])]))
                .await
                .unwrap()
                .into_inner()
                .overall_code
                == Code::Ok as i32
            {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 3);
        // Redis back: decisions are the server's again within a second.
        rls::mend_redis(&mut server, fault, pid);
        let back = Instant::now();
        let mut redis = server.client();
        for (mode, c) in modes.iter().zip(clients.iter_mut()) {
            for n in 0.. {
                // A decision the server made leaves its key in Redis (a degraded one does not).
                let value = format!("back-{fault}-{mode}-{n}");
                let _ = c.should_rate_limit(request("gw", vec![descriptor(&[("hour", &value)])])).await;
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
                let counted: Option<i64> = redis.get(format!("gw_hour_{value}_{}", now / 3600 * 3600)).ok();
                if counted == Some(1) {
                    break;
                }
                assert!(back.elapsed() < Duration::from_millis(1500), "{mode}: not back within a second of Redis");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert!(services[0].stat("ratelimit.service.call.should_rate_limit.redis_error") >= 10);
}

#[test]
fn what_cannot_mean_anything_here_stops_the_start_by_name() {
    for (name, value) in [
        ("CONFIG_TYPE", "GRPC_XDS_DELTA"),
        ("BACKEND_TYPE", "memcache"),
        ("REDIS_TYPE", "RING"),
        ("REDIS_PERSECOND", "true"),
    ] {
        let (code, err) = rls::refused(&[(name, value)]);
        assert_eq!(code, 1);
        assert!(err.contains(&format!("{name}={value}")), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sentinel_the_service_follows_a_failover() {
    let master = Server::start();
    let replica = master.replica(harness::Options::default());
    let sentinel = rls::Sentinel::start("gwmaster", &master);
    let mut s = sentinel.client().unwrap();
    harness::wait_until("the sentinel to know the replica", Duration::from_secs(30), || {
        let replicas: Vec<redis::Value> =
            redis::cmd("SENTINEL").arg("REPLICAS").arg("gwmaster").query(&mut s).unwrap_or_default();
        !replicas.is_empty()
    });
    let dir = runtime(&[("config.yaml", CONFIG)]);
    // Upstream's form: the master's name, then the sentinels.
    let rls = Rls::start(&dir, &format!("gwmaster,127.0.0.1:{}", sentinel.port), &[("REDIS_TYPE", "SENTINEL")]);
    let mut client = rls.grpc().await;
    let ask = async |client: &mut rls::Client, value: &str| {
        client
            .should_rate_limit(request("gw", vec![descriptor(&[("hour", value)])]))
            .await
            .map(|r| r.into_inner().overall_code)
    };
    let hour = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() / 3600 * 3600;
    let first_hour = hour();
    for i in 0..10 {
        assert_eq!(ask(&mut client, "before").await.unwrap(), Code::Ok as i32, "hit {i}: {}", rls.log());
    }
    let on_master: Option<i64> = master.client().get(format!("gw_hour_before_{first_hour}")).ok();
    assert!(on_master == Some(10) || hour() != first_hour, "decided on the sentinels' master: {on_master:?}");
    // The replica has every count before it is promoted (a forced failover does not wait, and
    // replication is asynchronous). Read on the replica: a WAIT from this test's own connection
    // would not wait for the service's writes (WAIT counts the caller's writes only).
    harness::wait_until("the replica to hold the counts", Duration::from_secs(20), || {
        replica.client().get::<_, Option<i64>>(format!("gw_hour_before_{first_hour}")).ok().flatten() == Some(10)
            || hour() != first_hour
    });

    // A failover: the replica becomes the master, the old master its replica (read-only). (The
    // sentinel refuses it, NOGOODSLAVE, until it has talked to the replica itself.)
    harness::wait_until("the sentinel to start a failover", Duration::from_secs(30), || {
        match redis::cmd("SENTINEL").arg("FAILOVER").arg("gwmaster").query::<()>(&mut s) {
            Ok(()) => true,
            Err(e) if e.code() == Some("NOGOODSLAVE") => {
                std::thread::sleep(Duration::from_millis(100));
                false
            }
            Err(e) => panic!("SENTINEL FAILOVER: {e}"),
        }
    });
    let started = Instant::now();
    for n in 0.. {
        let asked = Instant::now();
        let value = format!("after-{n}");
        let r = ask(&mut client, &value).await;
        // Never a wait: answered, or UNAVAILABLE (FAILURE_MODE=error) while the master is
        // read-only or gone, within the deadline's reach.
        assert!(asked.elapsed() < Duration::from_secs(1), "{:?}", asked.elapsed());
        if let Err(e) = &r {
            assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        }
        let counted: Option<i64> = replica.client().get(format!("gw_hour_{value}_{}", hour())).ok();
        let role: String = redis::cmd("INFO").arg("replication").query(&mut replica.client()).unwrap();
        if r.is_ok() && counted == Some(1) && role.contains("role:master") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never on the new master: {r:?}\n{}", rls.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The count came along (replicated): the limit stays full for that user.
    if hour() == first_hour {
        let code = ask(&mut client, "before").await.unwrap();
        let key = format!("gw_hour_before_{first_hour}");
        let state = |server: &Server| {
            let mut c = server.client();
            let count: Option<i64> = c.get(&key).ok();
            let role: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap_or_default();
            format!(
                "{count:?} {}",
                role.lines()
                    .filter(|l| l.starts_with("role:") || l.starts_with("master_port:"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        };
        assert_eq!(
            code,
            Code::OverLimit as i32,
            "old master {}; new master {}\n{}",
            state(&master),
            state(&replica),
            rls.log()
        );
    }
}

/// gRPC health of service `ratelimit`: whether it is SERVING.
async fn serving(rls: &Rls) -> bool {
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", rls.grpc)).unwrap().connect().await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest { service: "ratelimit".into() })
        .await
        .unwrap()
        .into_inner()
        .status;
    status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
}

/// Waits up to `within` for `/healthcheck` (and gRPC health) to say `healthy`.
async fn until_health(rls: &Rls, healthy: bool, within: Duration) {
    let want = if healthy { (200, "OK".to_string()) } else { (500, String::new()) };
    let start = Instant::now();
    loop {
        if Rls::http(&rls.http, "GET", "/healthcheck", "") == want && serving(rls).await == healthy {
            return;
        }
        assert!(
            start.elapsed() < within,
            "/healthcheck never became {want:?}: {:?}\n{}",
            Rls::http(&rls.http, "GET", "/healthcheck", ""),
            rls.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_follows_redis_as_upstream_s_does() {
    let mut server = Server::start();
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let url = host_port(&server.url());
    let passive = Rls::start(&dir, &url, &[]);
    let active = Rls::start(&dir, &url, &[("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true")]);
    for rls in [&passive, &active] {
        until_health(rls, true, Duration::from_secs(1)).await;
    }
    // Redis killed, no traffic: with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION the service turns
    // unhealthy (500, empty body, as upstream's; gRPC NOT_SERVING) within a few seconds...
    let (pid, _resume) = rls::break_redis(&mut server, "killed");
    until_health(&active, false, Duration::from_secs(5)).await;
    // ...without it, it stays healthy once Redis has answered (upstream's default).
    assert_eq!(Rls::http(&passive.http, "GET", "/healthcheck", ""), (200, "OK".to_string()));
    assert!(serving(&passive).await);
    rls::mend_redis(&mut server, "killed", pid);
    until_health(&active, true, Duration::from_secs(5)).await;
    // A start while Redis is down is unhealthy until Redis first answers.
    let nobody = format!("127.0.0.1:{}", harness::free_port(false));
    let down = Rls::start(&dir, &nobody, &[("REDIS_TIMEOUT", "200ms")]);
    until_health(&down, false, Duration::from_secs(1)).await;
}

/// The connections `server` has (`CLIENT LIST`, the asking one included).
fn connections(server: &Server) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut server.client()).unwrap();
    list.lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_pool_size_is_the_connections_and_every_limit_stays_exact_across_them() {
    let server = Server::start();
    let dir = runtime(&[("config.yaml", CONFIG)]);
    for (pool, opened) in [(None, 1), (Some("4"), 4)] {
        let before = connections(&server);
        let extra: Vec<(&str, &str)> = pool.map(|p| ("REDIS_POOL_SIZE", p)).into_iter().collect();
        let rls = Rls::start(&dir, &host_port(&server.url()), &extra);
        assert_eq!(connections(&server), before + opened, "REDIS_POOL_SIZE={pool:?}: {}", rls.log());
        // 40 concurrent requests against 3 a minute, spread over the connections: exactly 3.
        let client = rls.grpc().await;
        let user = format!("pool{opened}");
        let handles: Vec<_> = (0..40)
            .map(|_| {
                let (mut c, user) = (client.clone(), user.clone());
                tokio::spawn(async move {
                    c.should_rate_limit(request("gw", vec![descriptor(&[("three", &user)])]))
                        .await
                        .unwrap()
                        .into_inner()
                        .overall_code
                })
            })
            .collect();
        let mut ok = 0;
        for h in handles {
            ok += usize::from(h.await.unwrap() == Code::Ok as i32);
        }
        assert_eq!(ok, 3, "REDIS_POOL_SIZE={pool:?}");
    }
}

#[test]
fn redis_startup_max_elapsed_time_stops_a_start_redis_never_answers() {
    let nobody = format!("127.0.0.1:{}", harness::free_port(false));
    let started = Instant::now();
    let (code, err) = rls::refused(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &nobody),
        ("REDIS_STARTUP_MAX_ELAPSED_TIME", "1s"),
        ("USE_STATSD", "false"),
        ("PORT", "0"),
        ("GRPC_PORT", "0"),
        ("DEBUG_PORT", "0"),
        ("HOST", "127.0.0.1"),
        ("GRPC_HOST", "127.0.0.1"),
        ("DEBUG_HOST", "127.0.0.1"),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("REDIS_STARTUP_MAX_ELAPSED_TIME"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_mtls_on_the_grpc_listener() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server_cert =
        CertificateParams::new(vec!["localhost".to_string()]).unwrap().signed_by(&server_key, &ca, &ca_key).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client_cert =
        CertificateParams::new(vec!["envoy".to_string()]).unwrap().signed_by(&client_key, &ca, &ca_key).unwrap();
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let write = |name: &str, pem: String| {
        let p = dir.join(name);
        std::fs::write(&p, pem).unwrap();
        p.to_string_lossy().into_owned()
    };
    let (cert, key, ca_file) = (
        write("server.pem", server_cert.pem()),
        write("server.key", server_key.serialize_pem()),
        write("ca.pem", ca.pem()),
    );
    let server = Server::start();
    let rls = Rls::start(
        &dir,
        &host_port(&server.url()),
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &cert),
            ("GRPC_SERVER_TLS_KEY", &key),
            ("GRPC_CLIENT_TLS_CACERT", &ca_file),
        ],
    );
    let port = rls.grpc.rsplit(':').next().unwrap().to_string();
    let tls = |with_identity: bool| {
        let mut t = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca.pem()))
            .domain_name("localhost");
        if with_identity {
            t = t.identity(tonic::transport::Identity::from_pem(client_cert.pem(), client_key.serialize_pem()));
        }
        t
    };
    let endpoint = |with_identity: bool| {
        tonic::transport::Channel::from_shared(format!("https://localhost:{port}"))
            .unwrap()
            .tls_config(tls(with_identity))
            .unwrap()
    };
    let channel = endpoint(true).connect().await.unwrap();
    let mut client =
        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
    let r = client.should_rate_limit(request("gw", vec![descriptor(&[("three", "tls")])])).await.unwrap().into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    // Without a client certificate the handshake (or the first call) fails.
    let refused = match endpoint(false).connect().await {
        Err(_) => true,
        Ok(ch) => {
            envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(ch)
                .should_rate_limit(request("gw", vec![descriptor(&[("three", "tls")])]))
                .await
                .is_err()
        }
    };
    assert!(refused, "a client without a certificate was served");
    // Plain text is refused too.
    let plain = match tonic::transport::Channel::from_shared(format!("http://{}", rls.grpc)).unwrap().connect().await {
        Err(_) => true,
        Ok(ch) => {
            envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(ch)
                .should_rate_limit(request("gw", vec![descriptor(&[("three", "tls")])]))
                .await
                .is_err()
        }
    };
    assert!(plain, "a plain-text client was served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_reach_statsd_and_prometheus_by_upstream_s_names() {
    use std::io::Read;
    let server = Server::start();
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let statsd = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let statsd_port = statsd.local_addr().unwrap().port().to_string();
    let with_statsd = Rls::start(
        &dir,
        &host_port(&server.url()),
        &[
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &statsd_port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
        ],
    );
    let mut client = with_statsd.grpc().await;
    client.should_rate_limit(request("gw", vec![descriptor(&[("three", "statsd")])])).await.unwrap();
    let (mut conn, _) = statsd.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while !got.contains("ratelimit.service.rate_limit.gw.three.total_hits:1|c\n") || !got.contains("response_time:") {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "statsd closed: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(got.contains("ratelimit_server.ShouldRateLimit.total_requests:1|c\n"), "{got}");
    // The response time as gostats sends a timer: one sample, whole milliseconds, `|ms`.
    let timer: Vec<&str> = got.lines().filter(|l| l.contains("response_time")).collect();
    assert_eq!(timer.len(), 1, "{got}");
    let ms = timer[0]
        .strip_prefix("ratelimit_server.ShouldRateLimit.response_time:")
        .and_then(|v| v.strip_suffix("|ms"))
        .unwrap_or_else(|| panic!("{got}"));
    assert!(ms.parse::<u64>().is_ok(), "{got}");

    let with_prometheus = Rls::start(
        &dir,
        &host_port(&server.url()),
        &[("USE_STATSD", "false"), ("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", "127.0.0.1:0")],
    );
    let mut client = with_prometheus.grpc().await;
    for _ in 0..4 {
        client.should_rate_limit(request("gw", vec![descriptor(&[("three", "prom")])])).await.unwrap();
    }
    // /json decides (and counts its limit's hits) but, as upstream's handler, is no gRPC call.
    Rls::http(
        &with_prometheus.http,
        "POST",
        "/json",
        r#"{"domain":"gw","descriptors":[{"entries":[{"key":"three","value":"prom"}]}]}"#,
    );
    let log = with_prometheus.log();
    let marker = "Listening for Prometheus on '";
    let start = log.find(marker).expect("the Prometheus listener") + marker.len();
    let addr = &log[start..start + log[start..].find('\'').unwrap()];
    let (code, body) = Rls::http(addr, "GET", "/metrics", "");
    assert_eq!(code, 200);
    for line in [
        "ratelimit_service_rate_limit_total_hits{domain=\"gw\",key1=\"three\"} 5",
        "ratelimit_service_rate_limit_over_limit{domain=\"gw\",key1=\"three\"} 2",
        "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 4",
        "ratelimit_service_config_load_success 1",
        // Upstream's default mapping: a histogram in seconds, statsd_exporter's default buckets.
        "# TYPE ratelimit_service_response_time_seconds histogram",
        "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"10\"} 4",
        "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"+Inf\"} 4",
        "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 4",
    ] {
        assert!(body.contains(line), "{line} missing from:\n{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_redis_with_a_client_certificate() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct names: OpenSSL takes a leaf named as its issuer for a self-signed one.
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "redis-throttle test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issue = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let write = |name: &str, pem: &str| {
        let p = dir.join(name);
        std::fs::write(&p, pem).unwrap();
        p.to_string_lossy().into_owned()
    };
    let (server_cert, server_key) = issue("localhost");
    let (client_cert, client_key) = issue("rls");
    let (ca_file, sc, sk, cc, ck) = (
        write("ca.pem", &ca.pem()),
        write("redis.pem", &server_cert),
        write("redis.key", &server_key),
        write("client.pem", &client_cert),
        write("client.key", &client_key),
    );
    let tls_port = harness::free_port(false);
    // The harness checks the server on its plain port; the service speaks TLS to the other, with
    // a client certificate the server requires.
    let server = Server::with(harness::Options::default().arg(&format!("--tls-port {tls_port} --tls-cert-file {sc} --tls-key-file {sk} --tls-ca-cert-file {ca_file} --tls-auth-clients yes")));
    let rls = Rls::start(
        &dir,
        &format!("localhost:{tls_port}"),
        &[
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", &ca_file),
            ("REDIS_TLS_CLIENT_CERT", &cc),
            ("REDIS_TLS_CLIENT_KEY", &ck),
        ],
    );
    let mut client = rls.grpc().await;
    let r = client.should_rate_limit(request("gw", vec![descriptor(&[("hour", "tls")])])).await.unwrap().into_inner();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, 9), "{}", rls.log());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let counted: Option<i64> = server.client().get(format!("gw_hour_tls_{}", now / 3600 * 3600)).ok();
    assert_eq!(counted, Some(1));
}
