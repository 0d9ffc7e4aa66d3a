//! `CL.QUOTA key limit PER unit [TZ zone] [ANCHOR instant] [QUANTITY q] [MS] [SHADOW]`: a
//! calendar quota (per minute, hour, day, ISO week, month or year, in a time zone).

use redis_throttle_core::limiter::Algorithm;

use crate::dispatch::{Call, Response};
use crate::register::{Registered, registered};

pub static COMMAND: Registered = registered!(handler, Algorithm::Quota.command());

fn handler(call: &Call) -> redis_throttle_core::Result<Response> {
    super::limiter(call, Algorithm::Quota)
}
