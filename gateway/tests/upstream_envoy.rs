//! envoyproxy/ratelimit's integration scripts, replayed as Envoy sends them: a real Envoy with
//! upstream's example proxy configuration (tests/rls/proxy.yaml) in front of two services that
//! answer "Hello World from Service 1" and "… 2", and our service with upstream's example rate
//! limit configuration (domains `rl` and `mongo_cps`). Each script's requests and its verdicts:
//! simple-get, trigger-ratelimit, trigger-shadow-mode-key, replaces, quota, token-quota,
//! multiservice-tokenquota, value-included-in-stats-key-when-unspecified (upstream waits a minute
//! between the quota scripts for fresh windows; here the keys are flushed instead, and the
//! scripts' "a minute later" checks run once, together, in the next minute).
//!
//! The same Envoy proves the burst: 2,000 concurrent requests against 100 a minute reach the
//! upstream exactly 100 times, on one Redis and on a 3-primary cluster, in both counting modes.

#[path = "../../tests/harness/mod.rs"]
mod harness;
mod rls;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use harness::{Cluster, Server};
use rls::EnvoyProcess;
use rls::envoy::fetch;
use rls::{Rls, host_port, runtime};

/// Upstream's examples/ratelimit/config (both files), as our data.
const EXAMPLE: &str = r#"
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces: [{name: bkthomps}, {name: fake_name}]
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - {key: destination_cluster, value: bkthomps, rate_limit: {replaces: [{name: bkthomps}], unit: minute, requests_per_unit: 2}}
      - {key: destination_cluster, value: mock, rate_limit: {unit: minute, requests_per_unit: 1}}
      - {key: destination_cluster, value: override, rate_limit: {replaces: [{name: banned_limit}], unit: minute, requests_per_unit: 2}}
      - {key: destination_cluster, value: fake, rate_limit: {name: fake_name, unit: minute, requests_per_unit: 2}}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - {key: bar, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: bar, value: bkthomps, rate_limit: {name: bkthomps, unit: minute, requests_per_unit: 1}}
      - {key: bar, value: banned, rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}}
      - {key: baz, rate_limit: {unit: second, requests_per_unit: 1}}
      - {key: baz, value: not-so-shady, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: baz, value: shady, rate_limit: {unit: minute, requests_per_unit: 3}, shadow_mode: true}
      - {key: bay, rate_limit: {unlimited: true}}
  - {key: unspec, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: qux, rate_limit: {unlimited: true}}
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {service_with_quota: {name: "service_1"}}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {service_with_quota: {name: "service_2"}}
"#;
const MONGO: &str = "domain: mongo_cps\ndescriptors:\n  - {key: database, value: users, rate_limit: {unit: second, requests_per_unit: 500}}\n  - {key: database, value: default, rate_limit: {unit: second, requests_per_unit: 500}}\n";
const BURST: &str =
    "domain: burst\ndescriptors:\n  - { key: user, rate_limit: { unit: minute, requests_per_unit: 100 } }\n";

/// upstream's envoy-mock: a service answering its greeting to anything.
async fn service(greeting: &'static str) -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            greeting
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, hits)
}

fn port_of(rls: &Rls) -> &str {
    rls.grpc.rsplit_once(':').unwrap().1
}

/// The proxy configuration with its ports, and a burst filter, cluster and route per service.
fn proxy(listener: u16, rls: &Rls, s1: u16, s2: u16, bursts: &[&Rls]) -> String {
    let (mut filters, mut clusters, mut routes) = (String::new(), String::new(), String::new());
    for (i, b) in bursts.iter().enumerate() {
        let stage = i + 1;
        filters.push_str(&format!(
            "                  - name: burst-{stage}\n                    typed_config:\n                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit\n                      domain: burst\n                      stage: {stage}\n                      failure_mode_deny: false\n                      timeout: 30s\n                      rate_limit_service:\n                        grpc_service: {{envoy_grpc: {{cluster_name: burst{stage}}}}}\n                        transport_api_version: V3\n"
        ));
        clusters.push_str(&format!(
            "    - name: burst{stage}\n      type: STATIC\n      connect_timeout: 1s\n      http2_protocol_options: {{}}\n      circuit_breakers: {{thresholds: [{{max_connections: 100000, max_pending_requests: 100000, max_requests: 100000}}]}}\n      load_assignment: {{cluster_name: burst{stage}, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}}}]}}]}}\n",
            port_of(b)
        ));
        routes.push_str(&format!(
            "                        - match: {{prefix: /burst{stage}}}\n                          route:\n                            cluster: mock\n                            rate_limits:\n                              - stage: {stage}\n                                actions: [{{request_headers: {{header_name: x-user, descriptor_key: user}}}}]\n"
        ));
    }
    include_str!("rls/proxy.yaml")
        .replace("{{LISTENER}}", &listener.to_string())
        .replace("{{RLS}}", port_of(rls))
        .replace("{{SERVICE_1}}", &s1.to_string())
        .replace("{{SERVICE_2}}", &s2.to_string())
        .replace("{{BURST_FILTERS}}\n", &filters)
        .replace("{{BURST_CLUSTERS}}\n", &clusters)
        .replace("{{BURST_ROUTES}}\n", &routes)
}

/// A request of a script: its path and headers, the status and body it got.
async fn curl(envoy: &EnvoyProcess, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let (status, _, body) = fetch(envoy.port, path, headers).await;
    (status, body)
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Waits, if needed, so that the next `seconds` stay inside one minute.
async fn inside_one_minute(seconds: u64) {
    let into = now_s() % 60;
    if into + seconds >= 60 {
        tokio::time::sleep(Duration::from_millis((60 - into) * 1000 + 200)).await;
    }
}

/// The scripts, in upstream's order (each asserting what the script asserts). `flush` empties
/// Redis: upstream's minute of waiting between scripts that share the quota descriptors.
async fn scripts(envoy: &EnvoyProcess, rls: &Rls, mut flush: impl FnMut()) {
    let hello = |body: &str, n: u32| body.contains(&format!("Hello World from Service {n}"));

    // multiservice-tokenquota: checks of both quotas on the request (hits_addend 0), the answer's
    // metadata routes to the service with quota left, the chosen one charged at stream end.
    flush();
    let mut served = Vec::new();
    for n in 1..=6 {
        let (status, body) = curl(envoy, "/multiservice-tokenquota", &[("request-no", &n.to_string())]).await;
        served.push(if hello(&body, 1) {
            "1"
        } else if hello(&body, 2) {
            "2"
        } else {
            assert_eq!(status, 429, "request {n}: {body}");
            "429"
        });
    }
    assert_eq!(served, ["1", "1", "2", "2", "2", "429"], "service_1 twice, service_2 three times, then 429");

    // quota: two quota descriptors, over only when both are.
    flush();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(curl(envoy, "/quota", &[]).await.0);
    }
    assert_eq!(statuses, [200, 200, 429]);

    // replaces: a limit another matched limit replaces is not checked.
    flush();
    let two = |f: &'static str, b: &'static str| vec![("foo", f), ("bar", b)];
    let four = |f: &'static str, b: &'static str, dest: &'static str| {
        vec![("foo", f), ("bar", b), ("source_cluster", "proxy"), ("destination_cluster", dest)]
    };
    let five = |f: &'static str, b: &'static str| {
        vec![
            ("foo", f),
            ("bar", b),
            ("source_cluster", "proxy"),
            ("destination_cluster", "fake"),
            ("category", "account"),
        ]
    };
    // (path, headers, admitted)
    type Step = (&'static str, Vec<(&'static str, &'static str)>, bool);
    let steps: Vec<Step> = vec![
        ("/twoheader", two("bkthomps", "banned"), false),
        ("/fourheader", four("bkthomps", "banned", "mock"), false),
        ("/fourheader", four("bkthomps", "banned", "override"), true),
        ("/fourheader", four("bkthomps", "banned", "override"), true),
        ("/fourheader", four("bkthomps", "banned", "override"), false),
        ("/fourheader", four("my_foo", "bkthomps", "bkthomps"), true),
        ("/fourheader", four("my_foo", "bkthomps", "bkthomps"), true),
        ("/fourheader", four("my_foo", "bkthomps", "bkthomps"), false),
        ("/fourheader", four("my_foo", "bkthomps", "not_bkthomps"), true),
        ("/fourheader", four("my_foo", "bkthomps", "not_bkthomps"), false),
        ("/fourheader", four("my_foo", "bkthomps", "bkthomps"), false),
        ("/fiveheader", five("my_foo", "bkthomps"), true),
        ("/fiveheader", five("my_foo", "bkthomps"), true),
        ("/fiveheader", five("my_foo", "bkthomps"), true),
        ("/fiveheader", five("my_foo", "bkthomps"), true),
        ("/fiveheader", five("my_foo", "bkthomps"), false),
        ("/twoheader", two("foo_2", "bkthomps"), true),
        ("/twoheader", two("foo_2", "bkthomps"), false),
        ("/fourheader", four("foo_3", "bar_3", "fake"), true),
        ("/fourheader", four("foo_3", "bar_3", "fake"), true),
        ("/fourheader", four("foo_3", "bar_3", "fake"), false),
        ("/fiveheader", five("my_foo", "bkthomps"), false),
    ];
    inside_one_minute(10).await;
    for (i, (path, headers, ok)) in steps.iter().enumerate() {
        let (status, _) = curl(envoy, path, headers).await;
        assert_eq!(status == 200, *ok, "replaces step {}: {path} {headers:?} answered {status}", i + 1);
    }

    // simple-get.
    assert_eq!(curl(envoy, "/twoheader", &[("foo", "test"), ("baz", "shady")]).await.0, 200);

    // token-quota: a check on the request (hits_addend 0), a charge of 1 at stream end: the
    // charge counts past the limit, so the quota runs out (2 a minute: three requests, then 429).
    flush();
    let mut statuses = Vec::new();
    for n in 1..=4 {
        statuses.push(curl(envoy, "/tokenquota", &[("request-no", &n.to_string())]).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);

    // trigger-ratelimit: 3 a minute for foo+baz, then 429 ("Too Many Requests").
    inside_one_minute(5).await;
    let headers = [("foo", "pelle"), ("baz", "not-so-shady")];
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(curl(envoy, "/twoheader", &headers).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);

    // trigger-shadow-mode-key: past its limit a shadow-mode key still admits.
    let headers = [("foo", "pelle"), ("baz", "shady")];
    for i in 0..6 {
        let (status, h, _) = fetch(envoy.port, "/twoheader", &headers).await;
        assert_eq!(status, 200, "shadow request {i}");
        assert!(h.contains_key("x-ratelimit-remaining"), "{h:?}");
    }

    // value-included-in-stats-key-when-unspecified: detailed_metric puts the value in the
    // stats key: one over the limit.
    inside_one_minute(5).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(curl(envoy, "/unspec", &[("unspec", "unspecified_value")]).await.0);
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(rls.stat("ratelimit.service.rate_limit.rl.unspec_unspecified_value.over_limit"), 1);
}

/// The scripts' "a minute later" checks: fresh windows admit again.
async fn a_minute_later(envoy: &EnvoyProcess) {
    let start = now_s() / 60;
    while now_s() / 60 == start {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, body) = curl(envoy, "/multiservice-tokenquota", &[("request-no", "7")]).await;
    assert!(body.contains("Hello World from Service 1"), "service_1 has quota again: {body}");
    assert_eq!(curl(envoy, "/quota", &[]).await.0, 200, "the quota refreshed");
    assert_eq!(curl(envoy, "/tokenquota", &[("request-no", "5")]).await.0, 200, "the token quota refreshed");
}

/// 2,000 concurrent requests for one user through Envoy: exactly 100 reach the upstream.
async fn burst(envoy: &EnvoyProcess, stage: usize, mock: &std::sync::atomic::AtomicU64) {
    inside_one_minute(12).await;
    let before = mock.load(std::sync::atomic::Ordering::Relaxed);
    // (Each stage its own user: the stages share one Redis and domain, and may start within
    // the same second.)
    let user = format!("{}-{stage}-{}", std::process::id(), now_s());
    let port = envoy.port;
    let tasks: Vec<_> = (0..2000)
        .map(|_| {
            let (path, user) = (format!("/burst{stage}"), user.clone());
            tokio::spawn(async move { fetch(port, &path, &[("x-user", &user)]).await.0 })
        })
        .collect();
    let started = std::time::Instant::now();
    let mut counts = std::collections::BTreeMap::new();
    for t in tasks {
        *counts.entry(t.await.unwrap()).or_insert(0) += 1;
    }
    let want: std::collections::BTreeMap<u16, i32> = [(200, 100), (429, 1900)].into_iter().collect();
    if counts != want {
        let log = envoy.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "stage {stage}: {counts:?} in {:?} (want {want:?}); Envoy's last lines:\n{}",
            started.elapsed(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    assert_eq!(mock.load(std::sync::atomic::Ordering::Relaxed) - before, 100, "stage {stage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_s_integration_scripts_and_the_burst_through_envoy() {
    rls::raise_file_limit();
    let server = Server::start();
    let cluster = Cluster::start(3, 0);
    let (s1, mock_hits) = service("Hello World from Service 1").await;
    let (s2, _) = service("Hello World from Service 2").await;
    let url = host_port(&server.url());
    let nodes = cluster.urls().iter().map(|u| host_port(u)).collect::<Vec<_>>().join(",");
    let dir = runtime(&[("config.yaml", MONGO), ("example.yaml", EXAMPLE), ("burst.yaml", BURST)]);
    // Upstream's integration settings (RESPONSE_DYNAMIC_METADATA for the multiservice route),
    // otherwise the defaults: no DECISION_DEADLINE.
    let main = Rls::start(&dir, &url, &[("DECISION_DEADLINE", ""), ("RESPONSE_DYNAMIC_METADATA", "true")]);
    let stop = [("DECISION_DEADLINE", ""), ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")];
    let single_stop = Rls::start(&dir, &url, &stop);
    let on_cluster = Rls::start(&dir, &nodes, &[("DECISION_DEADLINE", ""), ("REDIS_TYPE", "cluster")]);
    let cluster_stop = Rls::start(&dir, &nodes, &[stop[0], stop[1], ("REDIS_TYPE", "cluster")]);
    let port = harness::free_port(false);
    let envoy = EnvoyProcess::start(
        "upstream",
        port,
        &proxy(port, &main, s1, s2, &[&main, &single_stop, &on_cluster, &cluster_stop]),
    );

    let mut redis = server.client();
    scripts(&envoy, &main, || {
        let _: () = redis::cmd("FLUSHALL").query(&mut redis).unwrap();
    })
    .await;
    // The scripts' second part waits for the next minute; the bursts run right after it, so
    // that each stays inside one window.
    a_minute_later(&envoy).await;
    for stage in 1..=4 {
        burst(&envoy, stage, &mock_hits).await;
    }
    drop(envoy);
    let _ = std::fs::remove_dir_all(&dir);
}
