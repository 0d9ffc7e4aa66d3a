//! `CL.BUCKET key capacity tokens interval [quantity] [MS]`: token bucket, whole-interval refills.

use redis_throttle_core::limiter::Algorithm;

use crate::dispatch::{Call, Response};
use crate::register::{Registered, registered};

pub static COMMAND: Registered = registered!(handler, Algorithm::Bucket.command());

fn handler(call: &Call) -> redis_throttle_core::Result<Response> {
    super::limiter(call, Algorithm::Bucket)
}
