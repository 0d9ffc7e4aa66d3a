//! The HTTP layer (feature `axum`) between a real HTTP client (hyper) and a real axum server on
//! loopback, deciding on real redis-servers: the module and the Functions twin alone. Each field
//! equals what the reply implies at that instant; a refusal is a problem document naming the
//! binding limit; 32 concurrent clients never get more than the limit; a forged
//! `X-Forwarded-For` entry does not change the key; a cancelled streaming response releases its
//! lease; with the server paused, responses come within the deadline with the failure policy's
//! status.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use harness::twin::{self, Form};
use harness::{Cluster, Options, Resume, Server, signal};
use http::{HeaderMap, HeaderName, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use redis_throttle_client::http::{ConfigError, Key, Limit, RateLimit, RateLimitReport};
use redis_throttle_client::{BreakerConfig, Config, FailurePolicy, Policy, Throttle};
use tokio::net::TcpStream;

fn policy(spec: &str) -> Policy {
    Policy::parse(spec).unwrap()
}

/// Serves the router (with the peer's address) on a free loopback port.
async fn serve(
    make_service: axum::extract::connect_info::IntoMakeServiceWithConnectInfo<Router, SocketAddr>,
) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, make_service).await.unwrap() });
    addr
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", |v| v.to_str().unwrap())
    }
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A request on a connection of its own; the whole response.
async fn send(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let response = start(addr, path, headers).await.0;
    let (parts, body) = response.into_parts();
    Reply { status: parts.status, headers: parts.headers, body: body.collect().await.unwrap().to_bytes() }
}

/// A request whose response head has arrived; the connection lives as long as the task.
async fn start(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (Response<hyper::body::Incoming>, tokio::task::JoinHandle<()>) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut request = Request::get(path).header("host", "localhost");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    (sender.send_request(request.body(Empty::<Bytes>::new()).unwrap()).await.unwrap(), task)
}

fn twin_server() -> Server {
    let server = Server::with(Options::default().without_module());
    twin::load(&mut server.client(), Form::Library, &twin::shipped(Form::Library));
    server
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

/// Puts the layer's report (shadow limits included) into a header the test can read.
async fn surface(response: axum::response::Response) -> axum::response::Response {
    let mut response = response;
    let shadow: Vec<String> = response
        .extensions()
        .get::<RateLimitReport>()
        .map(|r| {
            r.outcomes
                .iter()
                .filter(|o| o.shadow)
                .map(|o| format!("{}={}", o.policy, if o.allowed { "allowed" } else { "denied" }))
                .collect()
        })
        .unwrap_or_default();
    response.headers_mut().insert("x-test-shadow", shadow.join(",").parse().unwrap());
    response
}

async fn fields_and_refusals(server: &Server) {
    let throttle =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    let per_ip = Limit::rate("per-ip", policy("1/h burst 5")).key(Key::forwarded_for(1));
    let tenant = HeaderName::from_static("x-tenant");
    let limits = RateLimit::new(throttle.clone())
        .route(
            "/a",
            [per_ip.clone(), Limit::rate("shadow-ip", policy("1/h burst 1")).key(Key::forwarded_for(1)).shadow()],
        )
        .route("/b", [per_ip.clone(), Limit::rate("per-tenant", policy("1/h burst 2")).key(Key::header(tenant))])
        .route("/c", [Limit::rate("per-route", policy("1/h burst 7")).key(Key::route())])
        .route("/peer", [Limit::rate("peer", policy("10/s"))]);
    // A peer-IP key (the default) fails when the layer is built, not on each request.
    assert_eq!(
        RateLimit::new(throttle.clone()).limit(Limit::rate("x", policy("1/s"))).layer().err(),
        Some(ConfigError::NeedsConnectInfo)
    );
    let layer = limits.with_connect_info().layer().unwrap();
    let ok = || async { "ok" };
    let app = Router::new()
        .route("/a", get(ok))
        .route("/b", get(ok))
        .route("/c", get(ok))
        .route("/peer", get(ok))
        .layer(layer)
        .layer(axum::middleware::map_response(surface));
    let addr = serve(app.into_make_service_with_connect_info::<SocketAddr>()).await;

    // Five admitted, each with the numbers of the reply; the client's forged entries (left of
    // the rightmost) do not change the key.
    let forged = ["9.9.9.9", "6.6.6.6, 9.9.9.9", "9.9.9.9", "1.1.1.1,9.9.9.9", "7.7.7.7, 8.8.8.8, 9.9.9.9"];
    for (i, xff) in (1..=5u64).zip(forged) {
        let r = send(addr, "/a", &[("x-forwarded-for", xff)]).await;
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.header("ratelimit-policy"), r#""per-ip";q=5;w=18000"#);
        // GCRA at 1/h: after i units the limiter is full again in i hours, less the
        // milliseconds since the first (under a second: rounded up, exactly i hours).
        assert_eq!(r.header("ratelimit"), format!(r#""per-ip";r={};t={}"#, 5 - i, i * 3600), "request {i}");
        assert_eq!((r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining")), ("5", &*(5 - i).to_string()));
        let reset: u64 = r.header("x-ratelimit-reset").parse().unwrap();
        assert!(reset.abs_diff(now_secs() + i * 3600) <= 1, "X-RateLimit-Reset {reset} is now + {i} h");
        assert!(r.header("retry-after").is_empty());
        // The shadow limit (burst 1) denies from the second request on, and is not enforced.
        assert_eq!(r.header("x-test-shadow"), if i == 1 { "shadow-ip=allowed" } else { "shadow-ip=denied" });
    }
    let r = send(addr, "/a", &[("x-forwarded-for", "5.5.5.5, 9.9.9.9")]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("content-type"), "application/problem+json");
    let problem = r.json();
    assert_eq!(problem["type"], "https://iana.org/assignments/http-problem-types#quota-exceeded");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["violated-policies"], serde_json::json!(["per-ip"]));
    assert_eq!(r.header("retry-after"), "3600", "one emission interval, rounded up");
    assert_eq!(r.header("ratelimit"), r#""per-ip";r=0;t=18000"#);
    // The rightmost entry is the key: another client is counted apart.
    let r = send(addr, "/a", &[("x-forwarded-for", "9.9.9.9, 4.4.4.4")]).await;
    assert_eq!((r.status, r.header("ratelimit")), (StatusCode::OK, r#""per-ip";r=4;t=3600"#));
    // No X-Forwarded-For: the shared key of keyless requests.
    assert_eq!(send(addr, "/a", &[]).await.status, 200);
    assert_eq!(redis::cmd("EXISTS").arg("rl:per-ip").query::<i64>(&mut server.client()).unwrap(), 1);

    // Two limits through CL.ALL: the binding one is named, and a refusal consumes neither.
    let (ip, t) = (("x-forwarded-for", "3.3.3.3"), ("x-tenant", "acme"));
    for i in 1..=2u64 {
        let r = send(addr, "/b", &[ip, t]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("ratelimit-policy"), r#""per-ip";q=5;w=18000, "per-tenant";q=2;w=7200"#);
        assert_eq!(
            r.header("ratelimit"),
            format!(r#""per-ip";r={};t={}, "per-tenant";r={};t={}"#, 5 - i, i * 3600, 2 - i, i * 3600)
        );
        assert_eq!(r.header("x-ratelimit-limit"), "2", "the binding limit: the fewest remaining");
    }
    let r = send(addr, "/b", &[ip, t]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["violated-policies"], serde_json::json!(["per-tenant"]));
    assert_eq!(r.header("retry-after"), "3600");
    let r = send(addr, "/a", &[ip]).await;
    assert_eq!(r.header("ratelimit"), r#""per-ip";r=2;t=10800"#, "the refused CL.ALL consumed nothing");

    // The peer IP through ConnectInfo.
    assert_eq!(send(addr, "/peer", &[]).await.status, 200);
    assert_eq!(redis::cmd("EXISTS").arg("rl:peer:127.0.0.1").query::<i64>(&mut server.client()).unwrap(), 1);

    // 32 concurrent clients: exactly the limit admitted.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        tasks.spawn(async move { send(addr, "/c", &[]).await.status });
    }
    let mut admitted = 0;
    while let Some(status) = tasks.join_next().await {
        let status = status.unwrap();
        assert!(status == 200 || status == 429, "{status}");
        admitted += usize::from(status == 200);
    }
    assert_eq!(admitted, 7, "a burst of 7 admits 7 of 32 concurrent requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_equal_the_reply_and_refusals_name_the_binding_limit() {
    let module = Server::start();
    fields_and_refusals(&module).await;
    let twin = twin_server();
    fields_and_refusals(&twin).await;
    // Leases are the module's: a concurrency limit on the twin is refused at build.
    let throttle = Throttle::connect(&twin.url()).await.unwrap();
    let limits =
        RateLimit::new(throttle.clone()).limit(Limit::concurrent("jobs", 2, Duration::from_secs(5)).key(Key::route()));
    assert!(matches!(limits.layer().err(), Some(ConfigError::LeasesNeedTheModule(_))));
    // So is a quota in a named time zone (the twin has no zone database): not a 500 per request.
    let limits = RateLimit::new(throttle)
        .limit(Limit::rate("daily", policy("1000/day quota tz Europe/Berlin")).key(Key::route()));
    assert_eq!(limits.layer().err(), Some(ConfigError::ZoneNeedsTheModule("daily".into())));
}

/// A router answering `ok` on each path, served with the layer and the peer's address.
async fn serve_paths(limits: RateLimit, paths: &[&str]) -> SocketAddr {
    let mut app = Router::new();
    for path in paths {
        app = app.route(path, get(|| async { "ok" }));
    }
    serve(limits.into_make_service(app).unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_ascii_never_move_a_request_to_the_shared_key() {
    let server = Server::start();
    let throttle =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    let api_key = HeaderName::from_static("x-api-key");
    let limits = RateLimit::new(throttle)
        .route("/ip", [Limit::rate("per-ip", policy("1/h burst 2")).key(Key::forwarded_for(1))])
        .route("/key", [Limit::rate("per-key", policy("1/h burst 1")).key(Key::header(api_key))]);
    let addr = serve_paths(limits, &["/ip", "/key"]).await;

    // 9.9.9.9 spends its burst; the same address behind a client-written entry that is not
    // ASCII (obs-text, valid HTTP) is still 9.9.9.9, not a keyless request.
    for _ in 0..2 {
        assert_eq!(send(addr, "/ip", &[("x-forwarded-for", "9.9.9.9")]).await.status, 200);
    }
    for xff in ["9.9.9.9", "évil, 9.9.9.9", "1.1.1.1, ÿ, 9.9.9.9", "é,,\"", "9.9.9.9"] {
        let r = send(addr, "/ip", &[("x-forwarded-for", xff)]).await;
        if xff == "é,,\"" {
            // An entry that is no address, written by the trusted proxy: keyless.
            assert_eq!(r.status, 200, "{xff}");
            continue;
        }
        assert_eq!(r.status, 429, "{xff:?} is 9.9.9.9 over its limit");
        assert_eq!(r.json()["violated-policies"], serde_json::json!(["per-ip"]));
    }
    // The client-written part is read on no line: X-Forwarded-For over two lines.
    let r = send(addr, "/ip", &[("x-forwarded-for", "ünïcode"), ("x-forwarded-for", "9.9.9.9")]).await;
    assert_eq!(r.status, 429);

    // An API key that is not ASCII is a key of its own.
    assert_eq!(send(addr, "/key", &[("x-api-key", "clé-1")]).await.status, 200);
    assert_eq!(send(addr, "/key", &[("x-api-key", "clé-1")]).await.status, 429, "clé-1 spent its unit");
    assert_eq!(send(addr, "/key", &[("x-api-key", "clé-2")]).await.status, 200, "clé-2 is not clé-1, nor keyless");
    let stored: Vec<Vec<u8>> = redis::cmd("KEYS").arg("rl:per-key:*").query(&mut server.client()).unwrap();
    let mut stored: Vec<String> = stored.into_iter().map(|k| String::from_utf8(k).unwrap()).collect();
    stored.sort();
    assert_eq!(stored, ["rl:per-key:clé-1", "rl:per-key:clé-2"]);
    // No key and an empty key are one shared key: a client cannot switch between two.
    assert_eq!(send(addr, "/key", &[]).await.status, 200);
    assert_eq!(send(addr, "/key", &[("x-api-key", "")]).await.status, 429, "an empty key is no key");
    assert_eq!(send(addr, "/key", &[("x-api-key", " ")]).await.status, 429, "a blank key is no key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_listed_twice_is_one_limit_and_routes_add_up() {
    let server = Server::start();
    let throttle =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    let per_ip = Limit::rate("per-ip", policy("1/h burst 5")).key(Key::forwarded_for(1));
    let per_route = Limit::rate("per-route", policy("1/h burst 3")).key(Key::route());
    let limits = RateLimit::new(throttle.clone())
        .limit(per_ip.clone())
        .limit(per_ip.clone())
        .route("/twice", [per_ip.clone()])
        .route("/merged", [per_ip.clone()])
        .route("/merged", [per_route.clone()]);
    let addr = serve_paths(limits, &["/twice", "/merged"]).await;
    let ip = ("x-forwarded-for", "4.4.4.4");
    for i in 1..=2u64 {
        let r = send(addr, "/twice", &[ip]).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.header("ratelimit"), format!(r#""per-ip";r={};t={}"#, 5 - i, i * 3600), "one unit per request");
    }
    // Both `route` calls for /merged apply (and per-ip once).
    let r = send(addr, "/merged", &[ip]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.header("ratelimit"), r#""per-ip";r=2;t=10800, "per-route";r=2;t=3600"#);

    // What CL.ALL or CL.ACQUIRE would refuse on every request does not build.
    let many: Vec<Limit> = (0..17).map(|i| Limit::rate(format!("l{i}"), policy("1/s")).key(Key::route())).collect();
    assert_eq!(
        RateLimit::new(throttle.clone()).route("/many", many).layer().err(),
        Some(ConfigError::TooManyLimits("/many".into()))
    );
    for (most, lease) in [
        (0, Duration::from_secs(1)),
        (10_001, Duration::from_secs(1)),
        (1, Duration::ZERO),
        (1, Duration::from_micros(999)),
    ] {
        let limits = RateLimit::new(throttle.clone()).limit(Limit::concurrent("jobs", most, lease).key(Key::route()));
        assert_eq!(limits.layer().err(), Some(ConfigError::Concurrency("jobs".into())), "{most} {lease:?}");
    }
}

/// Reads a key's value on a cluster (`None`: no such key).
fn cluster_get(cluster: &Cluster, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(&mut cluster.client()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_route_with_several_rate_limits_is_decided_per_slot() {
    let cluster = Cluster::start(3, 0);
    let conn = redis::cluster::ClusterClient::new(cluster.urls()).unwrap().get_async_connection().await.unwrap();
    let throttle =
        Throttle::from_cluster(conn, Config { deadline: Duration::from_secs(2), ..Config::default() }).await.unwrap();
    let tenant = Key::header(HeaderName::from_static("x-tenant"));
    // The guide's example: per-IP limits on every route, a per-tenant one on /search.
    let limits = RateLimit::new(throttle)
        .limit(Limit::rate("per-ip", policy("3/h counter")).key(Key::forwarded_for(1)))
        .limit(Limit::rate("per-ip-burst", policy("1/h burst 10")).key(Key::forwarded_for(1)))
        .route("/search", [Limit::rate("per-tenant", policy("5/h counter")).key(tenant)]);
    let addr = serve_paths(limits, &["/search", "/other"]).await;
    let all_calls = |cluster: &Cluster| cluster.nodes.iter().map(|n| n.command_calls("cl.all")).sum::<u64>();

    // Two limits of one IP share a hash tag: one CL.ALL, all or nothing.
    let r = send(addr, "/other", &[("x-forwarded-for", "1.0.0.1")]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.header("ratelimit"), r#""per-ip";r=2;t=3600, "per-ip-burst";r=9;t=3600"#);
    assert_eq!(all_calls(&cluster), 1);
    assert!(cluster_get(&cluster, "rl:per-ip:{1.0.0.1}").is_some(), "the key is tagged by its IP");
    // The per-IP limit's numbers, as a request on /other (one more unit) reports them.
    let per_ip_after = |ip: String| async move {
        let r = send(addr, "/other", &[("x-forwarded-for", &ip)]).await;
        assert_eq!(r.status, 200, "{ip}");
        r.header("ratelimit").split(';').nth(1).unwrap_or_default().to_string()
    };

    // 32 clients of one tenant from 32 addresses at once: exactly the tenant's 5 admitted, and
    // the refused ones' per-IP units given back.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32 {
        tasks.spawn(async move {
            let ip = format!("10.0.0.{i}");
            let r = send(addr, "/search", &[("x-forwarded-for", &ip), ("x-tenant", "acme")]).await;
            (ip, r)
        });
    }
    let mut admitted = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let (ip, r) = done.unwrap();
        match r.status.as_u16() {
            200 => admitted.push(ip),
            429 => assert_eq!(r.json()["violated-policies"], serde_json::json!(["per-tenant"]), "{ip}"),
            other => panic!("{ip}: {other} {:?}", r.body),
        }
    }
    assert_eq!(admitted.len(), 5, "the tenant's limit");
    for i in 0..32 {
        let ip = format!("10.0.0.{i}");
        let expected = if admitted.contains(&ip) { "r=1" } else { "r=2" };
        assert_eq!(per_ip_after(ip.clone()).await, expected, "{ip}: a refused request's per-IP unit is given back");
    }

    // An IP over its limit is refused by its own slot first: the tenant's is not touched.
    for _ in 0..2 {
        assert_eq!(send(addr, "/other", &[("x-forwarded-for", "1.0.0.1")]).await.status, 200);
    }
    let r = send(addr, "/search", &[("x-forwarded-for", "1.0.0.1"), ("x-tenant", "globex")]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["violated-policies"], serde_json::json!(["per-ip"]));
    assert_eq!(cluster_get(&cluster, "rl:per-tenant:{globex}"), None, "the tenant's slot was never asked");

    // The server refuses a call (a key of another type): 500, and the body says nothing of the
    // keys or of the server's error; the units taken before it are given back.
    let _: () =
        redis::cmd("HSET").arg("rl:per-tenant:{initech}").arg("f").arg("v").query(&mut cluster.client()).unwrap();
    let r = send(addr, "/search", &[("x-forwarded-for", "1.0.0.2"), ("x-tenant", "initech")]).await;
    assert_eq!(r.status, 500);
    let body = String::from_utf8_lossy(&r.body);
    for secret in ["initech", "1.0.0.2", "rl:", "WRONGTYPE", "slot"] {
        assert!(!body.contains(secret), "{secret:?} in {body}");
    }
    assert_eq!(per_ip_after("1.0.0.2".into()).await, "r=2", "given back");

    // A request dropped between two slots (its client goes away while the tenant's node is
    // paused) gives back the units of the slots before.
    let owner = |key: &str| {
        cluster
            .nodes
            .iter()
            .position(|n| redis::cmd("GET").arg(key).query::<Option<String>>(&mut n.client()).is_ok())
            .unwrap()
    };
    let tenant_node = owner("rl:per-tenant:{umbrella}");
    let ip =
        (1..).map(|n| format!("1.0.1.{n}")).find(|ip| owner(&format!("rl:per-ip:{{{ip}}}")) != tenant_node).unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("WRITE")
        .query(&mut cluster.nodes[tenant_node].client())
        .unwrap();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let request = Request::get("/search")
        .header("host", "localhost")
        .header("x-forwarded-for", &ip)
        .header("x-tenant", "umbrella")
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sender.send_request(request)).await.is_err(),
        "the tenant's node is paused"
    );
    drop(sender);
    conn.abort();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(per_ip_after(ip).await, "r=2", "the cancelled request's per-IP unit is given back");
}

/// A body that sends a line every 20 ms, forever.
struct Ticks(Pin<Box<tokio::time::Sleep>>);

impl http_body::Body for Ticks {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::task::ready!(self.0.as_mut().poll(cx));
        self.0.as_mut().reset(tokio::time::Instant::now() + Duration::from_millis(20));
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"tick\n")))))
    }
}

fn holders(server: &Server, key: &str) -> i64 {
    let now = harness::server_ms(&mut server.client());
    redis::cmd("ZCOUNT").arg(key).arg(format!("({now}")).arg("+inf").query(&mut server.client()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_last_as_long_as_the_response_body() {
    let server = Server::start();
    let throttle =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let work = {
        let (in_flight, most) = (in_flight.clone(), most.clone());
        move || {
            let (in_flight, most) = (in_flight.clone(), most.clone());
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                "done"
            }
        }
    };
    let stream = || async { axum::body::Body::new(Ticks(Box::pin(tokio::time::sleep(Duration::ZERO)))) };
    let limits = RateLimit::new(throttle)
        .route("/stream", [Limit::concurrent("streams", 1, Duration::from_secs(2)).key(Key::route())])
        .route("/work", [Limit::concurrent("workers", 3, Duration::from_secs(2)).key(Key::route())])
        .route(
            "/both",
            [
                Limit::rate("hourly", policy("10/h counter")).key(Key::route()),
                Limit::concurrent("one", 1, Duration::from_secs(2)).key(Key::route()),
            ],
        );
    let app = Router::new().route("/stream", get(stream)).route("/work", get(work)).route("/both", get(stream));
    let addr = serve(limits.into_make_service(app).unwrap()).await;

    // A request the concurrency limit refuses was not served: its rate unit is given back.
    let (response, _held) = start(addr, "/both", &[]).await;
    assert_eq!(response.status(), 200);
    let counted =
        |server: &Server| -> String { redis::cmd("GET").arg("rl:hourly:/both").query(&mut server.client()).unwrap() };
    assert_eq!(counted(&server), "1");
    for _ in 0..3 {
        let r = send(addr, "/both", &[]).await;
        assert_eq!(r.status, 429);
        assert_eq!(r.json()["violated-policies"], serde_json::json!(["one"]));
    }
    assert_eq!(counted(&server), "1", "refused requests took no rate units");
    drop(response);

    // A streamed response holds its lease while it streams.
    let (response, connection) = start(addr, "/stream", &[]).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["ratelimit-policy"], r#""streams";q=1;qu="concurrent-requests""#);
    assert_eq!(response.headers()["ratelimit"], r#""streams";r=0"#);
    let mut body = response.into_body();
    for _ in 0..3 {
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "tick\n");
    }
    assert_eq!(holders(&server, "rl:streams:/stream"), 1);
    let r = send(addr, "/stream", &[]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["violated-policies"], serde_json::json!(["streams"]));
    assert!(r.header("retry-after").parse::<u64>().unwrap() >= 1);
    // The client goes away mid-stream: the body is dropped, the lease released.
    drop(body);
    connection.abort();
    harness::wait_until("the cancelled stream's lease to be released", Duration::from_secs(3), || {
        holders(&server, "rl:streams:/stream") == 0
    });
    let (response, _connection) = start(addr, "/stream", &[]).await;
    assert_eq!(response.status(), 200, "the slot is free again");
    drop(response);

    // 32 concurrent clients never have more than 3 requests in flight; a finished body releases.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        tasks.spawn(async move { send(addr, "/work", &[]).await.status });
    }
    let mut admitted = 0;
    while let Some(status) = tasks.join_next().await {
        admitted += usize::from(status.unwrap() == 200);
    }
    assert!(most.load(Ordering::SeqCst) <= 3, "{} in flight at once", most.load(Ordering::SeqCst));
    assert!(admitted >= 3, "{admitted} admitted");
    harness::wait_until("every finished response's lease to be released", Duration::from_secs(3), || {
        holders(&server, "rl:workers:/work") == 0
    });
}

const DEADLINE: Duration = Duration::from_millis(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_gets_the_failure_policys_answer_within_the_deadline() {
    let server = Server::start();
    let config = |failure| Config {
        deadline: DEADLINE,
        failure,
        breaker: BreakerConfig { failures: 3, probe_interval: Duration::from_millis(1500) },
        ..Config::default()
    };
    let app = || Router::new().route("/", get(|| async { "ok" })).route("/lease", get(|| async { "ok" }));
    let limits = |t: Throttle| {
        RateLimit::new(t)
            .route("/", [Limit::rate("per-ip", policy("100/s")).key(Key::forwarded_for(1))])
            .route("/lease", [Limit::concurrent("jobs", 5, Duration::from_secs(5)).key(Key::route())])
    };
    let closed = serve(
        limits(Throttle::connect_with(&server.url(), config(FailurePolicy::FailClosed)).await.unwrap())
            .into_make_service(app())
            .unwrap(),
    )
    .await;
    let open = serve(
        limits(Throttle::connect_with(&server.url(), config(FailurePolicy::FailOpen)).await.unwrap())
            .into_make_service(app())
            .unwrap(),
    )
    .await;
    let ip = [("x-forwarded-for", "2.2.2.2")];
    assert_eq!(send(closed, "/", &ip).await.status, 200);
    assert_eq!(send(open, "/", &ip).await.status, 200);

    let pid = server.pid();
    signal(pid, libc::SIGSTOP);
    let _resume = Resume(pid);
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        let start = Instant::now();
        let r = send(closed, if i % 2 == 0 { "/" } else { "/lease" }, &ip).await;
        slowest = slowest.max(start.elapsed());
        assert_eq!(r.status, 503, "fail closed: {:?}", r.body);
        assert_eq!(r.header("content-type"), "application/problem+json");
        assert_eq!(r.json()["type"], "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
        assert_eq!(r.header("retry-after"), "2", "the breaker's probe interval, rounded up");
        assert!(r.header("ratelimit").is_empty(), "no numbers the server did not give");

        let start = Instant::now();
        let r = send(open, "/", &ip).await;
        slowest = slowest.max(start.elapsed());
        assert_eq!(r.status, 200, "fail open");
        assert!(["timeout", "breaker-open"].contains(&r.header("x-ratelimit-degraded")), "{:?}", r.headers);
        assert!(r.header("ratelimit").is_empty());
    }
    eprintln!("slowest response with the server paused: {slowest:?}");
    // The deadline, plus a connection and a request on loopback (a few ms on a busy 2-core machine).
    assert!(slowest <= DEADLINE + Duration::from_millis(40), "slowest {slowest:?}");
}

/// A streamed response whose lease may have been lost (its renewals not sent: the breaker is
/// open) is cut when the lease's confirmed expiry passes, and another request gets the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_whose_lease_may_be_lost_is_cut() {
    let server = Server::start();
    // A deadline a busy 2-core machine meets on every renewal while the server runs (renewals
    // every lease / 3 = 100 ms), and a pause longer than a renewal interval plus that deadline.
    let deadline = Duration::from_millis(100);
    let pause = Duration::from_millis(250);
    let config = Config {
        deadline,
        breaker: BreakerConfig { failures: 1, probe_interval: Duration::from_secs(10) },
        // A renewal unanswered within its deadline is the server's failure at once.
        server_timeout: deadline,
        ..Config::default()
    };
    let throttle = Throttle::connect_with(&server.url(), config).await.unwrap();
    let lease = Duration::from_millis(300);
    let stream = || async { axum::body::Body::new(Ticks(Box::pin(tokio::time::sleep(Duration::ZERO)))) };
    let limits = RateLimit::new(throttle).route("/stream", [Limit::concurrent("streams", 1, lease).key(Key::route())]);
    let addr = serve(limits.into_make_service(Router::new().route("/stream", get(stream))).unwrap()).await;
    let other = Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
        .await
        .unwrap();

    let (response, _connection) = start(addr, "/stream", &[]).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    // Streams past its lease while renewed.
    let start_at = Instant::now();
    while start_at.elapsed() < lease * 2 {
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "tick\n");
    }
    let pid = server.pid();
    signal(pid, libc::SIGSTOP);
    let resume = Resume(pid);
    tokio::time::sleep(pause).await; // a renewal times out: the breaker opens
    drop(resume);
    let paused_at = Instant::now();
    let cut = loop {
        match body.frame().await {
            Some(Ok(_)) => {
                assert!(paused_at.elapsed() < Duration::from_secs(3), "the response streams on after its lease ran out")
            }
            Some(Err(_)) | None => break paused_at.elapsed(),
        }
    };
    eprintln!("cut {cut:?} after SIGCONT ({pause:?} after SIGSTOP; lease {lease:?})");
    assert!(cut <= lease + Duration::from_millis(100), "{cut:?}");
    // The slot is another's to take once the lease has run out.
    harness::wait_until("the unrenewed lease to run out", Duration::from_secs(2), || {
        holders(&server, "rl:streams:/stream") == 0
    });
    assert!(other.acquire("rl:streams:/stream", 1, lease).await.unwrap().is_ok());
}

/// An HTTP client that goes away while its request is the breaker's probe (the service future
/// is dropped mid-call): once the server is back, requests are decided by it again, not 503 for
/// ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_while_its_request_probes_leaves_the_layer_working() {
    let server = Server::start();
    let probe = Duration::from_millis(100);
    let config = Config {
        deadline: Duration::from_secs(1),
        breaker: BreakerConfig { failures: 1, probe_interval: probe },
        ..Config::default()
    };
    let throttle = Throttle::connect_with(&server.url(), config).await.unwrap();
    let limits = RateLimit::new(throttle).route("/", [Limit::rate("per-route", policy("1000/s")).key(Key::route())]);
    let addr = serve(limits.into_make_service(Router::new().route("/", get(|| async { "ok" }))).unwrap()).await;
    assert_eq!(send(addr, "/", &[]).await.status, 200);

    let pid = server.pid();
    signal(pid, libc::SIGSTOP);
    let resume = Resume(pid);
    assert_eq!(send(addr, "/", &[]).await.status, 503, "no answer within the deadline: the breaker opens");
    tokio::time::sleep(probe + Duration::from_millis(20)).await;
    // This request is the probe; its client gives up after 200 ms and closes the connection.
    let gave_up = tokio::time::timeout(Duration::from_millis(200), send(addr, "/", &[])).await;
    assert!(gave_up.is_err(), "the probe waits for the paused server");
    drop(resume);
    let start = Instant::now();
    loop {
        let r = send(addr, "/", &[]).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503);
        assert!(start.elapsed() < Duration::from_secs(3), "503 for ever after the probe's client went away");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("200 again {:?} after SIGCONT", start.elapsed());
}
