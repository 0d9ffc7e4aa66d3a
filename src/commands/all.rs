//! `CL.ALL numkeys key [key ...] spec [spec ...] [MS] [DETAILS]`: several limiters of any
//! algorithms at one instant, all or nothing.

use redis_throttle_core::all::{self, Request};
use redis_throttle_core::limiter::Write;
use redis_throttle_core::{Charge, Decision, Error, Result};

use crate::counters::Class;
use crate::dispatch::{Call, Node, Response};
use crate::operate;
use crate::register::{Registered, registered};
use crate::store::Key;
use crate::{clock, config};

pub static COMMAND: Registered = registered!(handler, &all::COMMAND);

fn handler(call: &Call) -> Result<Response> {
    let args = call.args();
    let request = Request::parse(&args, &config::caps())?;
    let now = clock::now();
    let mut keys = read_keys(call, &request)?;
    let stored: Vec<_> = keys.iter().map(Key::stored).collect();
    let mut outcome = all::decide_charge(&request.limiters, &request.held, &stored, now, request.unit, request.charge)?;
    drop(stored);
    let debit = request.charge == Charge::Debit && request.limiters.iter().any(|&(_, q)| q > 0);
    // A debit with the SHADOW option writes nothing (see `super::limiter`).
    if !(debit && request.shadow()) {
        write_keys(&mut keys, &outcome.decisions)?;
    }

    // The call counts once: denied when some limiter denied a take, overdrew a debit or
    // refused a check (see `Outcome::denied`), else as a peek when every quantity is 0, a
    // refund when none is positive, else admitted. A denial counts (sketch, `throttled`
    // event) each limiter that denied on its own.
    let (mut consumes, mut refunds) = (false, false);
    for &(_, q) in &request.limiters {
        consumes |= q > 0;
        refunds |= q < 0;
    }
    let quantity = match (consumes, refunds) {
        (true, _) => 1,
        (false, true) => -1,
        (false, false) => 0,
    };
    let denied = outcome.denied(&request.limiters);
    let shadow = denied && (config::shadow() || request.shadow());
    if denied {
        let limiters = outcome.decisions.iter().zip(&request.limiters).zip(&request.keys);
        for (i, ((d, &(_, q)), key)) in limiters.enumerate() {
            if d.reply.denies(q) {
                operate::denied(call, 1 + i, key);
            }
        }
    }
    call.count(Class::of(quantity, denied, shadow));
    if debit {
        call.count_debit();
    }
    if shadow {
        // Every reply of the call reads as admitted: the binding one and DETAILS.
        for d in &mut outcome.decisions {
            d.reply = d.reply.shadowed();
        }
    }

    let five = |reply: redis_throttle_core::Reply| reply.to_array(request.unit).map(Node::Integer);
    let index = i64::try_from(outcome.binding + 1).map_err(|_| Error::Internal("index".into()))?;
    let mut reply: Vec<Node> = five(outcome.reply()).into_iter().collect();
    reply.push(Node::Integer(index));
    if request.details {
        reply.push(Node::Array(
            outcome.decisions.iter().map(|d| Node::Array(five(d.reply).into_iter().collect())).collect(),
        ));
    }
    Ok(Response::Tree(Node::Array(reply)))
}

/// Every key of a call of CL.ALL's grammar (CL.ALL, CL.EACH), opened (distinct: the parser
/// refused a key given twice) and read before anything is decided.
pub(super) fn read_keys(call: &Call, request: &Request) -> Result<Vec<Key>> {
    let mut keys = Vec::with_capacity(request.keys.len());
    for (i, (limiter, _)) in request.limiters.iter().enumerate() {
        let mut key = Key::open(call, 1 + i)?;
        key.load(limiter.algorithm()).map_err(|e| e.in_limiter(i + 1))?;
        keys.push(key);
    }
    Ok(keys)
}

/// Applies each key's decided effect, every one checked before the first byte is written (so
/// an error writes nothing); several writes are replicated in one MULTI/EXEC, as the server
/// wraps a command's replicated writes.
pub(super) fn write_keys(keys: &mut [Key], decisions: &[Decision<Write>]) -> Result<()> {
    let prepared = keys
        .iter()
        .zip(decisions)
        .enumerate()
        .map(|(i, (key, d))| key.prepare(&d.effect).map_err(|e| e.in_limiter(i + 1)))
        .collect::<Result<Vec<_>>>()?;
    for (key, prepared) in keys.iter_mut().zip(prepared) {
        key.apply(prepared)?;
    }
    Ok(())
}
