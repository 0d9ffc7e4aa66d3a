//! `CL.BUCKET key capacity tokens interval [quantity] [MS]`: token bucket, whole-interval refills.

use throttle_core::limiter::Algorithm;

use crate::dispatch::{Call, Response, entry};
use crate::register::Registered;

pub static COMMAND: Registered = Registered { table: Algorithm::Bucket.command(), entry: entry!(handler, Algorithm::Bucket.command()) };

fn handler(call: &Call) -> throttle_core::Result<Response> {
    super::limiter(call, Algorithm::Bucket)
}
