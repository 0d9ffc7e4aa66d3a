//! What a call decided, with `Duration`s at millisecond precision and where the answer came from.

use std::time::Duration;

use crate::policy::Policy;

/// Whether the request may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Denied for now: the same request is admitted after `retry_after`.
    Denied {
        retry_after: Duration,
    },
    /// Refused forever: the request asks for more units than the limit (a full limiter) admits.
    Never,
}

/// Why a decision was not made by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// No reply within the call's deadline.
    Timeout,
    /// The connection failed (refused, reset, closed) or the server replied with an I/O-level error.
    Connection(String),
    /// The circuit breaker is open after repeated failures: the server was not asked.
    BreakerOpen,
}

/// How the client answers while the server cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Deny (the safe default for limits that protect something).
    FailClosed,
    /// Admit, marked degraded.
    FailOpen,
    /// Decide in this process with `redis-throttle-core`, the policy's rate divided by `share` (the
    /// number of instances; see [`crate::Policy::divided`]), so a degraded fleet of `share`
    /// admits at most the global rate (a share of `1/s` among 8 is one per 8 s).
    Local { share: u32 },
}

/// Where a decision came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The server (or the in-memory test backend, which makes the server's decisions).
    Server,
    /// The local deny cache: an earlier denial of the same policy and key still runs, so the
    /// server was not asked.
    DenyCache,
    /// The server could not answer; `policy` decided instead.
    Degraded { reason: Reason, policy: FailurePolicy },
}

/// One limiter's numbers, as its command replies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Numbers {
    pub verdict: Verdict,
    /// The most units a full limiter admits at once (`X-RateLimit-Limit`).
    pub limit: i64,
    /// Units that could still be admitted right now, after this call.
    pub remaining: i64,
    /// How long until the limiter is full again.
    pub reset_after: Duration,
}

impl Numbers {
    /// From a reply `[limited, limit, remaining, retry_after, reset_after]` in milliseconds.
    pub(crate) fn from_reply(reply: [i64; 5]) -> Numbers {
        let ms = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
        let verdict = match (reply[0], reply[3]) {
            (0, _) => Verdict::Allowed,
            (_, r) if r < 0 => Verdict::Never,
            (_, r) => Verdict::Denied { retry_after: ms(r) },
        };
        Numbers { verdict, limit: reply[1], remaining: reply[2], reset_after: ms(reply[4]) }
    }

    /// From `redis-throttle-core`'s reply (times in nanoseconds), rounded as the module's `MS` replies are.
    pub(crate) fn from_core(reply: &redis_throttle_core::Reply) -> Numbers {
        Numbers::from_reply(reply.to_array(redis_throttle_core::Unit::Millis))
    }
}

/// A decision: the binding limiter's numbers and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub limit: i64,
    pub remaining: i64,
    pub reset_after: Duration,
    pub source: Source,
    /// For [`crate::Throttle::check_all`]: the index of the binding policy (the denying one
    /// with the longest wait, or the admitting one with the fewest remaining), and every
    /// policy's own numbers. Empty for a single policy.
    pub binding: usize,
    pub each: Vec<Numbers>,
}

impl Decision {
    pub(crate) fn new(numbers: Numbers, source: Source) -> Decision {
        Decision {
            verdict: numbers.verdict,
            limit: numbers.limit,
            remaining: numbers.remaining,
            reset_after: numbers.reset_after,
            source,
            binding: 0,
            each: Vec::new(),
        }
    }

    pub fn allowed(&self) -> bool {
        self.verdict == Verdict::Allowed
    }

    /// The wait before the same request would be admitted, when it is denied for now.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.verdict {
            Verdict::Denied { retry_after } => Some(retry_after),
            _ => None,
        }
    }

    pub fn is_degraded(&self) -> bool {
        matches!(self.source, Source::Degraded { .. })
    }

    pub fn numbers(&self) -> Numbers {
        Numbers { verdict: self.verdict, limit: self.limit, remaining: self.remaining, reset_after: self.reset_after }
    }

    /// A decision the failure policy makes without the server (fail closed or open).
    pub(crate) fn degraded(
        policy: &Policy,
        allowed: bool,
        retry_after: Duration,
        reason: Reason,
        failure: FailurePolicy,
    ) -> Decision {
        let verdict = if allowed { Verdict::Allowed } else { Verdict::Denied { retry_after } };
        let numbers = Numbers { verdict, limit: policy.limit(), remaining: 0, reset_after: Duration::ZERO };
        Decision::new(numbers, Source::Degraded { reason, policy: failure })
    }
}
