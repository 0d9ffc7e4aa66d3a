//! `CL.COUNTER key limit window [quantity] [MS]`: fixed window counter, the cheapest limiter.

use throttle_core::counter;
use throttle_core::kind::{self, Kind};
use throttle_core::request::Counter;

use super::{Arg, ArgKind, LIMITER_FLAGS, Spec};
use crate::clock;
use crate::dispatch::Call;
use crate::store::LimiterKey;

pub const SPEC: Spec = Spec {
    name: "cl.counter",
    flags: LIMITER_FLAGS,
    arity: -4,
    has_key: true,
    summary: c"Rate-limits with a fixed window: at most limit units per window, counted from the window's first action.",
    complexity: c"O(1)",
    args: &[
        Arg { name: c"key", kind: ArgKind::Key, optional: false },
        Arg { name: c"limit", kind: ArgKind::Integer, optional: false },
        Arg { name: c"window", kind: ArgKind::Integer, optional: false },
        Arg { name: c"quantity", kind: ArgKind::Integer, optional: true },
        Arg { name: c"ms", kind: ArgKind::Token(c"MS"), optional: true },
    ],
    entry: crate::dispatch::entry!(handler),
};

fn handler(call: &Call) -> throttle_core::Result<[i64; 5]> {
    let request = Counter::parse(&call.args())?;
    let now = clock::now();
    let key = LimiterKey::open(call)?;
    let state = match key.value()? {
        Some(stored) => Some(kind::read(Kind::Counter, stored, |s| counter::decode(s, key.expires_at_ms()?))?),
        None => None,
    };
    let decision = counter::decide(state, now, &request.params, request.quantity)?;
    key.apply(decision.effect)?;
    Ok(decision.reply.to_array(request.unit))
}
