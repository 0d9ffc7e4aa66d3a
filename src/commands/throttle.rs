//! `CL.THROTTLE key max_burst count period [quantity] [MS]`: GCRA, redis-cell compatible.

use throttle_core::limiter::Algorithm;

use crate::dispatch::{Call, Response, entry};
use crate::register::Registered;

pub static COMMAND: Registered = Registered { table: Algorithm::Throttle.command(), entry: entry!(handler, Algorithm::Throttle.command()) };

fn handler(call: &Call) -> throttle_core::Result<Response> {
    super::limiter(call, Algorithm::Throttle)
}
