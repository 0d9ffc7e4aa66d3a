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
    let mut cmd = specs_command(backend, "CL.ALL", "cl_all", calls);
    cmd.arg("DETAILS");
    cmd
}

/// `CL.EACH numkeys key… spec… MS`: the module's one command deciding several independent
/// limiters (all in one hash slot); its reply is one five-integer array per limiter.
pub(crate) fn each_command(calls: &[Call<'_>]) -> Cmd {
    specs_command(Backend::Module, "CL.EACH", "cl_each", calls)
}

/// A command of CL.ALL's grammar: `numkeys`, the keys, one spec per key, then `MS` (and `DEBIT`
/// when every limiter debits).
fn specs_command(backend: Backend, command: &str, function: &str, calls: &[Call<'_>]) -> Cmd {
    let mut cmd = match backend {
        Backend::Twin => {
            let mut c = redis::cmd("FCALL");
            c.arg(function);
            c
        }
        _ => redis::cmd(command),
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
    cmd.arg("MS");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Number(n) => Value::Int(n.as_i64().unwrap()),
            serde_json::Value::String(s) => Value::BulkString(s.clone().into_bytes()),
            serde_json::Value::Array(items) => Value::Array(items.iter().map(value).collect()),
            other => panic!("no reply of the vectors is {other}"),
        }
    }

    fn neutral(n: &Numbers) -> serde_json::Value {
        let (limited, retry) = match n.verdict {
            crate::Verdict::Allowed => (false, -1),
            crate::Verdict::Never => (true, -1),
            crate::Verdict::Denied { retry_after } => (true, retry_after.as_millis() as i64),
        };
        serde_json::json!({
            "limited": limited, "limit": n.limit, "remaining": n.remaining,
            "retry_after_ms": retry, "reset_after_ms": n.reset_after.as_millis() as i64,
        })
    }

    /// The shared vectors (tests/vectors/replies.json), as the npm and Python packages decode them.
    #[test]
    fn replies_decode_as_the_shared_vectors_say() {
        let vectors: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/vectors/replies.json")).unwrap();
        for v in vectors["decode"].as_array().unwrap() {
            let reply = value(&v["reply"]);
            let decoded = match v["what"].as_str().unwrap() {
                "five" => five(&reply).map(|r| neutral(&Numbers::from_reply(r))),
                _ => all_decision(&reply, v["count"].as_u64().unwrap() as usize).map(|d| {
                    let mut head = neutral(&Numbers::from_reply(five(&reply).unwrap()));
                    head["binding"] = d.binding.into();
                    head["details"] = d.each.iter().map(neutral).collect();
                    head
                }),
            };
            match v.get("error") {
                Some(_) => assert!(decoded.is_err(), "{}: {decoded:?}", v["reply"]),
                None => assert_eq!(decoded.unwrap(), v["decoded"], "{}", v["reply"]),
            }
        }
    }
}
