//! The circuit breaker: after `failures` failures in a row the client stops asking the server
//! and answers by its failure policy at once; every `probe_interval` one call probes the server,
//! and its success closes the breaker.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct BreakerConfig {
    /// Consecutive failures (timeouts, connection errors) that open the breaker.
    pub failures: u32,
    /// How long the breaker stays open before one call probes the server.
    pub probe_interval: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig { failures: 3, probe_interval: Duration::from_millis(500) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Ask the server.
    Call,
    /// Ask the server as the one probe of an open breaker.
    Probe,
    /// Do not ask: the breaker is open.
    Skip,
}

struct State {
    consecutive: u32,
    open_until: Option<Instant>,
    probing: bool,
}

pub(crate) struct Breaker {
    config: BreakerConfig,
    state: Mutex<State>,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Breaker {
        Breaker { config, state: Mutex::new(State { consecutive: 0, open_until: None, probing: false }) }
    }

    pub(crate) fn config(&self) -> BreakerConfig {
        self.config
    }

    pub(crate) fn permit(&self) -> Permit {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match s.open_until {
            None => Permit::Call,
            Some(until) if Instant::now() >= until && !s.probing => {
                s.probing = true;
                Permit::Probe
            }
            Some(_) => Permit::Skip,
        }
    }

    pub(crate) fn success(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.open_until.is_some() {
            tracing::info!("redis-throttle: the server answers again; circuit breaker closed");
        }
        *s = State { consecutive: 0, open_until: None, probing: false };
    }

    pub(crate) fn failure(&self, permit: Permit) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.consecutive = s.consecutive.saturating_add(1);
        if permit == Permit::Probe || (s.open_until.is_none() && s.consecutive >= self.config.failures.max(1)) {
            if s.open_until.is_none() {
                tracing::warn!(failures = s.consecutive, "redis-throttle: circuit breaker open");
            }
            s.open_until = Some(Instant::now() + self.config.probe_interval);
            s.probing = false;
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).open_until.is_some()
    }
}
