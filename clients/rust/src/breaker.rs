//! The circuit breaker: after `failures` failures in a row the client stops asking the server
//! and answers by its failure policy at once; every `probe_interval` one call probes the server,
//! and its success closes the breaker.
//!
//! A probe is a [`Probe`] guard: a probe whose future is dropped before it learns anything (the
//! caller's own timeout, `select!`, an aborted task) gives its turn back when the guard drops, so
//! the next call probes. A probe older than [`Breaker::probe_deadline`] is also considered gone
//! (belt and braces: no path can leave the breaker without a prober).

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
    /// Ask the server as the one probe of an open breaker (its number, to tell it from a
    /// later probe once it has been given up).
    Probe(u64),
    /// Do not ask: the breaker is open.
    Skip,
}

struct State {
    consecutive: u32,
    open_until: Option<Instant>,
    /// The probe in flight: its number and when it started.
    probing: Option<(u64, Instant)>,
    next_probe: u64,
}

pub(crate) struct Breaker {
    config: BreakerConfig,
    /// How long a probe may run before another call may probe (the call deadline plus slack).
    probe_deadline: Duration,
    state: Mutex<State>,
}

/// The permit of one call; a probe's turn goes back to the breaker if the call ends without
/// reporting (its future dropped).
pub(crate) struct Probe<'a> {
    breaker: &'a Breaker,
    pub(crate) permit: Permit,
    reported: bool,
}

impl Probe<'_> {
    pub(crate) fn success(mut self) {
        self.reported = true;
        self.breaker.success();
    }

    pub(crate) fn failure(mut self) {
        self.reported = true;
        self.breaker.failure(self.permit);
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if let (false, Permit::Probe(n)) = (self.reported, self.permit) {
            // Cancelled while probing: the probe learned nothing; the next call probes.
            let mut s = self.breaker.lock();
            if s.probing.is_some_and(|(m, _)| m == n) {
                s.probing = None;
            }
        }
    }
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig, deadline: Duration) -> Breaker {
        let probe_deadline = deadline.saturating_mul(2).max(Duration::from_millis(100));
        Breaker {
            config,
            probe_deadline,
            state: Mutex::new(State { consecutive: 0, open_until: None, probing: None, next_probe: 0 }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn config(&self) -> BreakerConfig {
        self.config
    }

    /// The permit of a call about to be sent (or skipped).
    pub(crate) fn permit(&self) -> Probe<'_> {
        let permit = {
            let mut s = self.lock();
            let now = Instant::now();
            match s.open_until {
                None => Permit::Call,
                Some(until)
                    if now >= until
                        && s.probing.is_none_or(|(_, since)| now.duration_since(since) >= self.probe_deadline) =>
                {
                    let n = s.next_probe;
                    s.next_probe = n.wrapping_add(1);
                    s.probing = Some((n, now));
                    Permit::Probe(n)
                }
                Some(_) => Permit::Skip,
            }
        };
        Probe { breaker: self, permit, reported: false }
    }

    fn success(&self) {
        let mut s = self.lock();
        if s.open_until.is_some() {
            tracing::info!("redis-throttle: the server answers again; circuit breaker closed");
        }
        s.consecutive = 0;
        s.open_until = None;
        s.probing = None;
    }

    fn failure(&self, permit: Permit) {
        let mut s = self.lock();
        s.consecutive = s.consecutive.saturating_add(1);
        let own_probe = matches!(permit, Permit::Probe(n) if s.probing.is_some_and(|(m, _)| m == n));
        if own_probe || (s.open_until.is_none() && s.consecutive >= self.config.failures.max(1)) {
            if s.open_until.is_none() {
                tracing::warn!(failures = s.consecutive, "redis-throttle: circuit breaker open");
            }
            s.open_until = Some(Instant::now() + self.config.probe_interval);
            s.probing = None;
        }
    }

    /// Opens the breaker now (the server was found silent).
    pub(crate) fn trip(&self) {
        let mut s = self.lock();
        if s.open_until.is_none() {
            tracing::warn!("redis-throttle: the server did not answer within its timeout; circuit breaker open");
            s.consecutive = s.consecutive.max(self.config.failures);
            s.open_until = Some(Instant::now() + self.config.probe_interval);
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.lock().open_until.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_breaker(deadline: Duration) -> Breaker {
        let breaker = Breaker::new(BreakerConfig { failures: 1, probe_interval: Duration::ZERO }, deadline);
        let call = breaker.permit();
        assert_eq!(call.permit, Permit::Call);
        call.failure();
        assert!(breaker.is_open());
        breaker
    }

    #[test]
    fn a_dropped_probe_gives_its_turn_back() {
        let breaker = open_breaker(Duration::from_secs(60));
        let probe = breaker.permit();
        assert!(matches!(probe.permit, Permit::Probe(_)));
        assert_eq!(breaker.permit().permit, Permit::Skip, "one probe at a time");
        drop(probe); // its future was cancelled
        let next = breaker.permit();
        assert!(matches!(next.permit, Permit::Probe(_)), "the next call probes");
        next.success();
        assert!(!breaker.is_open());
    }

    #[test]
    fn a_probe_never_answered_is_given_up_after_its_deadline() {
        // A probe whose future is kept but never polled again (neither answered nor dropped).
        let breaker = open_breaker(Duration::from_millis(1));
        let stuck = breaker.permit();
        assert!(matches!(stuck.permit, Permit::Probe(_)));
        std::thread::sleep(Duration::from_millis(120));
        let next = breaker.permit();
        assert!(matches!(next.permit, Permit::Probe(_)), "another call probes");
        // The old probe's late report does not undo the new one's turn.
        drop(stuck);
        assert_eq!(breaker.permit().permit, Permit::Skip);
        next.failure();
        assert!(breaker.is_open());
    }
}
