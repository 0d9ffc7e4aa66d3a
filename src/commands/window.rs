//! `CL.WINDOW key limit window [quantity] [MS] [PRECISION p]`: sliding window, exact (a log of
//! action times) or bucketed with `PRECISION`.

use throttle_core::limiter::Algorithm;

use crate::dispatch::{Call, Response, entry};
use crate::register::Registered;

pub static COMMAND: Registered = Registered { table: Algorithm::Window.command(), entry: entry!(handler, Algorithm::Window.command()) };

fn handler(call: &Call) -> throttle_core::Result<Response> {
    super::limiter(call, Algorithm::Window)
}
