//! `CL.BUCKET key capacity tokens interval [quantity] [MS]`: token bucket, whole-interval refills.

use throttle_core::bucket;
use throttle_core::kind::{self, Kind};
use throttle_core::request::Bucket;

use super::{Arg, ArgKind, LIMITER_FLAGS, Spec};
use crate::clock;
use crate::dispatch::Call;
use crate::store::LimiterKey;

pub const SPEC: Spec = Spec {
    name: "cl.bucket",
    flags: LIMITER_FLAGS,
    arity: -5,
    has_key: true,
    summary: c"Rate-limits with a token bucket: capacity tokens, refilled by tokens every whole interval.",
    complexity: c"O(1)",
    args: &[
        Arg { name: c"key", kind: ArgKind::Key, optional: false },
        Arg { name: c"capacity", kind: ArgKind::Integer, optional: false },
        Arg { name: c"tokens", kind: ArgKind::Integer, optional: false },
        Arg { name: c"interval", kind: ArgKind::Integer, optional: false },
        Arg { name: c"quantity", kind: ArgKind::Integer, optional: true },
        Arg { name: c"ms", kind: ArgKind::Token(c"MS"), optional: true },
    ],
    entry: crate::dispatch::entry!(handler),
};

fn handler(call: &Call) -> throttle_core::Result<[i64; 5]> {
    let request = Bucket::parse(&call.args())?;
    let now = clock::now();
    let key = LimiterKey::open(call)?;
    let state = match key.value()? {
        Some(stored) => Some(kind::read(Kind::Bucket, stored, |s| bucket::decode(s, key.expires_at_ms()?))?),
        None => None,
    };
    let decision = bucket::decide(state, now, &request.params, request.quantity)?;
    key.apply(decision.effect)?;
    Ok(decision.reply.to_array(request.unit))
}
