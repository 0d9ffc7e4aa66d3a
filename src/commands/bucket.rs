//! `CL.BUCKET key capacity tokens interval [quantity] [MS]`: token bucket, whole-interval refills.

use throttle_core::limiter::TokenBucket;

use super::{Arg, LIMITER_FLAGS, Spec};

pub const SPEC: Spec = Spec {
    name: "cl.bucket",
    flags: LIMITER_FLAGS,
    arity: -5,
    has_key: true,
    summary: c"Rate-limits with a token bucket: capacity tokens, refilled by tokens every whole interval.",
    complexity: c"O(1)",
    args: &[Arg::KEY, Arg::integer(c"capacity"), Arg::integer(c"tokens"), Arg::integer(c"interval"), Arg::QUANTITY, Arg::MS],
    entry: crate::dispatch::entry!(super::run::<TokenBucket>),
};
