//! One file per command. Each is thin: parse a typed request, read the keys, let the pure
//! algorithms decide, apply the effects, reply.

mod acquire;
mod all;
mod bucket;
mod counter;
mod debug;
mod pace;
mod release;
mod throttle;
mod window;

use throttle_core::Result;
use throttle_core::limiter::{Algorithm, Request};

use crate::clock;
use crate::dispatch::{Call, Response};
use crate::register::Registered;
use crate::store::Key;

/// Every command the module registers, in order.
pub static ALL: [&Registered; 8] = [
    &throttle::COMMAND,
    &window::COMMAND,
    &bucket::COMMAND,
    &counter::COMMAND,
    &all::COMMAND,
    &pace::COMMAND,
    &acquire::COMMAND,
    &release::COMMAND,
];
/// Registered only when the module is loaded with `DEBUG-COMMANDS yes`.
pub static DEBUG: &Registered = &debug::COMMAND;

/// A single-limiter command (`CL.THROTTLE`, `CL.WINDOW`, `CL.BUCKET`, `CL.COUNTER`): parse,
/// read the key, decide, apply, reply.
fn limiter(call: &Call, algorithm: Algorithm) -> Result<Response> {
    let request = Request::parse(algorithm, &call.args())?;
    let now = clock::now();
    let mut key = Key::open(call, 0)?;
    key.load(algorithm)?;
    let decision = request.limiter.decide(key.stored(), now, request.quantity)?;
    let prepared = key.prepare(&decision.effect)?;
    key.apply(prepared)?;
    Ok(Response::Five(decision.reply.to_array(request.unit)))
}
