//! Limits held in Redis: named policies in a hash an operator edits
//! (`HSET throttle:policies api "100/min"`), loaded at start and re-read every poll interval.
//! An invalid edit keeps the last good policy of that name and is reported (a `tracing`
//! warning and [`HeldPolicies::errors`]); a removed field removes the policy.
//!
//! This version polls (`HGETALL` every interval); RESP3 client-side-caching invalidation, which
//! would make a change arrive without polling, is not built yet.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::Value;

use crate::client::{Error, Throttle};
use crate::policy::Policy;

#[derive(Default)]
struct State {
    policies: HashMap<String, Policy>,
    /// The names whose current value does not parse: (name, value, error).
    errors: Vec<(String, String, String)>,
}

/// Named policies read from a Redis hash, kept current in the background while this lives.
pub struct HeldPolicies {
    state: Arc<RwLock<State>>,
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

impl Throttle {
    /// Loads the named policies of the hash `hash` and re-reads it every `poll`.
    pub async fn held_policies(&self, hash: &str, poll: Duration) -> Result<HeldPolicies, Error> {
        let read = |client: Throttle, hash: String| async move { client.send_any(redis::cmd("HGETALL").arg(&hash).clone()).await };
        let state = Arc::new(RwLock::new(State::default()));
        apply(&state, fields(&read(self.clone(), hash.to_string()).await?), hash);
        let task = {
            let (client, hash, state) = (self.clone(), hash.to_string(), state.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(poll).await;
                    match read(client.clone(), hash.clone()).await {
                        Ok(v) => apply(&state, fields(&v), &hash),
                        Err(e) => tracing::debug!(%e, "redis-throttle: cannot read the policies; keeping the last ones"),
                    }
                }
            })
        };
        Ok(HeldPolicies { state, task })
    }
}

impl HeldPolicies {
    /// The policy named `name`, as last read (the last good one if its value is now invalid).
    pub fn get(&self, name: &str) -> Option<Policy> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).policies.get(name).copied()
    }

    /// The names whose value in the hash does not parse now: (name, value, error).
    pub fn errors(&self) -> Vec<(String, String, String)> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).errors.clone()
    }
}
