//! `CL.THROTTLE key max_burst count period [quantity] [MS]`: GCRA, redis-cell compatible.

use throttle_core::gcra;
use throttle_core::kind::{self, Kind};
use throttle_core::request::Throttle;

use super::{Arg, ArgKind, LIMITER_FLAGS, Spec};
use crate::dispatch::Call;
use crate::store::LimiterKey;
use crate::clock;

pub const SPEC: Spec = Spec {
    name: "cl.throttle",
    flags: LIMITER_FLAGS,
    arity: -5,
    has_key: true,
    summary: c"Rate-limits with GCRA (redis-cell compatible): admits max_burst+1 at once, then count per period.",
    complexity: c"O(1)",
    args: &[
        Arg { name: c"key", kind: ArgKind::Key, optional: false },
        Arg { name: c"max_burst", kind: ArgKind::Integer, optional: false },
        Arg { name: c"count", kind: ArgKind::Integer, optional: false },
        Arg { name: c"period", kind: ArgKind::Integer, optional: false },
        Arg { name: c"quantity", kind: ArgKind::Integer, optional: true },
        Arg { name: c"ms", kind: ArgKind::Token(c"MS"), optional: true },
    ],
    entry: crate::dispatch::entry!(handler),
};

fn handler(call: &Call) -> throttle_core::Result<[i64; 5]> {
    let args = call.args();
    let request = Throttle::parse(&args)?;
    let now = clock::now();
    let key = LimiterKey::open(call)?;
    let tat = key.value()?.map(|stored| kind::read(Kind::Throttle, stored, gcra::decode)).transpose()?;
    let decision = gcra::decide(tat, now, &request.params, request.quantity)?;
    key.apply(decision.effect.map(|tat| tat.as_nanos()))?;
    Ok(decision.reply.to_array(request.unit))
}
