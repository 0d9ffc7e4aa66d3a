//! The client: one value, cheap to clone, that sends each decision to the server it detected
//! (module or Functions twin), within a deadline, and answers by its failure policy when the
//! server cannot.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{Cmd, RedisError, Value};
use redis_throttle_core::Instant as CoreInstant;
use tracing::Instrument;

use crate::breaker::{Breaker, Permit};
use crate::cache::DenyCache;
use crate::config::Config;
use crate::decision::{Decision, FailurePolicy, Numbers, Reason, Source};
use crate::error::{Error, Failed};
use crate::memory::{Clock, ManualClock, Store, SystemClock};
use crate::policy::Policy;
use crate::transport::{Conn, Link, NOT_CONNECTED, detect, is_outage, link, not_within, send, send_any, send_pipe};
use crate::wire::{Backend, Call, all_command, all_decision, command_name, five, integer, single_command};

/// A rate-limiting client. Clones share the connection, the deny cache and the breaker.
#[derive(Clone)]
pub struct Throttle {
    pub(crate) inner: Arc<Inner>,
    /// A shorter deadline for this view's calls ([`Throttle::within`]).
    deadline: Option<Duration>,
}

pub(crate) struct Inner {
    /// Set at connect, or later by the background connect of [`Throttle::connect_degraded`].
    pub(crate) link: OnceLock<Link>,
    /// For connections of their own (blocking calls), when the client was made from a URL.
    client: Option<redis::Client>,
    pub(crate) config: Config,
    pub(crate) cache: Option<DenyCache>,
    breaker: Breaker,
    /// The `Local` failure policy's limiters.
    local: Mutex<Store>,
    /// Whether a liveness check (see [`Throttle::guarded`]) is under way.
    checking: AtomicBool,
}

impl Throttle {
    /// Connects to `url` with a [`ConnectionManager`] (reconnecting in the background) and the
    /// default [`Config`].
    pub async fn connect(url: &str) -> Result<Throttle, Error> {
        Throttle::connect_with(url, Config::default()).await
    }

    /// Connects to `url` and detects the module or the twin, within `config.connect_timeout`:
    /// a server that is down, refuses connections or does not answer (paused) is
    /// [`Error::Connect`] when that time is up, never a wait for ever. To start while the
    /// server is down instead, see [`Throttle::connect_degraded`].
    pub async fn connect_with(url: &str, config: Config) -> Result<Throttle, Error> {
        let client = redis::Client::open(url).map_err(Error::Connect)?;
        let link = match tokio::time::timeout(config.connect_timeout, link(&client, config)).await {
            Ok(link) => link?,
            Err(_) => return Err(Error::Connect(not_within(config.connect_timeout))),
        };
        tracing::info!(backend = ?link.backend, "redis-throttle: connected");
        let throttle = Throttle::build(Some(link), Some(client), config);
        Ok(throttle)
    }

    /// Returns at once, connected or not: until the server at `url` first answers (and the
    /// module or the twin is detected), every call is answered by `config.failure` (marked
    /// degraded, reason [`Reason::Connection`]) and [`Throttle::backend`] is
    /// [`Backend::Unknown`]. A background task tries to connect every
    /// `config.breaker.probe_interval` (each try bounded by `config.connect_timeout`) for as
    /// long as a clone of the client lives. For a service that must start while Redis is down.
    /// Only a malformed `url` is an error.
    pub fn connect_degraded(url: &str, config: Config) -> Result<Throttle, Error> {
        Throttle::connect_degraded_client(redis::Client::open(url).map_err(Error::Connect)?, config)
    }

    /// [`Throttle::connect_degraded`] with a `redis::Client` the caller built (TLS certificates
    /// of its own: `redis::Client::build_with_tls`).
    pub fn connect_degraded_client(client: redis::Client, config: Config) -> Result<Throttle, Error> {
        let throttle = Throttle::build(None, Some(client.clone()), config);
        let weak = Arc::downgrade(&throttle.inner);
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| Error::Invalid(format!("connect_degraded needs a tokio runtime: {e}")))?;
        runtime.spawn(connect_in_background(weak, client, config));
        Ok(throttle)
    }

    /// Uses a multiplexed connection the caller already has.
    pub async fn from_multiplexed(conn: MultiplexedConnection, config: Config) -> Result<Throttle, Error> {
        Throttle::with_conn(Conn::Multiplexed(conn), config).await
    }

    /// Uses a connection manager the caller already has.
    pub async fn from_manager(conn: ConnectionManager, config: Config) -> Result<Throttle, Error> {
        Throttle::with_conn(Conn::Manager(conn), config).await
    }

    /// Uses a cluster connection: every call goes to the primary of its key's slot (CL.ALL to
    /// its first key's), and keys of one call in different slots are refused before sending.
    pub async fn from_cluster(conn: ClusterConnection, config: Config) -> Result<Throttle, Error> {
        Throttle::with_conn(Conn::Cluster(conn), config).await
    }

    /// [`Throttle::from_cluster`] with several cluster connections (each with its own
    /// connection to every node), each call sent on the next in turn.
    pub async fn from_clusters(conns: Vec<ClusterConnection>, config: Config) -> Result<Throttle, Error> {
        let mut conns: Vec<Conn> = conns.into_iter().map(Conn::Cluster).collect();
        let conn = match conns.len() {
            0 => return Err(Error::Invalid("from_clusters needs at least one connection".into())),
            1 => conns.remove(0),
            _ => Conn::Pool(conns.into(), Arc::new(AtomicUsize::new(0))),
        };
        Throttle::with_conn(conn, config).await
    }

    /// The test kit: no server, `redis-throttle-core` deciding exactly as the module does, at the
    /// times of `clock`.
    pub fn in_memory(clock: ManualClock, config: Config) -> Throttle {
        let store = Arc::new(Mutex::new(Store::new(config.local_keys)));
        Throttle::build(
            Some(Link { conn: Conn::Memory(store, Arc::new(clock)), backend: Backend::Memory }),
            None,
            config,
        )
    }

    pub(crate) fn build(link: Option<Link>, client: Option<redis::Client>, config: Config) -> Throttle {
        let memory = link.as_ref().is_some_and(|l| l.backend == Backend::Memory);
        let cache = (config.deny_cache > 0 && config.deny_cache_bytes > 0 && !memory)
            .then(|| DenyCache::new(config.deny_cache, config.deny_cache_bytes));
        let cell = OnceLock::new();
        if let Some(link) = link {
            let _ = cell.set(link);
        }
        let inner = Inner {
            link: cell,
            client,
            config,
            cache,
            breaker: Breaker::new(config.breaker, config.deadline),
            local: Mutex::new(Store::new(config.local_keys)),
            checking: AtomicBool::new(false),
        };
        Throttle { inner: Arc::new(inner), deadline: None }
    }

    /// This client (sharing everything with it) whose calls wait at most `deadline` when that is
    /// shorter than the configured one: for a caller with a deadline of its own (a gRPC
    /// request's). When it passes, the failure policy answers, as for the configured deadline.
    pub fn within(&self, deadline: Duration) -> Throttle {
        let shorter = deadline.min(self.deadline.unwrap_or(self.inner.config.deadline));
        Throttle { inner: self.inner.clone(), deadline: Some(shorter) }
    }

    /// How long this client's calls wait for the server.
    pub fn deadline(&self) -> Duration {
        self.deadline.unwrap_or(self.inner.config.deadline)
    }

    /// Detects what the server offers within `config.connect_timeout`.
    async fn with_conn(conn: Conn, config: Config) -> Result<Throttle, Error> {
        let backend = tokio::time::timeout(config.connect_timeout, detect(&conn, None))
            .await
            .map_err(|_| Error::Connect(not_within(config.connect_timeout)))??;
        tracing::info!(?backend, "redis-throttle: connected");
        Ok(Throttle::build(Some(Link { conn, backend }), None, config))
    }

    /// The module, the twin or the test kit; [`Backend::Unknown`] until a client made by
    /// [`Throttle::connect_degraded`] has reached its server.
    pub fn backend(&self) -> Backend {
        self.inner.link.get().map_or(Backend::Unknown, |l| l.backend)
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Whether calls go to a cluster (where one CL.ALL call keeps its keys in one hash slot).
    pub(crate) fn is_cluster(&self) -> bool {
        self.inner.link.get().is_some_and(|link| link.conn.is_cluster())
    }

    /// Whether the circuit breaker is open (calls answered by the failure policy).
    pub fn is_degraded(&self) -> bool {
        self.inner.breaker.is_open()
    }

    /// Denials the deny cache holds now.
    pub fn deny_cache_len(&self) -> usize {
        self.inner.cache.as_ref().map_or(0, DenyCache::len)
    }

    /// The deny cache's bound (entries); 0 when it is off.
    pub fn deny_cache_capacity(&self) -> usize {
        self.inner.cache.as_ref().map_or(0, DenyCache::capacity)
    }

    /// The bytes the deny cache holds now (its entries, their keys and its tables).
    pub fn deny_cache_bytes(&self) -> usize {
        self.inner.cache.as_ref().map_or(0, DenyCache::bytes)
    }

    /// Forgets every remembered denial: the next call of each key asks the server. For an
    /// operator's reset (`DEL` of a limiter key, a limit raised by hand): the cache otherwise
    /// keeps denying a key until the denial's `retry_after` ends.
    pub fn clear_deny_cache(&self) {
        if let Some(cache) = &self.inner.cache {
            cache.clear();
        }
    }

    /// Forgets the remembered denial of `key` under `policy`, if any (see
    /// [`Throttle::clear_deny_cache`]).
    pub fn forget_denial(&self, policy: &Policy, key: impl AsRef<[u8]>) {
        if let Some(cache) = &self.inner.cache {
            cache.forget(&policy.params(), key.as_ref());
        }
    }

    /// The test kit only: what `key` holds (its bytes and absolute expiry in Unix ms), exactly
    /// as the module would store it; `None` for a missing key or another backend.
    pub fn stored(&self, key: impl AsRef<[u8]>) -> Option<(Vec<u8>, Option<i64>)> {
        match self.inner.link.get().map(|l| &l.conn) {
            Some(Conn::Memory(store, clock)) => {
                store.lock().unwrap_or_else(|e| e.into_inner()).get(key.as_ref(), clock.now())
            }
            _ => None,
        }
    }

    /// Keys the `Local` failure policy holds now.
    pub fn local_len(&self) -> usize {
        self.inner.local.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Charges `quantity` units already used to `key` under `policy` (`DEBIT`; see
    /// [`Policy::debiting`]): counted whatever the limit says, the decision denied when they
    /// overdrew (the limiter is then over its limit: later checks are refused until time has
    /// repaid the overdraft). `quantity` 0 checks without writing. Never answered by the deny
    /// cache: a charge always reaches the server (or, degraded, the failure policy).
    pub async fn debit(&self, policy: &Policy, key: impl AsRef<[u8]>, quantity: u32) -> Result<Decision, Error> {
        self.decide(&[(&policy.debiting(), key.as_ref(), i64::from(quantity))], false).await
    }

    /// Charges every `(policy, key, quantity)` at one instant (`CL.ALL … DEBIT`): every limiter
    /// counts its units whether or not another overdrew; the decision is the binding one's (the
    /// overdrawn one with the longest wait, else the one with the fewest remaining). In a
    /// cluster every key must be in one hash slot.
    pub async fn debit_all(&self, calls: &[(&Policy, &[u8], u32)]) -> Result<Decision, Error> {
        let debiting: Vec<Policy> = calls.iter().map(|(p, _, _)| p.debiting()).collect();
        let calls: Vec<Call<'_>> = calls.iter().zip(&debiting).map(|(&(_, k, q), p)| (p, k, i64::from(q))).collect();
        self.decide(&calls, true).await
    }

    /// One unit of `key` under `policy`.
    pub async fn check(&self, policy: &Policy, key: impl AsRef<[u8]>) -> Result<Decision, Error> {
        self.check_n(policy, key, 1).await
    }

    /// `quantity` units of `key` under `policy`.
    pub async fn check_n(&self, policy: &Policy, key: impl AsRef<[u8]>, quantity: u32) -> Result<Decision, Error> {
        self.decide(&[(policy, key.as_ref(), i64::from(quantity))], false).await
    }

    /// The decision as if `key` were checked, consuming nothing.
    pub async fn peek(&self, policy: &Policy, key: impl AsRef<[u8]>) -> Result<Decision, Error> {
        self.decide(&[(policy, key.as_ref(), 0)], false).await
    }

    /// Gives `quantity` units back (never beyond full).
    pub async fn refund(&self, policy: &Policy, key: impl AsRef<[u8]>, quantity: u32) -> Result<Decision, Error> {
        self.decide(&[(policy, key.as_ref(), -i64::from(quantity))], false).await
    }

    /// Gives `quantity` units back, but never more than the limiter still holds of them: `held`
    /// is the instant (Unix ms) the limiter would have been full again right after the call that
    /// took them (`PEXPIRETIME key` then; see [`Throttle::check_held`]). A late refund gives
    /// back nothing the limiter has regained by time (`HELD t` of the commands).
    pub async fn refund_held(
        &self,
        policy: &Policy,
        key: impl AsRef<[u8]>,
        quantity: u32,
        held: i64,
    ) -> Result<Decision, Error> {
        let key = key.as_ref();
        let inner = &*self.inner;
        let quantity = -i64::from(quantity);
        // Nothing is given back while the server cannot be asked (the units stay taken: never more).
        let Some(link) = inner.link.get() else {
            return Err(Error::Invalid(format!("the refund was not sent: {NOT_CONNECTED}")));
        };
        if let Conn::Memory(store, clock) = &link.conn {
            let mut store = store.lock().unwrap_or_else(|e| e.into_inner());
            let held = redis_throttle_core::limiter::held(Some(held), quantity).map_err(Error::Memory)?;
            let limiter = policy.limiter();
            let (numbers, binding) =
                store.decide_held(&[(limiter, key, quantity)], &[held], clock.now(), false).map_err(Error::Memory)?;
            return Ok(Decision::new(numbers[binding], Source::Server));
        }
        let mut cmd = single_command(link.backend, policy, key, quantity);
        cmd.arg("HELD").arg(held);
        let decision = match self.request(cmd, key).await {
            Ok(value) => Decision::new(Numbers::from_reply(five(&value)?), Source::Server),
            Err(Failed::Refused(e)) => return Err(Error::Server(e)),
            // Nothing is given back while the server is down (the units stay taken: never more).
            Err(Failed::Down(reason)) => return Err(Error::Invalid(format!("the refund was not sent: {reason:?}"))),
        };
        if let Some(cache) = &inner.cache {
            cache.forget(&policy.params(), key);
        }
        Ok(decision)
    }

    /// Takes `quantity` units of `key` as [`Throttle::check_n`] does, and reads, atomically with
    /// the taking call (`MULTI`, the call, `PEXPIRETIME key`, `EXEC`), the instant (Unix ms) the
    /// limiter would be full again right after it: the `held` of a later
    /// [`Throttle::refund_held`]. `None` when the server took nothing (a denial, a degraded
    /// decision).
    pub async fn check_held(
        &self,
        policy: &Policy,
        key: impl AsRef<[u8]>,
        quantity: u32,
    ) -> Result<(Decision, Option<i64>), Error> {
        let (decision, held) = self.take_held(&[(policy, key.as_ref(), i64::from(quantity))], false).await?;
        Ok((decision, held.first().copied().flatten()))
    }

    /// [`Throttle::check_all`], reading each key's `held` (see [`Throttle::check_held`]) in the
    /// same `MULTI`/`EXEC`: one per call, in order, `None` where nothing was taken.
    pub async fn check_all_held(&self, calls: &[(&Policy, &[u8], u32)]) -> Result<(Decision, Vec<Option<i64>>), Error> {
        let calls: Vec<Call<'_>> = calls.iter().map(|&(p, k, q)| (p, k, i64::from(q))).collect();
        self.take_held(&calls, true).await
    }

    pub(crate) async fn take_held(&self, calls: &[Call<'_>], all: bool) -> Result<(Decision, Vec<Option<i64>>), Error> {
        let inner = &*self.inner;
        let &(first_policy, first_key, quantity) = first_of(calls)?;
        let Some(link) = inner.link.get() else {
            return Ok((self.fallback(calls, all, Reason::Connection(NOT_CONNECTED.into()))?, vec![None; calls.len()]));
        };
        if let Conn::Memory(store, clock) = &link.conn {
            let mut store = store.lock().unwrap_or_else(|e| e.into_inner());
            let now = clock.now();
            let decision = memory_decision(&mut store, calls, now, all, Source::Server)?;
            let charged = decision.allowed() || debits(calls);
            let held = calls
                .iter()
                .map(|&(_, key, _)| store.get(key, now).and_then(|(_, expiry)| expiry).filter(|_| charged))
                .collect();
            record(&decision);
            return Ok((decision, held));
        }
        let cross_slot =
            link.conn.is_cluster() && calls.iter().any(|(_, k, _)| Slot::for_key(k) != Slot::for_key(first_key));
        if cross_slot || (link.backend == Backend::Twin && calls.iter().any(|(p, _, _)| p.named_zone().is_some())) {
            // Refused as `check` and `check_all` refuse them.
            return self.decide(calls, all).await.map(|d| (d, vec![None; calls.len()]));
        }
        let mut pipe = redis::pipe();
        let cmd = if all {
            all_command(link.backend, calls)
        } else {
            single_command(link.backend, first_policy, first_key, quantity)
        };
        let name = command_name(&cmd);
        pipe.atomic().add_command(cmd);
        for (_, key, _) in calls {
            pipe.cmd("PEXPIRETIME").arg(*key);
        }
        let sent = self.request_pipe(pipe, &name, first_key).await;
        let (decision, held) = match sent {
            Ok(Value::Array(items)) if items.len() == 1 + calls.len() => {
                let decision = if all {
                    all_decision(&items[0], calls.len())?
                } else {
                    Decision::new(Numbers::from_reply(five(&items[0])?), Source::Server)
                };
                // A debit counts its units even when they overdrew.
                let charged = !decision.is_degraded() && (decision.allowed() || debits(calls));
                let held = items[1..].iter().map(|v| integer(v).filter(|&ms| ms >= 0 && charged)).collect();
                (decision, held)
            }
            Ok(Value::Array(items)) if matches!(items.first(), Some(Value::ServerError(_))) => {
                let Some(Value::ServerError(e)) = items.into_iter().next() else { unreachable!("matched above") };
                return Err(Error::Server(e.into()));
            }
            Ok(other) => {
                return Err(Error::Invalid(format!("expected the call's reply and PEXPIRETIME, got {other:?}")));
            }
            Err(Failed::Refused(e)) => return Err(Error::Server(e)),
            Err(Failed::Down(reason)) => (self.fallback(calls, all, reason)?, vec![None; calls.len()]),
        };
        record(&decision);
        Ok((decision, held))
    }

    /// Several limiters decided at one instant, all or nothing (`CL.ALL … DETAILS`): the
    /// decision is the binding policy's, `binding` its index, `each` every policy's numbers.
    /// In a cluster every key must be in one hash slot.
    pub async fn check_all(&self, calls: &[(&Policy, &[u8], u32)]) -> Result<Decision, Error> {
        let calls: Vec<Call<'_>> = calls.iter().map(|&(p, k, q)| (p, k, i64::from(q))).collect();
        self.decide(&calls, true).await
    }

    pub(crate) async fn decide(&self, calls: &[Call<'_>], all: bool) -> Result<Decision, Error> {
        let decision = self.decide_unrecorded(calls, all).await?;
        record(&decision);
        Ok(decision)
    }

    async fn decide_unrecorded(&self, calls: &[Call<'_>], all: bool) -> Result<Decision, Error> {
        let inner = &*self.inner;
        let &(first_policy, first_key, quantity) = first_of(calls)?;
        if all {
            one_charge(calls)?;
        }
        let Some(link) = inner.link.get() else {
            return self.fallback(calls, all, Reason::Connection(NOT_CONNECTED.into()));
        };
        if let Conn::Memory(store, clock) = &link.conn {
            let mut store = store.lock().unwrap_or_else(|e| e.into_inner());
            return memory_decision(&mut store, calls, clock.now(), all, Source::Server);
        }
        if link.conn.is_cluster()
            && let Some(&(_, other, _)) = calls.iter().find(|(_, k, _)| Slot::for_key(k) != Slot::for_key(first_key))
        {
            return Err(Error::CrossSlot { first: first_key.to_vec(), other: other.to_vec() });
        }
        if link.backend == Backend::Twin
            && let Some((policy, zone)) = calls.iter().find_map(|(p, _, _)| p.named_zone().map(|z| (p, z)))
        {
            return Err(Error::Invalid(format!(
                "policy \"{policy}\" follows the time zone {zone}, but the server runs the Functions twin, which has no time zone database: give the quota a fixed offset (tz +01:00) or load the module"
            )));
        }
        let single = calls.len() == 1 && !all;
        // A debit is never answered by the deny cache: a charge always reaches the server.
        if single
            && quantity > 0
            && !first_policy.debits()
            && let Some(cache) = &inner.cache
            && let Some(numbers) = cache.lookup(&first_policy.params(), first_key, quantity, std::time::Instant::now())
        {
            return Ok(Decision::new(numbers, Source::DenyCache));
        }
        let cmd = if single {
            single_command(link.backend, first_policy, first_key, quantity)
        } else {
            all_command(link.backend, calls)
        };
        let sent = std::time::Instant::now();
        let value = match self.request(cmd, first_key).await {
            Ok(value) => value,
            Err(Failed::Refused(e)) => return Err(Error::Server(e)),
            Err(Failed::Down(reason)) => return self.fallback(calls, all, reason),
        };
        let decision = if single {
            Decision::new(Numbers::from_reply(five(&value)?), Source::Server)
        } else {
            all_decision(&value, calls.len())?
        };
        if single && let Some(cache) = &inner.cache {
            if quantity > 0 {
                cache.insert(&first_policy.params(), first_key, quantity, sent, &decision.numbers());
            } else if quantity < 0 {
                cache.forget(&first_policy.params(), first_key);
            }
        }
        Ok(decision)
    }

    /// Sends `cmd` (routed by `key` in a cluster) within the deadline, through the breaker,
    /// inside a `tracing` span `redis_throttle.call` (debug level) with the command's name, and
    /// its `outcome` (`ok`, `refused`, `connection`, `timeout`, `breaker_open`) recorded.
    pub(crate) async fn request(&self, cmd: Cmd, key: &[u8]) -> Result<Value, Failed> {
        let span =
            tracing::debug_span!("redis_throttle.call", command = %command_name(&cmd), outcome = tracing::field::Empty);
        let (result, outcome) = self.guarded(key, |conn| send(conn, cmd, key)).instrument(span.clone()).await;
        span.record("outcome", outcome);
        result
    }

    /// [`Throttle::request`] for an atomic pipeline (`MULTI` … `EXEC`) on `key`: its `EXEC` reply.
    async fn request_pipe(&self, pipe: redis::Pipeline, name: &str, key: &[u8]) -> Result<Value, Failed> {
        let span = tracing::debug_span!("redis_throttle.call", command = %name, outcome = tracing::field::Empty);
        let (result, outcome) =
            self.guarded(key, |conn| send_pipe(conn, pipe, key, true)).instrument(span.clone()).await;
        span.record("outcome", outcome);
        result
    }

    /// Sends what `send` sends on the connection, within the deadline, through the breaker.
    ///
    /// Only the server's failures count toward the breaker: a connection error, or no answer
    /// within `Config::server_timeout`. A deadline shorter than that cannot tell a silent
    /// server from a burst queued in this process or on the connection: the call gets the
    /// failure policy's answer, the breaker is not told, and one `PING` on the connection
    /// (routed as the call was; one at a time) asks whether the server answers within
    /// `server_timeout`: only its silence opens the breaker. So a burst never cuts a healthy
    /// server off, and a paused one is found within `server_timeout`.
    pub(crate) async fn guarded<'a, F>(
        &'a self,
        key: &[u8],
        send: impl FnOnce(&'a Conn) -> F,
    ) -> (Result<Value, Failed>, &'static str)
    where
        F: std::future::Future<Output = redis::RedisResult<Value>> + 'a,
    {
        let inner = &*self.inner;
        let Some(link) = inner.link.get() else {
            return (Err(Failed::Down(Reason::Connection(NOT_CONNECTED.into()))), "connection");
        };
        // A guard: if this future is dropped while it is the breaker's probe, the probe's turn
        // goes back (the next call probes) instead of leaving the breaker open for ever.
        let probe = inner.breaker.permit();
        if probe.permit == Permit::Skip {
            return (Err(Failed::Down(Reason::BreakerOpen)), "breaker_open");
        }
        let sent = std::time::Instant::now();
        let deadline = self.deadline();
        match tokio::time::timeout(deadline, send(&link.conn)).await {
            Ok(Ok(value)) => {
                metrics::histogram!("throttle_client_server_latency_seconds").record(sent.elapsed().as_secs_f64());
                probe.success();
                (Ok(value), "ok")
            }
            Ok(Err(e)) if !is_outage(&e) => {
                probe.success();
                (Err(Failed::Refused(e)), "refused")
            }
            Ok(Err(e)) => {
                probe.failure();
                (Err(Failed::Down(Reason::Connection(e.to_string()))), "connection")
            }
            Err(_) if deadline < inner.config.server_timeout => {
                // Overload or silence: a probe's turn goes back, and the server is asked.
                drop(probe);
                self.check_liveness(key);
                (Err(Failed::Down(Reason::Timeout)), "timeout")
            }
            Err(_) => {
                probe.failure();
                (Err(Failed::Down(Reason::Timeout)), "timeout")
            }
        }
    }

    /// Asks the server (a `PING` routed by `key`, in the background) whether it answers within
    /// `server_timeout`; if not, opens the breaker. One check at a time.
    fn check_liveness(&self, key: &[u8]) {
        let inner = &self.inner;
        if inner.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            inner.checking.store(false, Ordering::Release);
            return;
        };
        let (inner, key) = (self.inner.clone(), key.to_vec());
        runtime.spawn(async move {
            if let Some(link) = inner.link.get() {
                let ping = send(&link.conn, redis::cmd("PING"), &key);
                let silent = match tokio::time::timeout(inner.config.server_timeout, ping).await {
                    Ok(Ok(_)) => false,
                    Ok(Err(e)) => is_outage(&e),
                    Err(_) => true,
                };
                if silent {
                    inner.breaker.trip();
                }
            }
            inner.checking.store(false, Ordering::Release);
        });
    }

    /// Sends `cmd` on the shared connection with no deadline or breaker (the caller bounds it).
    pub(crate) async fn send_shared(&self, cmd: Cmd, key: &[u8]) -> redis::RedisResult<Value> {
        match self.inner.link.get() {
            Some(link) => send(&link.conn, cmd, key).await,
            None => Err(RedisError::from((redis::ErrorKind::Io, NOT_CONNECTED))),
        }
    }

    /// Sends `cmd` to any node (a cluster's random primary) within the deadline.
    pub(crate) async fn send_any(&self, cmd: Cmd) -> Result<Value, Error> {
        let Some(link) = self.inner.link.get() else { return Err(Error::Invalid(NOT_CONNECTED.into())) };
        match tokio::time::timeout(self.inner.config.deadline, send_any(&link.conn, cmd)).await {
            Ok(r) => r.map_err(Error::Server),
            Err(_) => Err(Error::Invalid("no reply within the deadline".into())),
        }
    }

    /// The `redis::Client` a URL made (for connections of their own), if any.
    pub(crate) fn url_client(&self) -> Option<redis::Client> {
        self.inner.client.clone()
    }

    /// A new connection of its own, for a blocking call (never the shared one).
    pub(crate) async fn blocking_connection(&self) -> Result<MultiplexedConnection, Error> {
        let client = self.inner.client.as_ref().ok_or_else(|| {
            Error::Invalid(
                "blocking calls need a client made by Throttle::connect (a URL to open their own connection)".into(),
            )
        })?;
        // No response timeout of the redis crate's (500 ms by default): a blocked CL.PACE waits
        // up to its MAXWAIT by design, and `pace` bounds it by MAXWAIT plus the deadline.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.inner.config.deadline))
            .set_response_timeout(None);
        client.get_multiplexed_async_connection_with_config(&config).await.map_err(Error::Connect)
    }

    /// The failure policy's answer, marked degraded with `reason`.
    pub(crate) fn fallback(&self, calls: &[Call<'_>], all: bool, reason: Reason) -> Result<Decision, Error> {
        let inner = &*self.inner;
        let failure = inner.config.failure;
        tracing::debug!(?reason, ?failure, "redis-throttle: degraded decision");
        let policy = calls[0].0;
        match failure {
            FailurePolicy::FailClosed => {
                Ok(Decision::degraded(policy, false, inner.breaker.config().probe_interval, reason, failure))
            }
            FailurePolicy::FailOpen => Ok(Decision::degraded(policy, true, Duration::ZERO, reason, failure)),
            FailurePolicy::Local { share } => {
                let divided = calls
                    .iter()
                    .map(|(p, _, _)| p.divided(share))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| Error::Invalid(e.to_string()))?;
                let local: Vec<Call<'_>> = divided.iter().zip(calls).map(|(p, &(_, k, q))| (p, k, q)).collect();
                let mut store = inner.local.lock().unwrap_or_else(|e| e.into_inner());
                memory_decision(
                    &mut store,
                    &local,
                    SystemClock.now(),
                    all,
                    Source::Degraded { reason, policy: failure },
                )
            }
        }
    }
}

/// [`Throttle::connect_degraded`]'s connect: tries every probe interval (each try bounded by
/// the connect timeout) until the server answers, while the client lives.
async fn connect_in_background(weak: Weak<Inner>, client: redis::Client, config: Config) {
    let pause = config.breaker.probe_interval.max(Duration::from_millis(10));
    loop {
        if weak.strong_count() == 0 {
            return;
        }
        match tokio::time::timeout(config.connect_timeout, link(&client, config)).await {
            Ok(Ok(found)) => {
                let Some(inner) = weak.upgrade() else { return };
                tracing::info!(backend = ?found.backend, "redis-throttle: connected (started degraded)");
                let _ = inner.link.set(found);
                return;
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "redis-throttle: cannot connect yet; the failure policy answers"),
            Err(_) => {
                tracing::debug!(timeout = ?config.connect_timeout, "redis-throttle: no connection yet; the failure policy answers")
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// Counts a decision through the `metrics` facade (a no-op until the application installs a
/// recorder): `throttle_client_allowed_total`, `…_denied_total` (never-admitted included),
/// `…_deny_cache_hits_total`, `…_degraded_total`.
pub(crate) fn record(decision: &Decision) {
    if decision.allowed() {
        metrics::counter!("throttle_client_allowed_total").increment(1);
    } else {
        metrics::counter!("throttle_client_denied_total").increment(1);
    }
    match decision.source {
        Source::Server => {}
        Source::DenyCache => metrics::counter!("throttle_client_deny_cache_hits_total").increment(1),
        Source::Degraded { .. } => metrics::counter!("throttle_client_degraded_total").increment(1),
    }
}

/// Decides calls with `redis-throttle-core` in `store` (the test kit, or the `Local` failure policy).
pub(crate) fn memory_decision(
    store: &mut Store,
    calls: &[Call<'_>],
    now: CoreInstant,
    all: bool,
    source: Source,
) -> Result<Decision, Error> {
    let limiters: Vec<_> = calls.iter().map(|(p, k, q)| (p.limiter(), *k, *q)).collect();
    // A refund is never a debit (DEBIT takes 0 or more); a call of several debits them all or
    // none (checked before).
    let charge = redis_throttle_core::Charge::of(debits(calls));
    let (numbers, binding) = store.decide_charged(&limiters, &[], now, all, charge).map_err(Error::Memory)?;
    let mut decision = Decision::new(numbers[binding], source);
    if all {
        decision.binding = binding;
        decision.each = numbers;
    }
    Ok(decision)
}

/// Whether every limiter of a call debits (a refund never does).
pub(crate) fn debits(calls: &[Call<'_>]) -> bool {
    calls.iter().all(|(p, _, q)| p.debits() && *q >= 0)
}

/// `CL.ALL` takes `DEBIT` for the whole call: every policy debits, or none.
pub(crate) fn one_charge(calls: &[Call<'_>]) -> Result<(), Error> {
    if calls.iter().any(|(p, _, q)| p.debits() && *q >= 0) && !debits(calls) {
        return Err(Error::Invalid(
            "one call of several limiters either debits them all or takes from them all (CL.ALL's DEBIT is one word for the whole call): make every policy debit, or none, or use check_each".into(),
        ));
    }
    Ok(())
}

/// The first limiter of a call, or why the call is refused before sending (none, or more than
/// CL.ALL takes).
fn first_of<'c, 'a>(calls: &'c [Call<'a>]) -> Result<&'c Call<'a>, Error> {
    if calls.len() > redis_throttle_core::all::MAX_KEYS {
        return Err(Error::Invalid(format!("check_all takes at most {} policies", redis_throttle_core::all::MAX_KEYS)));
    }
    calls.first().ok_or_else(|| Error::Invalid("check_all needs at least one policy".into()))
}
