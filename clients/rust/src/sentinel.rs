//! Redis Sentinel: a client that follows a monitored master through failovers.
//!
//! [`Throttle::connect_sentinel_degraded`] asks the sentinels for the master, connects to it (as
//! [`Throttle::connect`] does: `Config::connections` connection managers) and keeps asking:
//! every second, and at once when a call finds the master gone or read-only (a demoted master
//! answers `READONLY`). When the sentinels name another master, new connections are made to it
//! and the next calls go there. A call never waits for the sentinels: until the new master is
//! reached, calls that fail are answered by the failure policy (a `READONLY` reply counts as the
//! server being unavailable, not as an error to return).

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::client::{Inner, Throttle};
use crate::config::Config;
use crate::error::Error;
use crate::transport::{Conn, Follower, Link, detect, managers};
use redis::sentinel::SentinelClient;

/// How often the sentinels are asked which master to use, without a sign of trouble.
const CHECK_EVERY: Duration = Duration::from_secs(1);

fn address_of(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

async fn master(sentinel: &mut SentinelClient, config: Config) -> Result<redis::Client, String> {
    match tokio::time::timeout(config.connect_timeout, sentinel.async_get_client()).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer from the sentinels within {:?}", config.connect_timeout)),
    }
}

impl Throttle {
    /// [`Throttle::connect_degraded`] through Redis Sentinel: the master that `sentinel`
    /// (a [`SentinelClient`] for a master, with the credentials and TLS of both the sentinels
    /// and the servers) names, followed through failovers (see the module's comment). Returns
    /// at once; the failure policy answers until the master first answers.
    pub fn connect_sentinel_degraded(sentinel: SentinelClient, config: Config) -> Result<Throttle, Error> {
        let throttle = Throttle::build(None, None, config);
        let weak = Arc::downgrade(&throttle.inner);
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| Error::Invalid(format!("connect_sentinel_degraded needs a tokio runtime: {e}")))?;
        runtime.spawn(follow(weak, sentinel, config));
        Ok(throttle)
    }
}

/// Connects to the master the sentinels name (retrying every probe interval until one answers),
/// then keeps following it while the client lives.
async fn follow(weak: Weak<Inner>, mut sentinel: SentinelClient, config: Config) {
    let pause = config.breaker.probe_interval.max(Duration::from_millis(10));
    let follower = loop {
        if weak.strong_count() == 0 {
            return;
        }
        let found = async {
            let client = master(&mut sentinel, config).await?;
            let conn = tokio::time::timeout(config.connect_timeout, managers(&client, config))
                .await
                .map_err(|_| "no connection to the master".to_string())?
                .map_err(|e| e.to_string())?;
            let backend =
                tokio::time::timeout(config.connect_timeout, detect(&conn, Some(client.get_connection_info())))
                    .await
                    .map_err(|_| "no answer from the master".to_string())?
                    .map_err(|e| e.to_string())?;
            Ok::<_, String>((address_of(&client), conn, backend))
        };
        match found.await {
            Ok((address, conn, backend)) => {
                let Some(inner) = weak.upgrade() else { return };
                tracing::info!(?backend, master = %address, "redis-throttle: connected to the sentinels' master");
                let follower = Arc::new(Follower::new(address, conn));
                let _ = inner.link.set(Link { conn: Conn::Sentinel(follower.clone()), backend });
                break follower;
            }
            Err(e) => {
                tracing::debug!(error = %e, "redis-throttle: no master from the sentinels yet; the failure policy answers")
            }
        }
        tokio::time::sleep(pause).await;
    };
    // While the client lives (its link holds the follower): ask the sentinels every second, or
    // at once after a call's trouble; move to the master they name.
    let alive = Arc::downgrade(&follower);
    drop(follower);
    loop {
        let Some(follower) = alive.upgrade() else { return };
        // (Held for at most CHECK_EVERY after the client is dropped.)
        let _ = tokio::time::timeout(CHECK_EVERY, follower.check.notified()).await;
        if weak.strong_count() == 0 {
            return;
        }
        let client = match master(&mut sentinel, config).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "redis-throttle: the sentinels did not answer");
                continue;
            }
        };
        let address = address_of(&client);
        if address == follower.address() {
            continue;
        }
        match tokio::time::timeout(config.connect_timeout, managers(&client, config)).await {
            Ok(Ok(conn)) => {
                tracing::warn!(from = %follower.address(), to = %address, "redis-throttle: the sentinels name a new master; calls go there now");
                follower.replace(address, conn);
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, master = %address, "redis-throttle: cannot connect to the new master yet")
            }
            Err(_) => tracing::debug!(master = %address, "redis-throttle: no connection to the new master yet"),
        }
    }
}
