//! `CL.COUNTER key limit window [quantity] [MS]`: fixed window counter, the cheapest limiter.

use redis_throttle_core::limiter::Algorithm;

use crate::dispatch::{Call, Response};
use crate::register::{Registered, registered};

pub static COMMAND: Registered = registered!(handler, Algorithm::Counter.command());

fn handler(call: &Call) -> redis_throttle_core::Result<Response> {
    super::limiter(call, Algorithm::Counter)
}
