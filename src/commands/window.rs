//! `CL.WINDOW key limit window [quantity] [MS] [PRECISION p]`: sliding window, exact (a log of
//! action times) or bucketed with `PRECISION`.

use redis_throttle_core::limiter::Algorithm;

use crate::dispatch::{Call, Response};
use crate::register::{Registered, registered};

pub static COMMAND: Registered = registered!(handler, Algorithm::Window.command());

fn handler(call: &Call) -> redis_throttle_core::Result<Response> {
    super::limiter(call, Algorithm::Window)
}
