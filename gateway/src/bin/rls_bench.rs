//! `make bench`'s gateway figures (bench/rls.sh runs this release binary), in one run:
//!
//! 1. Redis CPU per `ShouldRateLimit` with 1, 2 and 4 descriptors (fixed windows, every request
//!    admitted), ours in both `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` modes against upstream's
//!    Redis traffic for the same requests, replayed by a server of ours (`replay`) driven by the
//!    same gRPC load, as each upstream client sends it (see [`Model`]): Redis's own
//!    `used_cpu_user + used_cpu_sys` over the requests. First on a server run as a cache (no
//!    replica: the module builds no replicated command), then with a replica attached.
//! 2. The service's CPU per request (1 descriptor) against a floor: a tonic server with the same
//!    protos answering OK after one Redis round trip (the same `CL.COUNTER` ours sends), each
//!    in its own process (`/proc/PID/stat`).
//! 3. A burst: 2,000 concurrent calls for one descriptor at 100 a minute, with default settings
//!    (no `DECISION_DEADLINE`: the calls wait for Redis as upstream's do): the service's CPU per
//!    call and the calls' p50/p99 against the floor under the same burst, and the answers (100
//!    OK, 1,900 OVER_LIMIT, none failed).
//! 4. p99 latency through Envoy: a route whose rate limit filter calls the service, one calling
//!    the floor, one with no rate limit.
//!
//! Usage: `rls-bench run MODULE RLS ENVOY` (bench/rls.sh), or `rls-bench floor|replay REDIS_URL`
//! (the servers `run` starts). `RLS_BENCH_REQUESTS` and `RLS_BENCH_ROUNDS` change the load.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONCURRENCY: usize = 32;
const USERS: usize = 5_000;
/// Upstream's default `REDIS_POOL_SIZE`.
const POOL: usize = 10;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(default)
}

/// Requests per measurement (`RLS_BENCH_REQUESTS`, default 20,000).
fn requests() -> usize {
    env_number("RLS_BENCH_REQUESTS", 20_000)
}

/// Rounds of each measurement, the contenders alternating (`RLS_BENCH_ROUNDS`, default 3): the
/// median is reported (single rounds vary by 2x on a loaded machine).
fn rounds() -> usize {
    env_number("RLS_BENCH_ROUNDS", 3)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn proc_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // USER_HZ: 100 on every Linux this runs on.
    ticks / 100.0
}

fn redis_cpu(c: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(c).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    field("used_cpu_user") + field("used_cpu_sys")
}

/// The time Redis spent executing commands (INFO commandstats, every command's `usec`, in µs)
/// and the commands it executed (`calls`), INFO itself left out.
fn redis_command_us(c: &mut redis::Connection) -> (f64, f64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    let sum = |field: &str| {
        info.lines()
            .filter(|l| !l.starts_with("cmdstat_info:"))
            .filter_map(|l| l.split(field).nth(1))
            .filter_map(|v| v.split(',').next()?.parse::<f64>().ok())
            .sum()
    };
    (sum("usec="), sum("calls="))
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` and waits for "Listening for gRPC on '…'" (or "FLOOR …") on its stderr.
fn spawn_listening(mut cmd: Command, marker: &str) -> (Proc, String) {
    let mut child = Proc(cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn"));
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the process exited before listening").unwrap();
        if let Some(i) = line.find(marker) {
            let rest = &line[i + marker.len()..];
            let addr = rest.trim_matches(|c| c == '\'' || c == ' ').split('\'').next().unwrap().to_string();
            std::thread::spawn(move || for _ in lines {});
            return (child, addr);
        }
    }
}

/// The domain of our requests; the replay's keys use [`REPLAY_DOMAIN`], of the same length, so
/// that both write keys of the same length and never touch each other's.
const DOMAIN: &str = "bench";
const REPLAY_DOMAIN: &str = "bencu";

fn request(domain: &str, k: usize, user: usize) -> RateLimitRequest {
    let descriptors = (0..k)
        .map(|d| RateLimitDescriptor {
            entries: vec![Entry { key: format!("d{d}"), value: format!("u{user}") }],
            ..Default::default()
        })
        .collect();
    RateLimitRequest { domain: domain.into(), descriptors, hits_addend: 0 }
}

/// Who answers the load: our service, or the replay of upstream's traffic by `model`
/// (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true` when `stop`), told in the request's metadata.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Ours,
    Replay { model: Model, stop: bool },
}

/// How an upstream version's Redis client sends a request's commands (envoyproxy/ratelimit's
/// src/redis/driver_impl.go, fixed_cache_impl.go), on one Redis with its defaults
/// (`REDIS_POOL_SIZE=10`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Model {
    /// radix v3 (upstream until December 2025, what most deployments run), with its default
    /// `REDIS_PIPELINE_WINDOW=0`: no implicit pipelining; a request takes one of 10 pooled
    /// connections for itself (waiting when all are taken) and sends its pipeline on it, one
    /// round trip; no other request's commands share that connection meanwhile.
    V3,
    /// radix v3 with `REDIS_PIPELINE_WINDOW` set: implicit pipelining. The request's commands
    /// are sent one at a time, each waiting for its reply before the next, and radix batches
    /// the commands of concurrent requests into shared writes. Modelled by one multiplexed
    /// connection (redis-rs writes what is queued at once, without waiting for a window).
    V3Window,
    /// radix v4 (upstream since #1041, December 2025): the pool's 10 connections are shared;
    /// a request's pipeline goes on a random one and is flushed at once, interleaved with other
    /// requests' on that connection (`REDIS_PIPELINE_WINDOW` only applies to a cluster).
    V4,
}

impl Model {
    const ALL: [Model; 3] = [Model::V3, Model::V3Window, Model::V4];

    fn name(self) -> &'static str {
        match self {
            Model::V3 => "v3",
            Model::V3Window => "v3-window",
            Model::V4 => "v4",
        }
    }

    fn parse(s: &str) -> Option<Model> {
        Model::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// Sends `requests()` requests of `k` descriptors from `CONCURRENCY` tasks.
async fn drive(addr: &str, k: usize, target: Target) {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let per = requests() / CONCURRENCY;
    let mut tasks = Vec::new();
    for t in 0..CONCURRENCY {
        let mut client = RateLimitServiceClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let user = (t * per + i) % USERS;
                let mut r = match target {
                    Target::Ours => tonic::Request::new(request(DOMAIN, k, user)),
                    Target::Replay { model, stop } => {
                        let mut r = tonic::Request::new(request(REPLAY_DOMAIN, k, user));
                        r.metadata_mut().insert("x-model", model.name().parse().unwrap());
                        r.metadata_mut().insert("x-stop", if stop { "1" } else { "0" }.parse().unwrap());
                        r
                    }
                };
                r.set_timeout(Duration::from_secs(30));
                let r = client.should_rate_limit(r).await.unwrap().into_inner();
                assert_eq!(r.overall_code, Code::Ok as i32);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// The floor: answers OK after one Redis round trip (the `CL.COUNTER … DEBIT` ours sends for one
/// descriptor: a fixed window counts every hit).
struct Floor {
    conn: MultiplexedConnection,
}

#[tonic::async_trait]
impl RateLimitService for Floor {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let r = request.into_inner();
        let key =
            format!("floor_{}", r.descriptors.first().and_then(|d| d.entries.first()).map_or("", |e| e.value.as_str()));
        let _: redis::Value = redis::cmd("CL.COUNTER")
            .arg(key)
            .arg(1_000_000_000)
            .arg(60_000)
            .arg(1)
            .arg("MS")
            .arg("DEBIT")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(fail)?;
        Ok(ok(&r))
    }
}

fn fail(e: redis::RedisError) -> tonic::Status {
    tonic::Status::unknown(e.to_string())
}

fn ok(r: &RateLimitRequest) -> tonic::Response<RateLimitResponse> {
    let statuses =
        r.descriptors.iter().map(|_| DescriptorStatus { code: Code::Ok as i32, ..Default::default() }).collect();
    tonic::Response::new(RateLimitResponse { overall_code: Code::Ok as i32, statuses, ..Default::default() })
}

/// The replay of upstream's Redis traffic, by [`Model`]: per descriptor `INCRBY key hits` and
/// `EXPIRE key unit_seconds` (sent on every hit, upstream's `pipelineAppend`), the key
/// upstream's (`domain_key_value_windowstart`); with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
/// first a `GET` of every key (one more round trip), as its `DoLimit` does.
struct Replay {
    /// `Model::V3`: connections each used by one request at a time.
    exclusive: tokio::sync::Mutex<Vec<MultiplexedConnection>>,
    free: tokio::sync::Semaphore,
    /// `Model::V3Window`.
    multiplexed: MultiplexedConnection,
    /// `Model::V4`, picked at random per pipeline.
    shared: Vec<MultiplexedConnection>,
    seed: AtomicU64,
}

impl Replay {
    /// Sends `pipe` as the model sends one `PipeDo`.
    async fn pipe_do(&self, model: Model, pipe: redis::Pipeline) -> Result<(), tonic::Status> {
        match model {
            Model::V3 => {
                let _permit = self.free.acquire().await.map_err(|e| tonic::Status::internal(e.to_string()))?;
                let mut conn =
                    self.exclusive.lock().await.pop().ok_or_else(|| tonic::Status::internal("no free connection"))?;
                let result: Result<Vec<redis::Value>, _> = pipe.query_async(&mut conn).await;
                self.exclusive.lock().await.push(conn);
                result.map_err(fail)?;
            }
            Model::V3Window => {
                // Implicit pipelining: every command its own call, in order.
                for cmd in pipe.cmd_iter() {
                    let _: redis::Value = cmd.query_async(&mut self.multiplexed.clone()).await.map_err(fail)?;
                }
            }
            Model::V4 => {
                // xorshift: radix v4 picks a connection at random.
                let mut x = self.seed.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
                x ^= x >> 31;
                x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
                x ^= x >> 29;
                let mut conn = self.shared[(x % self.shared.len() as u64) as usize].clone();
                let _: Vec<redis::Value> = pipe.query_async(&mut conn).await.map_err(fail)?;
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl RateLimitService for Replay {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let meta = |name: &str| request.metadata().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let model = Model::parse(&meta("x-model")).ok_or_else(|| tonic::Status::invalid_argument("x-model"))?;
        let stop = meta("x-stop") == "1";
        let r = request.into_inner();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
        let window = now / 60 * 60;
        let keys: Vec<String> = r
            .descriptors
            .iter()
            .map(|d| {
                let mut k = format!("{}_", r.domain);
                for e in &d.entries {
                    k.push_str(&format!("{}_{}_", e.key, e.value));
                }
                k.push_str(&window.to_string());
                k
            })
            .collect();
        if stop {
            let mut get = redis::pipe();
            for key in &keys {
                get.cmd("GET").arg(key);
            }
            self.pipe_do(model, get).await?;
        }
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("INCRBY").arg(key).arg(1).cmd("EXPIRE").arg(key).arg(60);
        }
        self.pipe_do(model, pipe).await?;
        Ok(ok(&r))
    }
}

async fn serve<S>(service: S)
where
    S: RateLimitService,
{
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    eprintln!("FLOOR '{}'", listener.local_addr().unwrap());
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(service))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await
        .unwrap();
}

/// `n` connections without the redis crate's response timeout (500 ms: a loaded machine's
/// pause would fail a request; upstream's REDIS_TIMEOUT is 10 s).
async fn connections(client: &redis::Client, n: usize) -> Vec<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(client.get_multiplexed_async_connection_with_config(&config).await.unwrap());
    }
    out
}

async fn replay(url: String) {
    let client = redis::Client::open(url).unwrap();
    let replay = Replay {
        exclusive: tokio::sync::Mutex::new(connections(&client, POOL).await),
        free: tokio::sync::Semaphore::new(POOL),
        multiplexed: connections(&client, 1).await.remove(0),
        shared: connections(&client, POOL).await,
        seed: AtomicU64::new(0x2545_F491_4F6C_DD1D),
    };
    serve(replay).await;
}

async fn floor(url: String) {
    let conn = connections(&redis::Client::open(url).unwrap(), 1).await.remove(0);
    serve(Floor { conn }).await;
}

/// One keep-alive HTTP/1.1 connection sending `n` GETs of `path`: each request's latency.
async fn http_latencies(port: u16, path: &str, n: usize, user: usize) -> Vec<Duration> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.set_nodelay(true).unwrap();
    let mut out = Vec::with_capacity(n);
    let mut buf = vec![0u8; 4096];
    for i in 0..n {
        let req = format!("GET {path} HTTP/1.1\r\nHost: b\r\nx-user: u{}\r\n\r\n", (user * n + i) % USERS);
        let started = Instant::now();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        loop {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "envoy closed the connection");
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    break;
                }
            }
        }
        out.push(started.elapsed());
    }
    out
}

/// `BURST` concurrent calls for one descriptor (`burst`, 100 a minute) on `addr`, from 4
/// connections: (OK, OVER_LIMIT, failed) and each call's latency.
async fn burst(addr: &str, user: &str) -> ((usize, usize, usize), Vec<Duration>) {
    let mut clients = Vec::new();
    for _ in 0..4 {
        let channel =
            tonic::transport::Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
        clients.push(RateLimitServiceClient::new(channel));
    }
    let tasks: Vec<_> = (0..BURST)
        .map(|i| {
            let mut c = clients[i % clients.len()].clone();
            let r = RateLimitRequest {
                domain: DOMAIN.into(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry { key: "burst".into(), value: user.into() }],
                    ..Default::default()
                }],
                hits_addend: 0,
            };
            tokio::spawn(async move {
                let started = Instant::now();
                let code = c.should_rate_limit(r).await.map(|r| r.into_inner().overall_code);
                (code, started.elapsed())
            })
        })
        .collect();
    let (mut counts, mut latencies) = ((0, 0, 0), Vec::with_capacity(BURST));
    for t in tasks {
        let (code, took) = t.await.unwrap();
        match code {
            Ok(c) if c == Code::Ok as i32 => counts.0 += 1,
            Ok(c) if c == Code::OverLimit as i32 => counts.1 += 1,
            _ => counts.2 += 1,
        }
        latencies.push(took);
    }
    (counts, latencies)
}

const BURST: usize = 2_000;

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

fn envoy_config(listen: u16, upstream: u16, rls: &str, floor: &str) -> String {
    let cluster = |name: &str, addr: &str| {
        let (h, p) = addr.rsplit_once(':').unwrap();
        format!(
            "  - name: {name}\n    type: STATIC\n    typed_extension_protocol_options:\n      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n        explicit_http_config: {{http2_protocol_options: {{}}}}\n    load_assignment: {{cluster_name: {name}, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: {h}, port_value: {p}}}}}}}}}]}}]}}\n"
        )
    };
    let filter = |stage: u32, cluster: &str| {
        format!(
            "          - name: envoy.filters.http.ratelimit\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit\n              domain: bench\n              stage: {stage}\n              timeout: 1s\n              rate_limit_service: {{transport_api_version: V3, grpc_service: {{envoy_grpc: {{cluster_name: {cluster}}}}}}}\n"
        )
    };
    let route = |path: &str, stage: Option<u32>| match stage {
        Some(s) => format!(
            "              - match: {{prefix: \"{path}\"}}\n                route: {{cluster: upstream, rate_limits: [{{stage: {s}, actions: [{{request_headers: {{header_name: x-user, descriptor_key: d0}}}}]}}]}}\n"
        ),
        None => {
            format!("              - match: {{prefix: \"{path}\"}}\n                route: {{cluster: upstream}}\n")
        }
    };
    format!(
        "admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}\nstatic_resources:\n  listeners:\n  - name: main\n    address: {{socket_address: {{address: 127.0.0.1, port_value: {listen}}}}}\n    filter_chains:\n    - filters:\n      - name: envoy.filters.network.http_connection_manager\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n          stat_prefix: ingress\n          route_config:\n            virtual_hosts:\n            - name: all\n              domains: [\"*\"]\n              routes:\n{}{}{}          http_filters:\n{}{}          - name: envoy.filters.http.router\n            typed_config: {{\"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}\n  clusters:\n  - name: upstream\n    type: STATIC\n    load_assignment: {{cluster_name: upstream, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]}}\n{}{}",
        route("/rls", Some(0)),
        route("/floor", Some(1)),
        route("/none", None),
        filter(0, "rls"),
        filter(1, "floor"),
        cluster("rls", rls),
        cluster("floor", floor)
    )
}

/// A redis-server on a free port (with the module, or as a replica of `replica_of`).
fn redis_server(
    dir: &std::path::Path,
    module: Option<&str>,
    replica_of: Option<u16>,
) -> (Proc, u16, redis::Connection) {
    let port = free_port();
    std::fs::create_dir_all(dir).unwrap();
    let mut cmd = Command::new(std::env::var("THROTTLE_SERVER").unwrap_or_else(|_| "redis-server".into()));
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--repl-diskless-sync-delay",
        "0",
        "--dir",
    ])
    .arg(dir);
    if let Some(m) = module {
        cmd.arg("--loadmodule").arg(m);
    }
    if let Some(p) = replica_of {
        cmd.args(["--replicaof", "127.0.0.1", &p.to_string()]);
    }
    let proc = Proc(cmd.stdout(Stdio::null()).spawn().expect("redis-server"));
    let url = format!("redis://127.0.0.1:{port}/");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = redis::Client::open(url.as_str()).and_then(|cl| cl.get_connection())
            && redis::cmd("PING").query::<String>(&mut c).is_ok()
        {
            return (proc, port, c);
        }
        assert!(Instant::now() < deadline, "redis-server on {port} did not answer");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads Redis's event loop processed (INFO stats `total_reads_processed`): fewer per
/// request means more requests' commands arrived in each read.
fn redis_reads(c: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// One measurement of Redis while `target` answers `requests()` requests of `k` descriptors:
/// per request, process CPU µs, command µs, commands and reads.
async fn measure(c: &mut redis::Connection, addr: &str, k: usize, target: Target) -> [f64; 4] {
    let n = requests() as f64;
    let (cpu, (us, calls), reads) = (redis_cpu(c), redis_command_us(c), redis_reads(c));
    drive(addr, k, target).await;
    let (us2, calls2) = redis_command_us(c);
    let reads2 = redis_reads(c);
    [(redis_cpu(c) - cpu) / n * 1e6, (us2 - us) / n, (calls2 - calls) / n, (reads2 - reads) / n]
}

/// The Redis CPU table of one regime: for 1, 2 and 4 descriptors and each mode, ours and the
/// three replays of upstream, alternating (each round starts with the next contender).
async fn redis_table(c: &mut redis::Connection, ours: [&str; 2], replay: &str) {
    println!(
        "{:>3} {:<15}| {:>6} {:>6} {:>9} {:>6} | {:>7} {:>10} {:>7} | {:>8} | {:>11} | {:>13} | {:>11}",
        "",
        "",
        "ours",
        "v3",
        "v3-window",
        "v4",
        "ours/v3",
        "/v3-window",
        "ours/v4",
        "commands",
        "command µs",
        "other µs",
        "reads"
    );
    println!(
        "{:>3} {:<15}| {:^31} | {:^28} | {:>8} | {:>11} | {:>13} | {:>11}",
        "k", "mode", "Redis CPU µs/request", "ratio (target <= 0.50x)", "ours/up", "ours/v3", "ours/v3", "ours/v3"
    );
    for k in [1usize, 2, 4] {
        for stop in [false, true] {
            let mut contenders = vec![(Target::Ours, ours[usize::from(stop)])];
            contenders.extend(Model::ALL.map(|model| (Target::Replay { model, stop }, replay)));
            let mut rows: Vec<Vec<[f64; 4]>> = Vec::new();
            for r in 0..rounds() {
                let mut row = vec![[0.0; 4]; contenders.len()];
                for i in 0..contenders.len() {
                    let at = (r + i) % contenders.len();
                    let (target, addr) = contenders[at];
                    row[at] = measure(c, addr, k, target).await;
                }
                rows.push(row);
            }
            let m = |i: usize, f: usize| median(rows.iter().map(|r| r[i][f]).collect());
            let ratio = |i: usize| median(rows.iter().map(|r| r[0][0] / r[i][0]).collect());
            // Redis's CPU outside the commands' own time: reading, parsing, dispatching, replying
            // on the socket. With the command µs, the two parts of the ratio.
            let other = |i: usize| median(rows.iter().map(|r| r[i][0] - r[i][1]).collect());
            let mode = if stop { "all or nothing" } else { "independent" };
            println!(
                "{k:>3} {mode:<15}| {:>6.2} {:>6.2} {:>9.2} {:>6.2} | {:>6.2}x {:>9.2}x {:>6.2}x | {:>3.0} / {:<2.0} | {:>5.2} / {:<4.2}| {:>5.2} / {:<5.2} | {:>4.2} / {:<4.2}",
                m(0, 0),
                m(1, 0),
                m(2, 0),
                m(3, 0),
                ratio(1),
                ratio(2),
                ratio(3),
                m(0, 2),
                m(1, 2),
                m(0, 1),
                m(1, 1),
                other(0),
                other(1),
                m(0, 3),
                m(1, 3)
            );
        }
    }
}

async fn run(module: String, rls_bin: String, envoy_bin: String) {
    let dir = std::env::temp_dir().join(format!("rls-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ratelimit/config")).unwrap();
    let mut yaml = format!("domain: {DOMAIN}\ndescriptors:\n");
    for d in 0..4 {
        yaml.push_str(&format!("  - key: d{d}\n    rate_limit: {{unit: minute, requests_per_unit: 1000000000}}\n"));
    }
    yaml.push_str("  - key: burst\n    rate_limit: {unit: minute, requests_per_unit: 100}\n");
    std::fs::write(dir.join("ratelimit/config/bench.yaml"), yaml).unwrap();
    let (_redis, redis_port, mut c) = redis_server(&dir.join("primary"), Some(&module), None);
    let url = format!("redis://127.0.0.1:{redis_port}/");
    // Ours in each STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT mode, with upstream's other defaults.
    let start_rls = |stop: &str| {
        let mut cmd = Command::new(&rls_bin);
        cmd.env_clear().envs([
            ("RUNTIME_ROOT", dir.to_str().unwrap()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("USE_STATSD", "false"),
            ("LOG_LEVEL", "warn"),
            ("HOST", "127.0.0.1"),
            ("PORT", "0"),
            ("GRPC_HOST", "127.0.0.1"),
            ("GRPC_PORT", "0"),
            ("DEBUG_HOST", "127.0.0.1"),
            ("DEBUG_PORT", "0"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &format!("127.0.0.1:{redis_port}")),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", stop),
        ]);
        spawn_listening(cmd, "Listening for gRPC on '")
    };
    let (rls, rls_addr) = start_rls("false");
    let (_rls_all, rls_all_addr) = start_rls("true");
    let mut floor_cmd = Command::new(std::env::current_exe().unwrap());
    floor_cmd.args(["floor", &url]);
    let (floor_proc, floor_addr) = spawn_listening(floor_cmd, "FLOOR '");
    let mut replay_cmd = Command::new(std::env::current_exe().unwrap());
    replay_cmd.args(["replay", &url]);
    let (_replay_proc, replay_addr) = spawn_listening(replay_cmd, "FLOOR '");
    // Warm up (connections, first windows).
    drive(&rls_addr, 1, Target::Ours).await;
    drive(&rls_all_addr, 2, Target::Ours).await;
    drive(&floor_addr, 1, Target::Ours).await;
    for model in Model::ALL {
        drive(&replay_addr, 1, Target::Replay { model, stop: false }).await;
    }

    let (n, r) = (requests(), rounds());
    println!(
        "\nThe gateway service (gateway/src/bin/rls_bench.rs, release; {n} requests of k descriptors per measurement from {CONCURRENCY} concurrent gRPC calls, every one admitted; medians of {r} rounds, the contenders alternating)"
    );
    println!(
        "\nRedis CPU per ShouldRateLimit (fixed windows, INFO cpu), ours against upstream's Redis traffic for the same requests, replayed as each upstream client sends it:"
    );
    println!(
        "  v3:        radix v3 (upstream until 2025-12), defaults: a pool of 10 connections, each request's INCRBY+EXPIRE pipeline alone on one"
    );
    println!(
        "  v3-window: radix v3 with REDIS_PIPELINE_WINDOW set: each command on its own, in order, batched with other requests' (one multiplexed connection)"
    );
    println!(
        "  v4:        radix v4 (upstream since 2026-01), defaults: 10 shared connections, each request's pipeline on a random one"
    );
    println!(
        "  mode: STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false (independent: ours one CL.EACH per request, a CL.COUNTER for one descriptor)"
    );
    println!("        or true (all or nothing: ours one CL.ALL; upstream a GET pipeline, then INCRBY+EXPIRE)");
    println!("\n-- a server run as a cache (no replica, no AOF: the module builds no replicated command) --");
    redis_table(&mut c, [&rls_addr, &rls_all_addr], &replay_addr).await;

    // The same with a replica attached: both feed it (ours one SET per hit, upstream's INCRBY
    // and PEXPIREAT).
    let (_replica, _, mut replica) = redis_server(&dir.join("replica"), None, Some(redis_port));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !redis::cmd("INFO")
        .arg("replication")
        .query::<String>(&mut replica)
        .unwrap_or_default()
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica did not sync");
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("\n-- with a replica attached (the module replicates its writes) --");
    redis_table(&mut c, [&rls_addr, &rls_all_addr], &replay_addr).await;

    println!("\nService CPU per request (1 descriptor), ours vs the floor (tonic, one Redis round trip):");
    let mut rounds = Vec::new();
    for _ in 0..r {
        let before = proc_cpu(rls.0.id());
        drive(&rls_addr, 1, Target::Ours).await;
        let ours = (proc_cpu(rls.0.id()) - before) / n as f64 * 1e6;
        let before = proc_cpu(floor_proc.0.id());
        drive(&floor_addr, 1, Target::Ours).await;
        let floor = (proc_cpu(floor_proc.0.id()) - before) / n as f64 * 1e6;
        rounds.push((ours, floor));
    }
    let (ours_us, floor_us) =
        (median(rounds.iter().map(|r| r.0).collect()), median(rounds.iter().map(|r| r.1).collect()));
    let ratio = median(rounds.iter().map(|r| r.0 / r.1).collect());
    println!("{:>14} {:>14} {:>8}   (medians of {r} rounds)", "ours µs/req", "floor µs/req", "ratio");
    println!("{ours_us:>14.1} {floor_us:>14.1} {ratio:>7.2}x   target: <= 1.30x");

    println!(
        "\nA burst: {BURST} concurrent calls for one descriptor at 100 a minute (default settings: no DECISION_DEADLINE), ours vs the floor under the same burst:"
    );
    println!(
        "{:>14} {:>14} {:>8} {:>10} {:>10} {:>10} {:>10}   answers (ours)",
        "ours µs/call", "floor µs/call", "ratio", "ours p50", "ours p99", "floor p50", "floor p99"
    );
    let mut rows = Vec::new();
    let mut answers = (0, 0, 0);
    for round in 0..r {
        let user = format!("{}-{round}", std::process::id());
        let before = proc_cpu(rls.0.id());
        let (counts, ours) = burst(&rls_addr, &user).await;
        let ours_us = (proc_cpu(rls.0.id()) - before) / BURST as f64 * 1e6;
        let before = proc_cpu(floor_proc.0.id());
        let (_, floor) = burst(&floor_addr, &user).await;
        let floor_us = (proc_cpu(floor_proc.0.id()) - before) / BURST as f64 * 1e6;
        answers = counts;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        rows.push([
            ours_us,
            floor_us,
            ours_us / floor_us,
            ms(p50(ours.clone())),
            ms(p99(ours)),
            ms(p50(floor.clone())),
            ms(p99(floor)),
        ]);
    }
    let med = |i: usize| median(rows.iter().map(|r: &[f64; 7]| r[i]).collect());
    println!(
        "{:>14.1} {:>14.1} {:>7.2}x {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>8.1}ms   {} OK, {} over, {} failed (the last round)",
        med(0),
        med(1),
        med(2),
        med(3),
        med(4),
        med(5),
        med(6),
        answers.0,
        answers.1,
        answers.2
    );

    // Latency through Envoy.
    let app = axum::Router::new().fallback(|| async { "ok" });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let listen = free_port();
    std::fs::write(dir.join("envoy.yaml"), envoy_config(listen, upstream, &rls_addr, &floor_addr)).unwrap();
    let _envoy = Proc(
        Command::new(&envoy_bin)
            .arg("-c")
            .arg(dir.join("envoy.yaml"))
            .args(["--use-dynamic-base-id", "--concurrency", "1", "-l", "error", "--disable-hot-restart"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("envoy"),
    );
    while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("\nLatency through Envoy (8 keep-alive connections, 2,000 requests each), p99:");
    let mut results = Vec::new();
    for path in ["/none", "/rls", "/floor", "/rls", "/floor"] {
        let mut tasks = Vec::new();
        for t in 0..8 {
            tasks.push(tokio::spawn(http_latencies(listen, path, 2000, t)));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        results.push((path, p99(all)));
    }
    let none = results[0].1;
    let best = |p: &str| results.iter().filter(|(q, _)| *q == p).map(|(_, d)| *d).min().unwrap();
    let (rls_p99, floor_p99) = (best("/rls"), best("/floor"));
    println!("  no rate limit {:>8.0} µs", none.as_secs_f64() * 1e6);
    println!(
        "  our service   {:>8.0} µs  (+{:.0} µs)",
        rls_p99.as_secs_f64() * 1e6,
        (rls_p99.saturating_sub(none)).as_secs_f64() * 1e6
    );
    println!(
        "  the floor     {:>8.0} µs  (+{:.0} µs)",
        floor_p99.as_secs_f64() * 1e6,
        (floor_p99.saturating_sub(none)).as_secs_f64() * 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("floor") => floor(args[2].clone()).await,
        Some("replay") => replay(args[2].clone()).await,
        Some("run") => run(args[2].clone(), args[3].clone(), args[4].clone()).await,
        _ => eprintln!("usage: rls-bench run MODULE RLS ENVOY | rls-bench floor|replay REDIS_URL"),
    }
}
