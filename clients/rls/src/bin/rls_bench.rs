//! `make bench`'s gateway figures (bench/rls.sh runs this release binary), in one run:
//!
//! 1. Redis CPU per `ShouldRateLimit` with 1, 2 and 4 descriptors (fixed windows, every request
//!    admitted), against upstream's Redis traffic for the same requests (per descriptor an
//!    `INCRBY` and an `EXPIRE` in one pipeline, replayed by a service of ours driven by the same
//!    gRPC load, so that Redis sees the commands arrive as ours do): Redis's own
//!    `used_cpu_user + used_cpu_sys` over the requests.
//! 2. The service's CPU per request (1 descriptor) against a floor: a tonic server with the same
//!    protos answering OK after one Redis round trip (the same `CL.COUNTER` ours sends), each
//!    in its own process (`/proc/PID/stat`).
//! 3. p99 latency through Envoy: a route whose rate limit filter calls the service, one calling
//!    the floor, one with no rate limit.
//!
//! Usage: `rls-bench run MODULE RLS ENVOY` (bench/rls.sh), or `rls-bench floor|upstream PORT
//! REDIS_URL` (the servers `run` starts).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REQUESTS: usize = 20_000;
const CONCURRENCY: usize = 32;
const USERS: usize = 5_000;
/// Rounds of each measurement (ours and the other alternating): the median is reported.
const ROUNDS: usize = 3;

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
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // USER_HZ: 100 on every Linux this runs on.
    ticks / 100.0
}

fn redis_cpu(c: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(c).unwrap();
    let field = |name: &str| info.lines().find_map(|l| l.strip_prefix(&format!("{name}:"))).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0);
    field("used_cpu_user") + field("used_cpu_sys")
}

/// The time Redis spent executing commands (INFO commandstats, every command's `usec`, in µs)
/// and the commands it executed (`calls`), INFO itself left out.
fn redis_command_us(c: &mut redis::Connection) -> (f64, f64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    let sum = |field: &str| info.lines().filter(|l| !l.starts_with("cmdstat_info:")).filter_map(|l| l.split(field).nth(1)).filter_map(|v| v.split(',').next()?.parse::<f64>().ok()).sum();
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

fn request(k: usize, user: usize) -> RateLimitRequest {
    let descriptors = (0..k).map(|d| RateLimitDescriptor { entries: vec![Entry { key: format!("d{d}"), value: format!("u{user}") }], ..Default::default() }).collect();
    RateLimitRequest { domain: "bench".into(), descriptors, hits_addend: 0 }
}

/// Sends `REQUESTS` requests of `k` descriptors from `CONCURRENCY` tasks.
async fn drive(addr: &str, k: usize) {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let per = REQUESTS / CONCURRENCY;
    let mut tasks = Vec::new();
    for t in 0..CONCURRENCY {
        let mut client = RateLimitServiceClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let r = client.should_rate_limit(request(k, (t * per + i) % USERS)).await.unwrap().into_inner();
                assert_eq!(r.overall_code, Code::Ok as i32);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A tonic server with the same protos: `floor` answers OK after one Redis round trip (the
/// `CL.COUNTER` ours sends for one descriptor); `upstream` sends upstream's Redis traffic for the
/// request (per descriptor `INCRBY key hits` and `EXPIRE key 60`, one pipeline), so that Redis
/// sees upstream's commands arrive as ours do, through a service.
struct Floor {
    conn: redis::aio::MultiplexedConnection,
    upstream: bool,
}

#[tonic::async_trait]
impl RateLimitService for Floor {
    async fn should_rate_limit(&self, request: tonic::Request<RateLimitRequest>) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let r = request.into_inner();
        let mut conn = self.conn.clone();
        let fail = |e: redis::RedisError| tonic::Status::unknown(e.to_string());
        if self.upstream {
            let window = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() / 60 * 60;
            let mut pipe = redis::pipe();
            for d in &r.descriptors {
                let key = format!("upstream_{}_{}_{window}", d.entries[0].key, d.entries[0].value);
                pipe.cmd("INCRBY").arg(&key).arg(1).cmd("EXPIRE").arg(&key).arg(60);
            }
            let _: Vec<redis::Value> = pipe.query_async(&mut conn).await.map_err(fail)?;
        } else {
            let key = format!("floor_{}", r.descriptors.first().and_then(|d| d.entries.first()).map_or("", |e| e.value.as_str()));
            let _: redis::Value = redis::cmd("CL.COUNTER").arg(key).arg(1_000_000_000).arg(60_000).arg(1).arg("MS").query_async(&mut conn).await.map_err(fail)?;
        }
        let statuses = r.descriptors.iter().map(|_| DescriptorStatus { code: Code::Ok as i32, ..Default::default() }).collect();
        Ok(tonic::Response::new(RateLimitResponse { overall_code: Code::Ok as i32, statuses, ..Default::default() }))
    }
}

async fn floor(port: u16, url: String, upstream: bool) {
    let conn = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    eprintln!("FLOOR '{}'", listener.local_addr().unwrap());
    tonic::transport::Server::builder().add_service(RateLimitServiceServer::new(Floor { conn, upstream })).serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)).await.unwrap();
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
                let len: usize = head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0))).unwrap_or(0);
                if body.len() >= len {
                    break;
                }
            }
        }
        out.push(started.elapsed());
    }
    out
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

fn envoy_config(listen: u16, upstream: u16, rls: &str, floor: &str) -> String {
    let cluster = |name: &str, addr: &str| {
        let (h, p) = addr.rsplit_once(':').unwrap();
        format!("  - name: {name}\n    type: STATIC\n    typed_extension_protocol_options:\n      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n        explicit_http_config: {{http2_protocol_options: {{}}}}\n    load_assignment: {{cluster_name: {name}, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: {h}, port_value: {p}}}}}}}}}]}}]}}\n")
    };
    let filter = |stage: u32, cluster: &str| format!("          - name: envoy.filters.http.ratelimit\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit\n              domain: bench\n              stage: {stage}\n              timeout: 1s\n              rate_limit_service: {{transport_api_version: V3, grpc_service: {{envoy_grpc: {{cluster_name: {cluster}}}}}}}\n");
    let route = |path: &str, stage: Option<u32>| match stage {
        Some(s) => format!("              - match: {{prefix: \"{path}\"}}\n                route: {{cluster: upstream, rate_limits: [{{stage: {s}, actions: [{{request_headers: {{header_name: x-user, descriptor_key: d0}}}}]}}]}}\n"),
        None => format!("              - match: {{prefix: \"{path}\"}}\n                route: {{cluster: upstream}}\n"),
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

async fn run(module: String, rls_bin: String, envoy_bin: String) {
    let dir = std::env::temp_dir().join(format!("rls-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ratelimit/config")).unwrap();
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    for d in 0..4 {
        yaml.push_str(&format!("  - key: d{d}\n    rate_limit: {{unit: minute, requests_per_unit: 1000000000}}\n"));
    }
    std::fs::write(dir.join("ratelimit/config/bench.yaml"), yaml).unwrap();
    let redis_port = free_port();
    let _redis = Proc(
        Command::new(std::env::var("THROTTLE_SERVER").unwrap_or_else(|_| "redis-server".into()))
            .args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir"])
            .arg(&dir)
            .arg("--loadmodule")
            .arg(&module)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server"),
    );
    let url = format!("redis://127.0.0.1:{redis_port}/");
    let mut c = loop {
        if let Ok(mut c) = redis::Client::open(url.as_str()).and_then(|cl| cl.get_connection())
            && redis::cmd("PING").query::<String>(&mut c).is_ok()
        {
            break c;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rls_cmd = Command::new(&rls_bin);
    rls_cmd.env_clear().envs([
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
        ("DECISION_DEADLINE", "1s"),
    ]);
    let (rls, rls_addr) = spawn_listening(rls_cmd, "Listening for gRPC on '");
    let mut floor_cmd = Command::new(std::env::current_exe().unwrap());
    floor_cmd.args(["floor", "0", &url]);
    let (floor_proc, floor_addr) = spawn_listening(floor_cmd, "FLOOR '");
    let mut upstream_cmd = Command::new(std::env::current_exe().unwrap());
    upstream_cmd.args(["upstream", "0", &url]);
    let (_upstream_proc, upstream_addr) = spawn_listening(upstream_cmd, "FLOOR '");
    drive(&rls_addr, 1).await; // warm up (connections, first windows)
    drive(&floor_addr, 1).await;

    println!("\nThe gateway service (clients/rls/src/bin/rls_bench.rs, release; {REQUESTS} requests from {CONCURRENCY} tasks, every one admitted)");
    println!("\nRedis CPU per ShouldRateLimit (fixed windows), ours vs upstream's INCRBY+EXPIRE pipeline replayed by a service of ours:");
    println!("{:>12} | {:>8} {:>8} {:>6} | {:>8} {:>8} {:>6} | {:>5} {:>5}", "descriptors", "ours", "upstream", "ratio", "ours", "upstream", "ratio", "ours", "up");
    println!("{:>12} | {:^24} | {:^24} | {:^11}   (medians of {ROUNDS} rounds)", "", "process CPU µs/request", "command µs/request", "commands");
    for k in [1usize, 2, 4] {
        // Three rounds, ours and upstream's alternating; the median of each column.
        let mut rounds: Vec<[f64; 6]> = Vec::new();
        for _ in 0..ROUNDS {
            let (cpu, (us, calls)) = (redis_cpu(&mut c), redis_command_us(&mut c));
            drive(&rls_addr, k).await;
            let (us2, calls2) = redis_command_us(&mut c);
            let ours = ((redis_cpu(&mut c) - cpu) / REQUESTS as f64 * 1e6, (us2 - us) / REQUESTS as f64, (calls2 - calls) / REQUESTS as f64);
            let (cpu, (us, calls)) = (redis_cpu(&mut c), redis_command_us(&mut c));
            drive(&upstream_addr, k).await;
            let (us2, calls2) = redis_command_us(&mut c);
            let theirs = ((redis_cpu(&mut c) - cpu) / REQUESTS as f64 * 1e6, (us2 - us) / REQUESTS as f64, (calls2 - calls) / REQUESTS as f64);
            rounds.push([ours.0, theirs.0, ours.1, theirs.1, ours.2, theirs.2]);
        }
        let m = |i: usize| median(rounds.iter().map(|r| r[i]).collect());
        let ratio = |a: usize, b: usize| median(rounds.iter().map(|r| r[a] / r[b]).collect());
        println!("{k:>12} | {:>8.2} {:>8.2} {:>5.2}x | {:>8.2} {:>8.2} {:>5.2}x | {:>5.1} {:>5.1}", m(0), m(1), ratio(0, 1), m(2), m(3), ratio(2, 3), m(4), m(5));
    }
    println!("target: <= 0.50x upstream");

    println!("\nService CPU per request (1 descriptor), ours vs the floor (tonic, one Redis round trip):");
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        let before = proc_cpu(rls.0.id());
        drive(&rls_addr, 1).await;
        let ours = (proc_cpu(rls.0.id()) - before) / REQUESTS as f64 * 1e6;
        let before = proc_cpu(floor_proc.0.id());
        drive(&floor_addr, 1).await;
        let floor = (proc_cpu(floor_proc.0.id()) - before) / REQUESTS as f64 * 1e6;
        rounds.push((ours, floor));
    }
    let (ours_us, floor_us) = (median(rounds.iter().map(|r| r.0).collect()), median(rounds.iter().map(|r| r.1).collect()));
    let ratio = median(rounds.iter().map(|r| r.0 / r.1).collect());
    println!("{:>14} {:>14} {:>8}   (medians of {ROUNDS} rounds)", "ours µs/req", "floor µs/req", "ratio");
    println!("{ours_us:>14.1} {floor_us:>14.1} {ratio:>7.2}x   target: <= 1.30x");

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
    println!("  our service   {:>8.0} µs  (+{:.0} µs)", rls_p99.as_secs_f64() * 1e6, (rls_p99.saturating_sub(none)).as_secs_f64() * 1e6);
    println!("  the floor     {:>8.0} µs  (+{:.0} µs)", floor_p99.as_secs_f64() * 1e6, (floor_p99.saturating_sub(none)).as_secs_f64() * 1e6);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("floor") => floor(args[2].parse().unwrap(), args[3].clone(), false).await,
        Some("upstream") => floor(args[2].parse().unwrap(), args[3].clone(), true).await,
        Some("run") => run(args[2].clone(), args[3].clone(), args[4].clone()).await,
        _ => eprintln!("usage: rls_bench run MODULE RLS ENVOY | rls_bench floor PORT REDIS_URL"),
    }
}
