//! Limits held in Redis: named policies in a hash an operator edits
//! (`HSET throttle:policies api "100/min"`), loaded at start and kept current. An invalid edit
//! keeps the last good policy of that name and is reported (a `tracing` warning and
//! [`HeldPolicies::errors`]); a removed field removes the policy.
//!
//! Kept current by RESP3 client-side caching: a connection of its own (`HELLO 3`) turns on
//! `CLIENT TRACKING` and reads the hash; the server pushes an `invalidate` message when the
//! hash changes, and the client reads it again (which tracks it again). The hash is also read
//! every poll interval, and after a reconnect. Where tracking is unavailable (a client made
//! from a connection rather than a URL, a cluster, a server or ACL refusing `HELLO 3` or
//! `CLIENT TRACKING`), the hash is read every poll interval instead; [`HeldPolicies::refresh`]
//! says which.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::{AsyncConnectionConfig, ProtocolVersion, PushKind, Value};
use tokio::sync::mpsc;

use crate::client::Throttle;
use crate::error::Error;
use crate::policy::Policy;

#[derive(Default)]
struct State {
    policies: HashMap<String, Policy>,
    /// The names whose current value does not parse: (name, value, error).
    errors: Vec<(String, String, String)>,
}

/// How held policies are kept current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// Invalidation messages (RESP3 `CLIENT TRACKING`), and a read every poll interval.
    Tracking,
    /// A read every poll interval; the reason tracking is unavailable.
    Polling(String),
}

/// Named policies read from a Redis hash, kept current in the background while this lives.
pub struct HeldPolicies {
    state: Arc<RwLock<State>>,
    refresh: Refresh,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HeldPolicies {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn apply(state: &RwLock<State>, fields: Vec<(String, String)>, hash: &str) {
    let mut s = state.write().unwrap_or_else(|e| e.into_inner());
    let mut next = HashMap::new();
    let mut errors = Vec::new();
    for (name, value) in fields {
        match value.parse::<Policy>() {
            Ok(p) => {
                next.insert(name, p);
            }
            Err(e) => {
                if !s.errors.iter().any(|(n, v, _)| *n == name && *v == value) {
                    tracing::warn!(hash, name = %name, value = %value, error = %e, "redis-throttle: invalid policy edit; keeping the last good one");
                }
                if let Some(old) = s.policies.get(&name) {
                    next.insert(name.clone(), *old);
                }
                errors.push((name, value, e.to_string()));
            }
        }
    }
    s.policies = next;
    s.errors = errors;
}

fn fields(value: &Value) -> Vec<(String, String)> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match value {
        Value::Array(items) => items.chunks(2).filter_map(|p| Some((text(p.first()?)?, text(p.get(1)?)?))).collect(),
        Value::Map(pairs) => pairs.iter().filter_map(|(k, v)| Some((text(k)?, text(v)?))).collect(),
        _ => Vec::new(),
    }
}

/// A connection of its own with `CLIENT TRACKING` on, its invalidation messages sent to `tx`.
async fn tracking_connection(
    client: &redis::Client,
    tx: mpsc::UnboundedSender<redis::PushInfo>,
    timeout: Duration,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let info = client.get_connection_info().clone();
    let resp3 = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(resp3))?;
    let config = AsyncConnectionConfig::new()
        .set_push_sender(tx)
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
    redis::cmd("CLIENT").arg("TRACKING").arg("ON").exec_async(&mut conn).await?;
    Ok(conn)
}

async fn read_on(conn: &mut redis::aio::MultiplexedConnection, hash: &str) -> redis::RedisResult<Value> {
    redis::cmd("HGETALL").arg(hash).query_async(conn).await
}

impl Throttle {
    /// Loads the named policies of the hash `hash` and keeps them current: through invalidation
    /// messages where the server can send them (a change arrives in about a round trip),
    /// reading the hash every `poll` as well; by reading it every `poll` where it cannot.
    pub async fn held_policies(&self, hash: &str, poll: Duration) -> Result<HeldPolicies, Error> {
        let state = Arc::new(RwLock::new(State::default()));
        let timeout = self.config().deadline.max(Duration::from_secs(1));
        let tracking = match self.url_client() {
            None => Err("the client was made from a connection, not a URL (Throttle::connect)".to_string()),
            Some(client) => {
                let (tx, rx) = mpsc::unbounded_channel();
                match tracking_connection(&client, tx, timeout).await {
                    Ok(mut conn) => {
                        let value = read_on(&mut conn, hash).await.map_err(Error::Server)?;
                        apply(&state, fields(&value), hash);
                        Ok((client, conn, rx))
                    }
                    Err(e) => Err(format!("client-side caching is unavailable: {e}")),
                }
            }
        };
        let (refresh, task) = match tracking {
            Ok((client, conn, rx)) => {
                let task = tokio::spawn(track(client, conn, rx, hash.to_string(), state.clone(), poll, timeout));
                (Refresh::Tracking, task)
            }
            Err(reason) => {
                tracing::info!(hash, %reason, "redis-throttle: held policies polled");
                apply(&state, fields(&self.send_any(redis::cmd("HGETALL").arg(hash).clone()).await?), hash);
                let (client, hash, state) = (self.clone(), hash.to_string(), state.clone());
                let task = tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(poll).await;
                        match client.send_any(redis::cmd("HGETALL").arg(&hash).clone()).await {
                            Ok(v) => apply(&state, fields(&v), &hash),
                            Err(e) => {
                                tracing::debug!(%e, "redis-throttle: cannot read the policies; keeping the last ones")
                            }
                        }
                    }
                });
                (Refresh::Polling(reason), task)
            }
        };
        Ok(HeldPolicies { state, refresh, task })
    }
}

/// Reads the hash again on every invalidation message and every `poll`; reconnects (and
/// tracks again) after the connection is lost.
async fn track(
    client: redis::Client,
    mut conn: redis::aio::MultiplexedConnection,
    mut rx: mpsc::UnboundedReceiver<redis::PushInfo>,
    hash: String,
    state: Arc<RwLock<State>>,
    poll: Duration,
    timeout: Duration,
) {
    loop {
        let lost = match tokio::time::timeout(poll, rx.recv()).await {
            Err(_) => false,
            Ok(Some(p)) if p.kind == PushKind::Invalidate => false,
            Ok(Some(p)) if p.kind == PushKind::Disconnection => true,
            Ok(Some(_)) => continue,
            Ok(None) => true,
        };
        if !lost {
            match read_on(&mut conn, &hash).await {
                Ok(v) => {
                    apply(&state, fields(&v), &hash);
                    continue;
                }
                Err(e) => tracing::debug!(%e, "redis-throttle: cannot read the policies; reconnecting"),
            }
        }
        // Lost: connect again (tracking is per connection), then read what changed meanwhile.
        loop {
            tokio::time::sleep(poll.min(Duration::from_millis(200))).await;
            let (tx, next_rx) = mpsc::unbounded_channel();
            if let Ok(mut next) = tracking_connection(&client, tx, timeout).await
                && let Ok(v) = read_on(&mut next, &hash).await
            {
                apply(&state, fields(&v), &hash);
                (conn, rx) = (next, next_rx);
                break;
            }
        }
    }
}

impl HeldPolicies {
    /// How the policies are kept current.
    pub fn refresh(&self) -> &Refresh {
        &self.refresh
    }

    /// The policy named `name`, as last read (the last good one if its value is now invalid).
    pub fn get(&self, name: &str) -> Option<Policy> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).policies.get(name).copied()
    }

    /// The names whose value in the hash does not parse now: (name, value, error).
    pub fn errors(&self) -> Vec<(String, String, String)> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).errors.clone()
    }
}
