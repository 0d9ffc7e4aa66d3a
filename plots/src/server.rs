//! A throwaway redis-server with the module loaded, on a free loopback port, in a temporary
//! folder; stopped and removed when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    dir: PathBuf,
    pub port: u16,
}

impl Server {
    /// Starts `redis-server` (or `THROTTLE_SERVER`) with `module` loaded.
    pub fn start(module: &Path) -> Result<Server, String> {
        if !module.is_file() {
            return Err(format!("module {} not found: run `make build` first", module.display()));
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let dir = std::env::temp_dir().join(format!("redis-throttle-plots-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let server = std::env::var("THROTTLE_SERVER").unwrap_or_else(|_| "redis-server".into());
        let mut words = server.split_whitespace();
        let program = words.next().ok_or("THROTTLE_SERVER is empty")?;
        let child = Command::new(program)
            .args(words)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--loadmodule")
            .arg(module)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        let server = Server { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut con) = server.connect()
                && redis::cmd("PING").query::<String>(&mut con).is_ok()
            {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {port} did not answer within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn connect(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?.get_connection()
    }

    /// `redis_version` from `INFO server`, with the server's name (Redis or Valkey).
    pub fn version(&self) -> redis::RedisResult<String> {
        let info: String = redis::cmd("INFO").arg("server").query(&mut self.connect()?)?;
        let field = |name: &str| info.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()));
        let name = if field("server_name:").as_deref() == Some("valkey") { "Valkey" } else { "Redis" };
        let version = field("valkey_version:").or_else(|| field("redis_version:")).unwrap_or_default();
        Ok(format!("{name} {version}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
