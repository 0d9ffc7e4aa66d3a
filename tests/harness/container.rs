//! The container backend of the harness (`THROTTLE_BACKEND=container`): each `Server` is a
//! testcontainers container of `THROTTLE_IMAGE` (an image of docker/Dockerfile, e.g.
//! `redis-throttle:local` from `make docker-local`) with the freshly built module copied in and
//! port 6379 published on a free host port. Features a container cannot give (replicas,
//! restarts, cluster) panic with a message saying so; their tests live in native-only files.
//!
//! testcontainers 0.28 speaks Docker API 1.53 and does not negotiate; an engine that only knows
//! an older API (Debian's docker.io: 1.41) refuses every call. The harness then puts a tiny proxy
//! in front of the engine's socket that rewrites the API version in request paths, and points
//! testcontainers at it with `DOCKER_HOST`.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, CopyTargetOptions, GenericImage, ImageExt};

use super::Options;

const MODULE_IN_CONTAINER: &str = "/throttle/libredis_throttle.so";

/// Whether the harness runs servers in containers (`THROTTLE_BACKEND=container`).
pub fn enabled() -> bool {
    match std::env::var("THROTTLE_BACKEND").as_deref() {
        Ok("container") => true,
        Ok("native") | Ok("") | Err(_) => false,
        Ok("twin") | Ok("twin-eval") => false, // native servers with the Functions twin (twin.rs)
        Ok(other) => {
            panic!("THROTTLE_BACKEND={other}: expected `native` (default), `container`, `twin` or `twin-eval`")
        }
    }
}

/// The panic message for what only the native backend can do.
pub fn unsupported(what: &str) -> String {
    format!(
        "{what} needs the native backend: with THROTTLE_BACKEND=container servers are containers, \
         which this harness cannot restart, replicate or cluster. Keep such tests in a test file \
         whose header says `//! skip containers: why`; `make test-containers` skips those files."
    )
}

fn image() -> (String, String) {
    let image = std::env::var("THROTTLE_IMAGE").unwrap_or_else(|_| {
        panic!("THROTTLE_BACKEND=container needs THROTTLE_IMAGE=name:tag (e.g. redis-throttle:local from `make docker-local`)")
    });
    match image.rsplit_once(':') {
        Some((name, tag)) if !name.is_empty() && !tag.contains('/') => (name.into(), tag.into()),
        _ => (image, "latest".into()),
    }
}

pub struct Handle {
    container: Container<GenericImage>,
}

impl Handle {
    /// Starts a server container; returns it and its port on the host's loopback. The module is
    /// the image's own (`THROTTLE_IMAGE_MODULE`) or the freshly built one (`module()`) copied in.
    pub fn start(options: &Options, module: impl FnOnce() -> PathBuf) -> (Handle, u16) {
        assert!(!options.cluster, "{}", unsupported("a cluster node"));
        assert!(options.config_file.is_none(), "{}", unsupported("a config file"));
        docker_api_shim();
        let (name, tag) = image();
        let in_image = std::env::var("THROTTLE_IMAGE_MODULE").ok().filter(|p| !p.is_empty());
        let mut args: Vec<String> = ["--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"]
            .into_iter()
            .chain(["--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"])
            .map(String::from)
            .collect();
        if options.module {
            args.extend(["--loadmodule".into(), in_image.clone().unwrap_or_else(|| MODULE_IN_CONTAINER.into())]);
            args.extend(options.module_args.iter().cloned());
            if options.debug_commands {
                args.extend(["DEBUG-COMMANDS".into(), "yes".into()]);
            }
        }
        args.extend(options.args.iter().cloned());
        let mut request = GenericImage::new(&name, &tag)
            .with_exposed_port(6379.tcp())
            .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
            .with_entrypoint("redis-server")
            .with_cmd(args)
            .with_startup_timeout(Duration::from_secs(60));
        if in_image.is_none() {
            request = request.with_copy_to(CopyTargetOptions::new(MODULE_IN_CONTAINER).with_mode(0o755), module());
        }
        let container = request.start().unwrap_or_else(|e| {
            panic!(
                "cannot start a container of {name}:{tag}: {e}. Is a Docker engine reachable (`docker info`; \
                 as root `scripts/docker-engine.sh` starts one) and does the image exist (`make docker-local` builds it)?"
            )
        });
        let port = container.get_host_port_ipv4(6379.tcp()).expect("the container's published port 6379");
        (Handle { container }, port)
    }

    pub fn log(&self) -> String {
        let out = self.container.stdout_to_vec().unwrap_or_default();
        let err = self.container.stderr_to_vec().unwrap_or_default();
        format!("{}{}", String::from_utf8_lossy(&out), String::from_utf8_lossy(&err))
    }

    pub fn is_running(&self) -> bool {
        self.container.is_running().unwrap_or(false)
    }
}

/// Makes testcontainers' fixed API version acceptable to the engine (see the module's docs).
fn docker_api_shim() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let host = std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
        let Some(socket) = host.strip_prefix("unix://").map(PathBuf::from) else {
            return; // tcp/ssh engines: used as configured
        };
        let wanted = testcontainers::bollard::API_DEFAULT_VERSION;
        let wanted = format!("{}.{}", wanted.major_version, wanted.minor_version);
        let Some(engine) = engine_api_version(&socket) else {
            return; // unreachable: testcontainers reports it when a container is started
        };
        let as_pair = |v: &str| v.split_once('.').map(|(a, b)| (a.parse::<u32>().unwrap_or(0), b.parse::<u32>().unwrap_or(0)));
        if as_pair(&engine) >= as_pair(&wanted) {
            return;
        }
        assert_eq!(
            engine.len(),
            wanted.len(),
            "the Docker engine speaks API {engine}, testcontainers {wanted}: the harness's shim only rewrites versions of equal length"
        );
        let proxy = std::env::temp_dir().join(format!("throttle-docker-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&proxy);
        let listener = UnixListener::bind(&proxy).expect("bind the Docker API shim's socket");
        let (from, to) = (format!("/v{wanted}/").into_bytes(), format!("/v{engine}/").into_bytes());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(daemon) = UnixStream::connect(&socket) else { continue };
                let (from, to) = (from.clone(), to.clone());
                let (client_r, daemon_r) = (client.try_clone().unwrap(), daemon.try_clone().unwrap());
                std::thread::spawn(move || copy(daemon_r, client));
                std::thread::spawn(move || forward_rewriting(client_r, daemon, &from, &to));
            }
        });
        // SAFETY of the environment write: it happens once, before testcontainers reads its
        // configuration, and Rust's own env accesses are serialised.
        unsafe { std::env::set_var("DOCKER_HOST", format!("unix://{}", proxy.display())) };
    });
}

/// `ApiVersion` from the engine's `GET /version` (plain HTTP/1.0 on its socket).
fn engine_api_version(socket: &Path) -> Option<String> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let rest = &body[body.find("\"ApiVersion\":\"")? + 14..];
    Some(rest[..rest.find('"')?].to_string())
}

fn copy(mut from: UnixStream, mut to: UnixStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// Copies a client's requests to the engine with every `from` replaced by `to` (equal lengths).
/// A tail that could begin `from` is held until the next read; requests never end in a prefix
/// of `/vX.Y/` (they end in CRLF, or a JSON or tar body), so nothing is held back for long.
fn forward_rewriting(mut from_client: UnixStream, mut to_daemon: UnixStream, from: &[u8], to: &[u8]) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match from_client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        let mut i = 0;
        while i + from.len() <= pending.len() {
            if &pending[i..i + from.len()] == from {
                pending[i..i + from.len()].copy_from_slice(to);
                i += from.len();
            } else {
                i += 1;
            }
        }
        let keep = (1..from.len()).rev().find(|&k| pending.ends_with(&from[..k])).unwrap_or(0);
        let send = pending.len() - keep;
        if to_daemon.write_all(&pending[..send]).is_err() {
            return;
        }
        pending.drain(..send);
    }
    let _ = to_daemon.write_all(&pending);
    let _ = to_daemon.shutdown(Shutdown::Write);
}
