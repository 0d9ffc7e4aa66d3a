//! The HTTP layer's cost (run by `make bench` through bench/http.sh, in release, against a
//! server with the module at REDIS_URL):
//!
//! - one keep-alive connection, requests one after another: a minimal axum service without the
//!   layer, with it (one limit, every request admitted), and the client's own round trip
//!   (`Throttle::check`) measured between them: the layer's cost beyond its round trip is
//!   `with − without − round trip`;
//! - requests per second with CONNECTIONS concurrent connections: without the layer, with it,
//!   and with 90% of the requests denied from the local deny cache (one hot key already denied;
//!   the other 10% each a fresh key, decided by the server).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderName, Request};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use redis_throttle_client::http::{Headers, Key, Limit, RateLimit};
use redis_throttle_client::{Config, Policy, Throttle};

const SEQUENTIAL: u32 = 4_000;
const ROUNDS: u32 = 8;
const RUN: Duration = Duration::from_secs(3);
const CONNECTIONS: usize = 16;

async fn serve(make: axum::extract::connect_info::IntoMakeServiceWithConnectInfo<Router, SocketAddr>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, make).await.unwrap() });
    addr
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> Sender {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    sender
}

/// One request on `sender`; its status.
async fn get_once(sender: &mut Sender, key: &str) -> u16 {
    sender.ready().await.unwrap();
    let request = Request::get("/").header("host", "bench").header("x-key", key).body(Empty::new()).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    response.into_body().collect().await.unwrap();
    status
}

/// Requests per second over `RUN` with `CONNECTIONS` connections; `key(i)` names request i's key.
async fn throughput(addr: SocketAddr, key: fn(u64) -> String) -> (f64, f64) {
    let end = Instant::now() + RUN;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..CONNECTIONS as u64 {
        tasks.spawn(async move {
            let mut sender = connect(addr).await;
            let (mut n, mut denied) = (0u64, 0u64);
            while Instant::now() < end {
                let status = get_once(&mut sender, &key(c * 1_000_000_000 + n)).await;
                denied += u64::from(status == 429);
                n += 1;
            }
            (n, denied)
        });
    }
    let (mut n, mut denied) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let (a, b) = r.unwrap();
        n += a;
        denied += b;
    }
    (n as f64 / RUN.as_secs_f64(), denied as f64 / n.max(1) as f64)
}

fn per_request(total: Duration, n: u32) -> f64 {
    total.as_secs_f64() * 1e6 / f64::from(n)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let config = Config { deadline: Duration::from_secs(1), ..Config::default() };
    let throttle = Throttle::connect_with(&url, config).await?;
    let app = || Router::new().route("/", get(|| async { "ok" }));
    let key = Key::header(HeaderName::from_static("x-key"));

    let bare = serve(app().into_make_service_with_connect_info::<SocketAddr>()).await;
    let admit_all = RateLimit::new(throttle.clone())
        .headers(Headers::default())
        .limit(Limit::rate("all", Policy::parse("1000000000/s")?).key(key.clone()));
    let limited = serve(admit_all.into_make_service(app())?).await;
    let mostly_denied =
        RateLimit::new(throttle.clone()).limit(Limit::rate("deny", Policy::parse("1/h counter")?).key(key));
    let denying = serve(mostly_denied.into_make_service(app())?).await;

    // Sequential, interleaved rounds so that all three see the same machine load.
    let (mut s_bare, mut s_layer) = (connect(bare).await, connect(limited).await);
    let policy = Policy::parse("1000000000/s")?;
    let (mut t_bare, mut t_layer, mut t_check) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..SEQUENTIAL / ROUNDS {
            get_once(&mut s_bare, "k").await;
        }
        t_bare += start.elapsed();
        let start = Instant::now();
        for _ in 0..SEQUENTIAL / ROUNDS {
            assert_eq!(get_once(&mut s_layer, "k").await, 200);
        }
        t_layer += start.elapsed();
        let start = Instant::now();
        for _ in 0..SEQUENTIAL / ROUNDS {
            throttle.check(&policy, "rl:all:k").await?;
        }
        t_check += start.elapsed();
    }
    let (b, l, c) =
        (per_request(t_bare, SEQUENTIAL), per_request(t_layer, SEQUENTIAL), per_request(t_check, SEQUENTIAL));
    println!("one connection, {SEQUENTIAL} requests each:");
    println!("  without the layer        {b:8.1} µs/request");
    println!("  with the layer           {l:8.1} µs/request");
    println!("  the client's round trip  {c:8.1} µs/check");
    println!("  the layer's cost beyond its round trip: {:.1} µs/request", l - b - c);

    println!("{CONNECTIONS} connections, {} s each:", RUN.as_secs());
    let (rps, _) = throughput(bare, |i| i.to_string()).await;
    println!("  without the layer        {rps:10.0} requests/s");
    let (rps, _) = throughput(limited, |i| i.to_string()).await;
    println!("  with the layer           {rps:10.0} requests/s");
    // 9 in 10 requests on the hot key, denied by the deny cache after its first denial.
    let (rps, denied) = throughput(denying, |i| if i % 10 == 0 { format!("fresh{i}") } else { "hot".into() }).await;
    println!(
        "  90% denied (deny cache)  {rps:10.0} requests/s ({:.1}% denied, {} denials cached)",
        denied * 100.0,
        throttle.deny_cache_len()
    );
    Ok(())
}
