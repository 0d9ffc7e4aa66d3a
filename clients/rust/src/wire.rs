//! The commands a client sends (the module's, or the Functions twin's `FCALL`s) and the
//! replies it reads back: the words on the wire, nothing about connections.

use redis::{Cmd, Value};
use redis_throttle_core::limiter::Algorithm;

use crate::decision::{Decision, Numbers, Source};
use crate::error::Error;
use crate::policy::{Params, Policy};

/// Which implementation of the limiters the server offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The module (`CL.THROTTLE` …).
    Module,
    /// The Functions twin (`FCALL cl_throttle` …).
    Twin,
    /// No server: `redis-throttle-core` in this process (the test kit).
    Memory,
    /// Not detected yet: a client made by [`Throttle::connect_degraded`](crate::Throttle::connect_degraded) whose server has not
    /// answered yet (its failure policy answers meanwhile).
    Unknown,
}

/// One limiter of a call: the policy, the key and the units.
pub(crate) type Call<'a> = (&'a Policy, &'a [u8], i64);

/// A command's name for its span: `CL.THROTTLE`, or the function an `FCALL` calls.
pub(crate) fn command_name(cmd: &Cmd) -> String {
    let mut args = cmd.args_iter().filter_map(|a| match a {
        redis::Arg::Simple(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    });
    match args.next() {
        Some(name) if name.eq_ignore_ascii_case("FCALL") => args.next().unwrap_or(name),
        Some(name) => name,
        None => String::new(),
    }
}

/// A policy's words after the key (times in ms), written straight into the command (this is
/// on every call's path: no intermediate strings).
fn push_params(cmd: &mut Cmd, policy: &Policy) {
    match policy.params() {
        Params::Throttle { max_burst, count, period_ms } => {
            cmd.arg(max_burst).arg(count).arg(period_ms);
        }
        Params::Window { limit, window_ms, precision_ms } => {
            cmd.arg(limit).arg(window_ms);
            if let Some(p) = precision_ms {
                cmd.arg("PRECISION").arg(p);
            }
        }
        Params::Bucket { capacity, tokens, interval_ms } => {
            cmd.arg(capacity).arg(tokens).arg(interval_ms);
        }
        Params::Counter { limit, window_ms } => {
            cmd.arg(limit).arg(window_ms);
        }
        Params::Quota(_) => {
            for word in policy.command().1 {
                cmd.arg(word);
            }
        }
    }
}

pub(crate) fn single_command(backend: Backend, policy: &Policy, key: &[u8], quantity: i64) -> Cmd {
    let algorithm = policy.algorithm();
    let mut cmd = match backend {
        Backend::Twin => {
            let mut c = redis::cmd("FCALL");
            let function = match algorithm {
                Algorithm::Throttle => "cl_throttle",
                Algorithm::Window => "cl_window",
                Algorithm::Bucket => "cl_bucket",
                Algorithm::Counter => "cl_counter",
                Algorithm::Quota => "cl_quota",
            };
            c.arg(function).arg(1);
            c
        }
        _ => redis::cmd(algorithm.command().name),
    };
    cmd.arg(key);
    push_params(&mut cmd, policy);
    // CL.QUOTA takes its quantity as an option (its positional words end with PER unit).
    if algorithm == Algorithm::Quota {
        cmd.arg("QUANTITY");
    }
    cmd.arg(quantity).arg("MS");
    // A refund is never a charge: DEBIT takes a quantity of 0 or more.
    if policy.debits() && quantity >= 0 {
        cmd.arg("DEBIT");
    }
    cmd
}

pub(crate) fn all_command(backend: Backend, calls: &[Call<'_>]) -> Cmd {
    let mut cmd = match backend {
        Backend::Twin => {
            let mut c = redis::cmd("FCALL");
            c.arg("cl_all");
            c
        }
        _ => redis::cmd("CL.ALL"),
    };
    cmd.arg(calls.len());
    for (_, key, _) in calls {
        cmd.arg(*key);
    }
    for (policy, _, quantity) in calls {
        cmd.arg(policy.command().0);
        push_params(&mut cmd, policy);
        cmd.arg("QUANTITY").arg(*quantity);
    }
    cmd.arg("MS").arg("DETAILS");
    // One word for the whole call (callers check that every policy debits, or none).
    if calls.iter().all(|(p, _, q)| p.debits() && *q >= 0) {
        cmd.arg("DEBIT");
    }
    cmd
}

pub(crate) fn integer(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

pub(crate) fn five(value: &Value) -> Result<[i64; 5], Error> {
    let bad = || Error::Invalid(format!("expected five integers, got {value:?}"));
    let Value::Array(items) = value else { return Err(bad()) };
    let mut out = [0; 5];
    for (slot, item) in out.iter_mut().zip(items.get(..5).ok_or_else(bad)?) {
        *slot = integer(item).ok_or_else(bad)?;
    }
    Ok(out)
}

/// CL.ALL … DETAILS: `[five of the binding limiter…, index, [[five]…]]`.
pub(crate) fn all_decision(value: &Value, count: usize) -> Result<Decision, Error> {
    let bad = || Error::Invalid(format!("expected CL.ALL's reply with DETAILS, got {value:?}"));
    let Value::Array(items) = value else { return Err(bad()) };
    let index = items.get(5).and_then(integer).ok_or_else(bad)?;
    let Some(Value::Array(details)) = items.get(6) else { return Err(bad()) };
    let each = details.iter().map(|d| five(d).map(Numbers::from_reply)).collect::<Result<Vec<_>, _>>()?;
    if each.len() != count {
        return Err(bad());
    }
    let mut decision = Decision::new(Numbers::from_reply(five(value)?), Source::Server);
    decision.binding = usize::try_from(index - 1).map_err(|_| bad())?;
    decision.each = each;
    Ok(decision)
}
