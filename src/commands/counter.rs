//! `CL.COUNTER key limit window [quantity] [MS]`: fixed window counter, the cheapest limiter.

use throttle_core::limiter::Algorithm;

use crate::dispatch::{Call, Response, entry};
use crate::register::Registered;

pub static COMMAND: Registered = Registered { table: Algorithm::Counter.command(), entry: entry!(handler, Algorithm::Counter.command()) };

fn handler(call: &Call) -> throttle_core::Result<Response> {
    super::limiter(call, Algorithm::Counter)
}
