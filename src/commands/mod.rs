//! One file per command. Each is thin: parse a typed request, read the keys, let the pure
//! algorithms decide, apply the effects, reply.

mod acquire;
mod all;
mod bucket;
mod counter;
mod debug;
mod each;
mod pace;
mod quota;
mod release;
mod throttle;
mod top;
mod window;

use redis_throttle_core::limiter::{Algorithm, Request};
use redis_throttle_core::{Charge, Result};

use crate::counters::Class;
use crate::dispatch::{Call, Response};
use crate::operate;
use crate::register::Registered;
use crate::store::Key;
use crate::{clock, config};

/// Every command the module registers, in order (`INFO throttle` lists the counted ones so).
pub static ALL: [&Registered; 11] = [
    &throttle::COMMAND,
    &window::COMMAND,
    &bucket::COMMAND,
    &counter::COMMAND,
    &all::COMMAND,
    &each::COMMAND,
    &pace::COMMAND,
    &acquire::COMMAND,
    &release::COMMAND,
    &top::COMMAND,
    &quota::COMMAND,
];
/// Registered only when the module is loaded with `DEBUG-COMMANDS yes`.
pub static DEBUG: &Registered = &debug::COMMAND;

/// A single-limiter command (`CL.THROTTLE`, `CL.WINDOW`, `CL.BUCKET`, `CL.COUNTER`): parse,
/// read the key, decide, apply, count, reply. Shadow mode changes only the reply of a denial:
/// what is stored is what enforcing stores.
fn limiter(call: &Call, algorithm: Algorithm) -> Result<Response> {
    // Every common call fits the stack; a longer one (CL.QUOTA's longest, with every option and
    // DEBIT, has 15 words) is read onto the heap, and one past the table gets its arity error.
    let mut stack = [const { std::mem::MaybeUninit::uninit() }; 12];
    let heap;
    let words: &[&[u8]] = match call.args_in(&mut stack) {
        Some(words) => words,
        None => {
            heap = call.args();
            &heap
        }
    };
    let request = Request::parse(algorithm, words, &config::caps())?;
    let now = clock::now();
    let mut key = Key::open(call, 0)?;
    key.load(algorithm)?;
    let decision = request.limiter.decide_charge(key.stored(), now, request.quantity, request.held, request.charge)?;
    // A debit with the SHADOW option writes nothing (it is tried, not charged); global shadow
    // mode stores what enforcing stores.
    let debit = request.charge == Charge::Debit && request.quantity > 0;
    if !(debit && request.shadow()) {
        let prepared = key.prepare(&decision.effect)?;
        key.apply(prepared)?;
    }
    let mut reply = decision.reply;
    // A refused take, an overdrawn debit and a refused check are denials; a refund never is.
    let denied = reply.denies(request.quantity);
    let shadow = denied && (config::shadow() || request.shadow());
    if denied {
        operate::denied(call, 0, request.key);
        if shadow {
            reply = reply.shadowed();
        }
    }
    call.count(Class::of(request.quantity, denied, shadow));
    if debit {
        call.count_debit();
    }
    Ok(Response::Five(reply.to_array(request.unit)))
}
