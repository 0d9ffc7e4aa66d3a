//! The connections a client sends on (a connection manager, a pool, a cluster, the master a
//! Redis Sentinel names, or the in-memory test kit), how a command is routed on them, and
//! what the server offers (module or twin).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, RedisError, Value};

use crate::config::Config;
use crate::error::Error;
use crate::memory::{Clock, Store};
use crate::wire::Backend;

#[derive(Clone)]
pub(crate) enum Conn {
    Manager(ConnectionManager),
    Multiplexed(MultiplexedConnection),
    Cluster(ClusterConnection),
    Memory(Arc<Mutex<Store>>, Arc<dyn Clock>),
    /// Several connections of one kind (`Config::connections`), each call on the next.
    Pool(Arc<[Conn]>, Arc<AtomicUsize>),
    /// The master a Redis Sentinel names, followed through failovers.
    Sentinel(Arc<Follower>),
}

impl Conn {
    /// The connection the next call goes on (a pool's next, in turn; the sentinels' master).
    pub(crate) fn pick(&self) -> Conn {
        match self {
            Conn::Pool(conns, next) => conns[next.fetch_add(1, Ordering::Relaxed) % conns.len()].pick(),
            Conn::Sentinel(follower) => follower.conn().pick(),
            other => other.clone(),
        }
    }

    /// Whether calls go to a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            Conn::Cluster(_) => true,
            Conn::Pool(conns, _) => conns.first().is_some_and(Conn::is_cluster),
            _ => false,
        }
    }
}

/// The master a Redis Sentinel names (see `sentinel`), and the connections to it: replaced
/// when the sentinels name another.
pub(crate) struct Follower {
    /// The master's address and the connections to it.
    current: RwLock<(String, Conn)>,
    pub(crate) check: tokio::sync::Notify,
}

impl Follower {
    pub(crate) fn new(address: String, conn: Conn) -> Follower {
        Follower { current: RwLock::new((address, conn)), check: tokio::sync::Notify::new() }
    }

    /// Calls go to `conn`, the master at `address`, from now on.
    pub(crate) fn replace(&self, address: String, conn: Conn) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (address, conn);
    }

    pub(crate) fn conn(&self) -> Conn {
        self.current.read().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    pub(crate) fn address(&self) -> String {
        self.current.read().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    /// After a call's error: a master gone or read-only makes the sentinels be asked at once,
    /// and a read-only master counts as unavailable (the failure policy answers).
    pub(crate) fn failed(&self, e: RedisError) -> RedisError {
        if e.code() == Some("READONLY") {
            self.check.notify_one();
            return read_only(&e.to_string());
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
            self.check.notify_one();
        }
        e
    }

    /// A pipeline's replies: a `READONLY` among them is the master being demoted.
    pub(crate) fn check_replies(&self, replies: &[Value]) -> Result<(), RedisError> {
        match replies.iter().find_map(|v| match v {
            Value::ServerError(e) if e.code() == "READONLY" => Some(format!("{e:?}")),
            _ => None,
        }) {
            Some(text) => {
                self.check.notify_one();
                Err(read_only(&text))
            }
            None => Ok(()),
        }
    }
}

fn read_only(text: &str) -> RedisError {
    RedisError::from(std::io::Error::other(format!("the master is read-only (a failover is under way?): {text}")))
}

/// The connection and what it speaks to, once the server has answered.
pub(crate) struct Link {
    pub(crate) conn: Conn,
    pub(crate) backend: Backend,
}

pub(crate) const NOT_CONNECTED: &str = "the server has not been reached yet (started degraded)";

/// An I/O timeout error: nothing within `limit`.
pub(crate) fn not_within(limit: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no connection to the server (or no answer to detecting the module or the twin) within {limit:?}"),
    ))
}

/// `config.connections` connection managers to `client`'s server (one, or a pool), unbounded:
/// the caller bounds it.
pub(crate) async fn managers(client: &redis::Client, config: Config) -> redis::RedisResult<Conn> {
    // Reconnect quickly (the breaker's probe finds the server back within its interval);
    // the per-call deadline is ours, not the connection's.
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.deadline.max(Duration::from_millis(100))))
        .set_response_timeout(None)
        .set_number_of_retries(usize::MAX / 2)
        .set_min_delay(Duration::from_millis(5))
        .set_max_delay((config.breaker.probe_interval / 4).max(Duration::from_millis(5)));
    let mut managers = Vec::with_capacity(config.connections.max(1));
    for _ in 0..config.connections.max(1) {
        managers.push(Conn::Manager(ConnectionManager::new_with_config(client.clone(), manager_config.clone()).await?));
    }
    Ok(if managers.len() == 1 {
        managers.remove(0)
    } else {
        Conn::Pool(managers.into(), Arc::new(AtomicUsize::new(0)))
    })
}

/// Connects with [`managers`] and detects what the server offers (unbounded: the caller bounds
/// it).
pub(crate) async fn link(client: &redis::Client, config: Config) -> Result<Link, Error> {
    let conn = managers(client, config).await.map_err(Error::Connect)?;
    let backend = detect(&conn, Some(client.get_connection_info())).await?;
    Ok(Link { conn, backend })
}

/// Whether an error means the server cannot answer now (as opposed to an error reply).
pub(crate) fn is_outage(e: &RedisError) -> bool {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return true;
    }
    matches!(e.kind(), redis::ErrorKind::ClusterConnectionNotFound)
        || matches!(e.code(), Some("LOADING" | "BUSY" | "CLUSTERDOWN" | "MASTERDOWN" | "TRYAGAIN" | "NOREPLICAS"))
}

/// Sends a pipeline of calls on `key`, routed by it in a cluster: for an atomic one (`MULTI` …
/// `EXEC`) the `EXEC` reply, for a plain one every reply.
pub(crate) async fn send_pipe(
    conn: &Conn,
    pipe: redis::Pipeline,
    key: &[u8],
    atomic: bool,
) -> redis::RedisResult<Value> {
    let result = send_pipe_on(conn.pick(), pipe, key, atomic).await;
    match (conn, result) {
        (Conn::Sentinel(follower), Err(e)) => Err(follower.failed(e)),
        (Conn::Sentinel(follower), Ok(Value::Array(replies))) => {
            follower.check_replies(&replies).map(|()| Value::Array(replies))
        }
        (_, result) => result,
    }
}

async fn send_pipe_on(conn: Conn, pipe: redis::Pipeline, key: &[u8], atomic: bool) -> redis::RedisResult<Value> {
    let replies: Vec<Value> = match conn {
        Conn::Manager(mut c) => pipe.query_async(&mut c).await?,
        Conn::Multiplexed(mut c) => pipe.query_async(&mut c).await?,
        Conn::Cluster(c) => {
            let count = pipe.len();
            let route = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
            if !atomic {
                return Ok(Value::Array(c.clone().route_pipeline(pipe, 0, count, route).await?));
            }
            let mut exec = c.clone().route_pipeline(pipe, count + 1, 1, route).await?;
            match exec.pop() {
                Some(Value::Array(items)) => items,
                other => {
                    return Err(RedisError::from((
                        redis::ErrorKind::Client,
                        "unexpected EXEC reply",
                        format!("{other:?}"),
                    )));
                }
            }
        }
        Conn::Memory(..) | Conn::Pool(..) | Conn::Sentinel(..) => {
            return Err(RedisError::from((redis::ErrorKind::Client, "the in-memory backend sends nothing")));
        }
    };
    Ok(Value::Array(replies))
}

pub(crate) async fn send(conn: &Conn, cmd: Cmd, key: &[u8]) -> redis::RedisResult<Value> {
    let result = send_on(conn.pick(), cmd, key).await;
    match (conn, result) {
        (Conn::Sentinel(follower), Err(e)) => Err(follower.failed(e)),
        (_, result) => result,
    }
}

async fn send_on(conn: Conn, cmd: Cmd, key: &[u8]) -> redis::RedisResult<Value> {
    match conn {
        Conn::Manager(mut c) => cmd.query_async(&mut c).await,
        Conn::Multiplexed(mut c) => cmd.query_async(&mut c).await,
        Conn::Cluster(c) => {
            // Routed by the key, never by the first argument (CL.ALL's is `numkeys`).
            let route =
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master)));
            c.clone().route_command(cmd, route).await
        }
        Conn::Memory(..) | Conn::Pool(..) | Conn::Sentinel(..) => {
            Err(RedisError::from((redis::ErrorKind::Client, "the in-memory backend sends nothing")))
        }
    }
}

/// Module or twin: `COMMAND INFO cl.throttle`, then `FUNCTION LIST LIBRARYNAME throttle`
/// (`server`: where the connection goes, for the loader the error names).
pub(crate) async fn detect(conn: &Conn, server: Option<&redis::ConnectionInfo>) -> Result<Backend, Error> {
    let info =
        send_any(conn, redis::cmd("COMMAND").arg("INFO").arg("cl.throttle").clone()).await.map_err(Error::Connect)?;
    if matches!(&info, Value::Array(items) if items.iter().any(|v| !matches!(v, Value::Nil))) {
        return Ok(Backend::Module);
    }
    let functions = send_any(conn, redis::cmd("FUNCTION").arg("LIST").arg("LIBRARYNAME").arg("throttle").clone()).await;
    if let Ok(Value::Array(libraries)) = &functions
        && !libraries.is_empty()
    {
        crate::twin::warn_if_outdated(
            &send_any(conn, redis::cmd("FCALL_RO").arg("cl_version").arg(0).clone()).await,
            server,
        );
        return Ok(Backend::Twin);
    }
    Err(Error::NoLimiter(crate::twin::missing_library(server)))
}

/// A command for no key in particular (any node of a cluster).
pub(crate) async fn send_any(conn: &Conn, cmd: Cmd) -> redis::RedisResult<Value> {
    match conn.pick() {
        Conn::Cluster(mut c) => {
            c.route_command(cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary)).await
        }
        _ => send(conn, cmd, b"").await,
    }
}
