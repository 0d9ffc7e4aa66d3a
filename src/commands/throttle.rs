//! `CL.THROTTLE key max_burst count period [quantity] [MS]`: GCRA, redis-cell compatible.

use redis_throttle_core::limiter::Algorithm;

use crate::dispatch::{Call, Response};
use crate::register::{Registered, registered};

pub static COMMAND: Registered = registered!(handler, Algorithm::Throttle.command());

fn handler(call: &Call) -> redis_throttle_core::Result<Response> {
    super::limiter(call, Algorithm::Throttle)
}
