//! `CL.WINDOW key limit window [quantity] [MS] [PRECISION p]`: sliding window, exact (a log of
//! action times) or bucketed with `PRECISION`.

use throttle_core::request::Window;
use throttle_core::kind::{self, Kind};
use throttle_core::window;

use super::{Arg, ArgKind, LIMITER_FLAGS, Spec};
use crate::clock;
use crate::dispatch::Call;
use crate::store::LimiterKey;

pub const SPEC: Spec = Spec {
    name: "cl.window",
    flags: LIMITER_FLAGS,
    arity: -4,
    has_key: true,
    summary: c"Rate-limits with a sliding window: at most limit units in any span of window (exact, or bucketed with PRECISION).",
    complexity: c"O(log limit + quantity); O(window / precision) with PRECISION",
    args: &[
        Arg { name: c"key", kind: ArgKind::Key, optional: false },
        Arg { name: c"limit", kind: ArgKind::Integer, optional: false },
        Arg { name: c"window", kind: ArgKind::Integer, optional: false },
        Arg { name: c"quantity", kind: ArgKind::Integer, optional: true },
        Arg { name: c"ms", kind: ArgKind::Token(c"MS"), optional: true },
        Arg { name: c"precision", kind: ArgKind::TokenInteger(c"PRECISION"), optional: true },
    ],
    entry: crate::dispatch::entry!(handler),
};

fn handler(call: &Call) -> throttle_core::Result<[i64; 5]> {
    let request = Window::parse(&call.args())?;
    let now = clock::now();
    let key = LimiterKey::open(call)?;
    let (params, quantity) = (&request.params, request.quantity);
    let decision = match key.value()? {
        Some(stored) => kind::read(Kind::Window, stored, |s| window::decide(Some(s), now, params, quantity))?,
        None => window::decide(None, now, params, quantity)?,
    };
    key.apply(decision.effect)?;
    Ok(decision.reply.to_array(request.unit))
}
