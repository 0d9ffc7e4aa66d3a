//! The one small harness every integration test uses: real redis-servers (or Valkey) on
//! free loopback ports, each with the freshly built module loaded, in throwaway folders.
//!
//! The server under test is chosen by the environment, so the same tests run against every
//! server in the compatibility matrix:
//! - `THROTTLE_SERVER`: the command (words separated by spaces) that runs a redis-server;
//!   default `redis-server`.
//! - `THROTTLE_CLI`: the redis-cli to use for cluster creation; default `redis-cli`.
//! - `THROTTLE_MODULE`: the module to load; default: built here with `cargo build --release`.
//! - `THROTTLE_BACKEND=container` with `THROTTLE_IMAGE=name:tag`: every server is a container of
//!   that image instead (see `container.rs`); `make test-containers` runs the behavioural test
//!   files this way. Replicas, restarts and cluster nodes exist only natively.
//!   `THROTTLE_IMAGE_MODULE=/path/in/image`: load the module the image carries (an image built
//!   from source) instead of copying the freshly built one into each container.
//! - `THROTTLE_BACKEND=twin` (or `twin-eval`): servers run without the module and with the
//!   Functions twin loaded instead; limiter commands go to its functions (see `twin.rs`).
//!   `make test-twin` runs the behavioural tests this way.
#![allow(dead_code)]

mod container;
pub mod twin;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis::{Connection, RedisResult, Value};

pub type Reply = [i64; 5];

/// The workspace's root (the module's crate), also from the tests of a member crate
/// (`clients/rust/tests` includes this harness by path).
pub fn workspace_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().find(|p| p.join("functions/throttle.lua").is_file()).unwrap_or(manifest)
}

/// Path of the module, built once per test binary (cargo test does not build cdylibs).
pub fn module_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Ok(path) = std::env::var("THROTTLE_MODULE") {
            return PathBuf::from(path);
        }
        let root = workspace_root();
        let status = Command::new(env!("CARGO"))
            .args(["build", "--release", "--lib", "--quiet", "-p", "redis-throttle"])
            .current_dir(root)
            .status()
            .expect("run cargo build for the module");
        assert!(status.success(), "building the module failed");
        let target = std::env::var("CARGO_TARGET_DIR").map_or_else(|_| root.join("target"), PathBuf::from);
        target.join("release/libredis_throttle.so")
    })
    .clone()
}

fn server_command() -> Vec<String> {
    let cmd = std::env::var("THROTTLE_SERVER").unwrap_or_else(|_| "redis-server".into());
    cmd.split_whitespace().map(String::from).collect()
}

pub fn cli_command() -> String {
    std::env::var("THROTTLE_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// A port with nothing listening on it (and, for cluster nodes, on its bus port too).
pub fn free_port(cluster: bool) -> u16 {
    for _ in 0..1000 {
        let port = if cluster {
            20_000 + (rand::random::<u16>() % 35_000)
        } else {
            match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
                Ok(addr) => addr.port(),
                Err(_) => continue,
            }
        };
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && (!cluster || (port <= 55_535 && free(port + 10_000))) {
            return port;
        }
    }
    panic!("no free loopback port found");
}

pub fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How to start a server.
#[derive(Clone)]
pub struct Options {
    pub module: bool,
    pub debug_commands: bool,
    pub cluster: bool,
    pub args: Vec<String>,
    /// Words after the module's path on its `--loadmodule` (its module arguments).
    pub module_args: Vec<String>,
    /// Contents of a `redis.conf` in the server's folder, given to the server first (so
    /// `CONFIG REWRITE` has a file to rewrite).
    pub config_file: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            module: true,
            debug_commands: false,
            cluster: false,
            args: Vec::new(),
            module_args: Vec::new(),
            config_file: None,
        }
    }
}

impl Options {
    pub fn arg(mut self, words: &str) -> Self {
        self.args.extend(words.split_whitespace().map(String::from));
        self
    }
    pub fn module_args(mut self, words: &str) -> Self {
        self.module_args.extend(words.split_whitespace().map(String::from));
        self
    }
    pub fn config_file(mut self, contents: &str) -> Self {
        self.config_file = Some(contents.to_string());
        self
    }
    pub fn without_module(mut self) -> Self {
        self.module = false;
        self
    }
    pub fn debug_commands(mut self) -> Self {
        self.debug_commands = true;
        self
    }
}

/// A running server; killed (and its folder removed) on drop.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    options: Options,
    child: Option<Child>,
    container: Option<container::Handle>,
    /// Start from `redis.conf` alone (after `CONFIG REWRITE` wrote everything into it).
    config_only: bool,
}

impl Server {
    pub fn start() -> Server {
        Server::with(Options::default())
    }

    pub fn with(options: Options) -> Server {
        Server::try_with(options).unwrap_or_else(|log| panic!("{log}"))
    }

    /// Starts a server, or returns why it exited (its log) when it does not come up.
    pub fn try_with(options: Options) -> Result<Server, String> {
        if container::enabled() {
            let (handle, port) = container::Handle::start(&options, module_path);
            // Never created: a container keeps its data inside.
            let dir = std::env::temp_dir().join(format!("throttle-container-{}-{port}", std::process::id()));
            let server = Server { port, dir, options, child: None, container: Some(handle), config_only: false };
            wait_until(&format!("the container on port {port}"), Duration::from_secs(20), || {
                server.try_client().is_ok_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok())
            });
            return Ok(server);
        }
        // A port found free can be taken by another test's server before ours binds it: then
        // ours exits with "Address already in use" and starts again on another port. Each start
        // has a folder of its own, so a collision never touches another server's files.
        static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut attempt = 0;
        loop {
            let port = free_port(options.cluster);
            let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("throttle-test-{}-{port}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create server folder");
            if let Some(contents) = &options.config_file {
                std::fs::write(dir.join("redis.conf"), contents).expect("write redis.conf");
            }
            let mut server =
                Server { port, dir, options: options.clone(), child: None, container: None, config_only: false };
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(log) if attempt < 5 && log.contains("Address already in use") => attempt += 1,
                Err(log) => return Err(log),
            }
        }
    }

    fn launch(&mut self) -> Result<(), String> {
        let mut words = server_command();
        let program = words.remove(0);
        let mut cmd = Command::new(&program);
        cmd.args(words);
        if self.options.config_file.is_some() {
            cmd.arg(self.dir.join("redis.conf"));
        }
        if !self.config_only {
            cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--dir"]).arg(&self.dir).args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                "server.log",
                "--repl-diskless-sync-delay",
                "0",
            ]);
            if self.options.module && twin::backend().is_none() {
                cmd.arg("--loadmodule").arg(module_path()).args(&self.options.module_args);
                if self.options.debug_commands {
                    cmd.args(["DEBUG-COMMANDS", "yes"]);
                }
            }
            if self.options.cluster {
                cmd.args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ]);
            }
            cmd.args(&self.options.args);
        }
        cmd.current_dir(&self.dir).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start `{program}` ({e}); install redis-server (`make test` does) or set THROTTLE_SERVER")
        });
        self.child = Some(child);
        let dir = self.dir.clone();
        let log = dir.join("server.log");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                return Err(format!(
                    "server exited with {status}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            if self.try_client().is_ok_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for the server on port {} (log: {})",
                self.port,
                log.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Make sure the server on this port is the one just started.
        let mut c = self.client();
        let got: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("dir").query(&mut c).unwrap();
        let ours = std::fs::canonicalize(&self.dir).unwrap();
        if Path::new(&got[1]) != ours {
            self.kill();
            return Err(format!("another server answers on port {} (Address already in use)", self.port));
        }
        if self.options.module {
            twin::after_launch(&mut c);
        }
        Ok(())
    }

    /// Stops the server (SHUTDOWN, so it persists what it is configured to) and starts it again
    /// with the same folder and options (plus `extra` arguments).
    pub fn restart(&mut self, extra: &str) {
        assert!(self.container.is_none(), "{}", container::unsupported("restart"));
        let mut c = self.client();
        let _: RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut c);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.options = self.options.clone().arg(extra);
        self.launch().unwrap_or_else(|log| panic!("{log}"));
    }

    /// Stops the server and starts it again from its `redis.conf` alone (as `CONFIG REWRITE`
    /// left it: port, folder, module and configs all come from the file).
    pub fn restart_from_config(&mut self) {
        assert!(self.options.config_file.is_some(), "a server started with a config file");
        self.config_only = true;
        self.restart("");
    }

    /// Starts a killed server again, on the same port and folder with the same options.
    pub fn relaunch(&mut self) {
        assert!(self.child.is_none() && self.container.is_none(), "relaunch follows kill");
        self.launch().unwrap_or_else(|log| panic!("{log}"));
    }

    /// The server process's id (INFO server `process_id`).
    pub fn pid(&self) -> u32 {
        let info: String = redis::cmd("INFO").arg("server").query(&mut self.client()).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
            .expect("process_id in INFO")
    }

    /// Kills the server with SIGKILL (no persistence on the way out).
    pub fn kill(&mut self) {
        self.container = None; // dropping the container removes it
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn try_client(&self) -> RedisResult<Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A connection, retried for a few seconds: a loaded machine can refuse one transiently
    /// (EAGAIN on connect), which is not what any test is about.
    pub fn client(&self) -> Connection {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.try_client() {
                Ok(c) => return c,
                Err(e) if Instant::now() >= deadline => panic!("connect to the server: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    pub fn log(&self) -> String {
        if let Some(container) = &self.container {
            return container.log();
        }
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub fn is_alive(&mut self) -> bool {
        let running = match &self.container {
            Some(container) => container.is_running(),
            None => self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None))),
        };
        running && self.try_client().is_ok_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok())
    }

    /// `redis_version` from INFO, as (major, minor, patch).
    pub fn version(&self) -> (u32, u32, u32) {
        let info: String = redis::cmd("INFO").arg("server").query(&mut self.client()).unwrap();
        let v = info.lines().find_map(|l| l.strip_prefix("redis_version:")).expect("redis_version in INFO");
        let mut parts = v.trim().split('.').map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    /// Starts a replica of this server (with or without the module) and waits for its link.
    pub fn replica(&self, options: Options) -> Server {
        assert!(self.container.is_none(), "{}", container::unsupported("a replica"));
        let replica = Server::with(options.arg(&format!("--replicaof 127.0.0.1 {}", self.port)));
        wait_until("the replica's link to its master", Duration::from_secs(30), || {
            let info: String = redis::cmd("INFO").arg("replication").query(&mut replica.client()).unwrap_or_default();
            info.contains("master_link_status:up")
        });
        replica
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let native = self.container.is_none();
        self.kill();
        if native && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The server's clock (`TIME`), in Unix milliseconds.
pub fn server_ms(c: &mut Connection) -> i64 {
    let t: Vec<i64> = redis::cmd("TIME").query(c).unwrap();
    t[0] * 1000 + t[1] / 1000
}

/// A key's value (panics if it is missing).
pub fn get_bytes(c: &mut Connection, key: &str) -> Vec<u8> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

/// A key's absolute expiry in Unix ms (-1: none, -2: no key).
pub fn pexpiretime(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

/// A command as the backend sends it (limiter commands go to the twin's functions under
/// `THROTTLE_BACKEND=twin`).
pub fn command(args: &[&[u8]]) -> redis::Cmd {
    let args = twin::map(args);
    let mut cmd = redis::cmd(std::str::from_utf8(&args[0]).unwrap());
    for a in &args[1..] {
        cmd.arg(a.as_slice());
    }
    cmd
}

/// Sends one command and returns the raw reply.
pub fn call(c: &mut Connection, args: &[&[u8]]) -> RedisResult<Value> {
    command(args).query(c)
}

/// Runs a rate-limiting command given as one string of words, expecting the five integers.
pub fn throttle(c: &mut Connection, words: &str) -> Reply {
    try_throttle(c, words).unwrap_or_else(|e| panic!("{words}: {e}"))
}

pub fn try_throttle(c: &mut Connection, words: &str) -> RedisResult<Reply> {
    let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
    let v: Vec<i64> = redis::FromRedisValue::from_redis_value(call(c, &args)?)?;
    Ok(v.try_into().unwrap_or_else(|v: Vec<i64>| panic!("{words}: expected five integers, got {v:?}")))
}

/// The error text a command replies with (panics if it succeeds).
pub fn error_of(c: &mut Connection, args: &[&[u8]]) -> String {
    match call(c, args) {
        Err(e) => {
            let code = e.code().unwrap_or("");
            let detail = e.detail().unwrap_or("");
            format!("{code} {detail}").trim().to_string()
        }
        Ok(v) => panic!(
            "expected an error from {:?}, got {v:?}",
            args.iter().map(|a| String::from_utf8_lossy(a)).collect::<Vec<_>>()
        ),
    }
}

/// Every key with its value and absolute expiry in ms.
pub type Snapshot = Vec<(Vec<u8>, Vec<u8>, i64)>;

/// Every key with its value and absolute expiry in ms (`PEXPIRETIME`, Redis 7+). A sorted set
/// (a lease set) reads as its members and scores, `member score ` after one another; another
/// type as its `DUMP`.
pub fn snapshot(c: &mut Connection) -> Snapshot {
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .filter_map(|k| {
            let kind: String = redis::cmd("TYPE").arg(&k).query(c).unwrap();
            let v: Option<Vec<u8>> = match kind.as_str() {
                "zset" => {
                    let members: Vec<Vec<u8>> =
                        redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1).arg("WITHSCORES").query(c).unwrap();
                    Some(
                        members
                            .into_iter()
                            .flat_map(|mut m| {
                                m.push(b' ');
                                m
                            })
                            .collect(),
                    )
                }
                "string" => redis::cmd("GET").arg(&k).query(c).unwrap(),
                _ => redis::cmd("DUMP").arg(&k).query(c).unwrap(),
            };
            let at: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(c).unwrap();
            v.map(|v| (k, v, at))
        })
        .collect()
}

/// Runs commands inside MULTI/EXEC, where Redis 7.2+ freezes the command clock: every call
/// sees the same instant (earlier servers use the real-time clock; see `frozen_clock`).
pub fn in_multi(c: &mut Connection, calls: &[&str]) -> Vec<Reply> {
    in_multi_as(c, calls)
}

/// `in_multi` with the replies as any type (`Vec<Value>` for calls of several kinds).
pub fn in_multi_as<T: redis::FromRedisValue>(c: &mut Connection, calls: &[&str]) -> Vec<T> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for words in calls {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        pipe.add_command(command(&args));
    }
    pipe.query(c).unwrap()
}

/// Whether the server gives modules its cached command time (Redis 7.2+, Valkey 7.2.6+).
pub fn frozen_clock(server: &Server) -> bool {
    server.version() >= (7, 2, 0)
}

/// A Redis Cluster on loopback: `masters` primaries with `replicas` replicas each, every node
/// with the module loaded.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start(masters: usize, replicas: usize) -> Cluster {
        let nodes: Vec<Server> = (0..masters * (1 + replicas))
            .map(|_| Server::with(Options { cluster: true, ..Options::default() }))
            .collect();
        let mut create = Command::new(cli_command());
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = Cluster { nodes };
        cluster.wait_ok();
        cluster
    }

    pub fn wait_ok(&self) {
        for n in &self.nodes {
            wait_until("cluster_state:ok on every node", Duration::from_secs(60), || {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut n.client()).unwrap_or_default();
                info.contains("cluster_state:ok")
            });
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    pub fn client(&self) -> redis::cluster::ClusterConnection {
        redis::cluster::ClusterClient::new(self.urls()).unwrap().get_connection().unwrap()
    }
}

// ---- Faults and load (tests/concurrency.rs, failover.rs, persistence.rs, memory.rs, security.rs)

impl Server {
    /// One `field:value` line of `INFO section`, as text ("" when absent).
    pub fn info_field(&self, section: &str, field: &str) -> String {
        self.info_fields(section, &[field]).remove(0)
    }

    /// Several fields of one INFO reply (one instant: two INFO calls can straddle a change).
    pub fn info_fields(&self, section: &str, fields: &[&str]) -> Vec<String> {
        let info: String = redis::cmd("INFO").arg(section).query(&mut self.client()).unwrap_or_default();
        let value = |field: &str| {
            let prefix = format!("{field}:");
            info.lines().find_map(|l| l.strip_prefix(prefix.as_str())).unwrap_or("").trim().to_string()
        };
        fields.iter().map(|field| value(field)).collect()
    }

    /// Until no AOF rewrite is scheduled or running (started by BGREWRITEAOF or by
    /// `CONFIG SET appendonly yes`): the file holds the dataset from then on. Both fields come
    /// from one INFO reply: a scheduled rewrite starting between two replies would read "0" twice.
    pub fn wait_for_aof_rewrite(&self) {
        wait_until("the AOF rewrite", Duration::from_secs(20), || {
            self.info_fields("persistence", &["aof_rewrite_in_progress", "aof_rewrite_scheduled"]) == ["0", "0"]
        });
    }

    /// How many times `command` (lower case, e.g. `cl.throttle`) ran here: `calls` of
    /// INFO commandstats, 0 when never.
    pub fn command_calls(&self, command: &str) -> u64 {
        let stats = self.info_field("commandstats", &format!("cmdstat_{command}"));
        stats.strip_prefix("calls=").and_then(|rest| rest.split(',').next()).map_or(0, |n| n.parse().expect("a count"))
    }

    /// Whether this server is a master now (`ROLE`).
    pub fn is_master(&self) -> bool {
        let role: Vec<Value> = match self.try_client().and_then(|mut c| redis::cmd("ROLE").query(&mut c)) {
            Ok(role) => role,
            Err(_) => return false,
        };
        matches!(role.first(), Some(Value::BulkString(b)) if b.as_slice() == b"master")
    }
}

/// Retries `f` until it succeeds or `timeout` passes (for clients that must rediscover a
/// topology after a failover).
pub fn retry<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> RedisResult<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("timed out after {timeout:?} retrying {what}: {e}"),
        }
    }
}

impl Cluster {
    /// A cluster client over the nodes that are still running.
    pub fn live_client(&mut self) -> RedisResult<redis::cluster::ClusterConnection> {
        let urls: Vec<String> = self.nodes.iter_mut().filter_map(|n| n.is_alive().then(|| n.url())).collect();
        redis::cluster::ClusterClient::new(urls)?.get_connection()
    }

    /// The index of the node whose port is `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.nodes.iter().position(|n| n.port == port).expect("a node of this cluster")
    }

    /// The ports of the replicas a master reports (`INFO replication`).
    pub fn replicas_of(&self, master: usize) -> Vec<u16> {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut self.nodes[master].client()).unwrap();
        info.lines()
            .filter(|l| l.starts_with("slave"))
            .filter_map(|l| l.split(',').find_map(|kv| kv.strip_prefix("port=")).and_then(|p| p.parse().ok()))
            .collect()
    }
}

impl Server {
    /// Waits until `replica` has applied everything this master sent (`WAIT` counts only the
    /// calling connection's writes, so a fresh connection's `WAIT` proves nothing).
    pub fn wait_replicated(&self, replica: &Server) {
        wait_until("the replica to catch up with its master", Duration::from_secs(20), || {
            let master = self.info_field("replication", "master_repl_offset");
            !master.is_empty() && replica.info_field("replication", "slave_repl_offset") == master
        });
    }
}

impl Server {
    /// Whether the server answers PING (without needing `&mut`).
    pub fn is_alive_ref(&self) -> bool {
        self.try_client().is_ok_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok())
    }
}

// ---- Pub/Sub (tests/keyspace.rs, operate.rs)

/// Subscribes to the channels matching `pattern` (PSUBSCRIBE) on `server`, on a connection of
/// its own; messages arrive on the returned channel as `(channel, payload)`.
pub fn psubscribe(server: &Server, pattern: &str) -> std::sync::mpsc::Receiver<(String, Vec<u8>)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut c = server.client();
    let pattern = pattern.to_string();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut pubsub = c.as_pubsub();
        pubsub.psubscribe(&pattern).unwrap();
        ready_tx.send(()).unwrap();
        pubsub.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        loop {
            match pubsub.get_message() {
                Ok(msg) => {
                    let payload: Vec<u8> = msg.get_payload().unwrap();
                    if tx.send((msg.get_channel_name().to_string(), payload)).is_err() {
                        return;
                    }
                }
                Err(e) if e.is_timeout() => continue,
                Err(_) => return,
            }
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).expect("subscribed");
    rx
}

/// What arrived on `rx` until nothing has come for half a second.
pub fn drain<T: std::fmt::Debug>(rx: &std::sync::mpsc::Receiver<T>) -> Vec<T> {
    let mut items = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(item) = rx.recv_timeout(Duration::from_millis(500)) {
        items.push(item);
        assert!(Instant::now() < deadline, "messages keep coming: {items:?}");
    }
    items
}

/// Sends `sig` to a process a test started (a server it pauses with SIGSTOP, resumes with
/// SIGCONT, kills): kill(2) itself, so no `kill` program is needed (procps is not on a minimal
/// Debian).
pub fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: kill(2) only sends a signal to a process the test started; it touches no memory
    // of ours.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
}

/// Resumes a paused server even when the test fails (so its drop can stop it).
pub struct Resume(pub u32);

impl Drop for Resume {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.0) {
            // SAFETY: as in `signal`.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}
