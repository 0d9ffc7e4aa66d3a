//! `CL.THROTTLE key max_burst count period [quantity] [MS]`: GCRA, redis-cell compatible.

use throttle_core::limiter::Gcra;

use super::{Arg, LIMITER_FLAGS, Spec};

pub const SPEC: Spec = Spec {
    name: "cl.throttle",
    flags: LIMITER_FLAGS,
    arity: -5,
    has_key: true,
    summary: c"Rate-limits with GCRA (redis-cell compatible): admits max_burst+1 at once, then count per period.",
    complexity: c"O(1)",
    args: &[Arg::KEY, Arg::integer(c"max_burst"), Arg::integer(c"count"), Arg::integer(c"period"), Arg::QUANTITY, Arg::MS],
    entry: crate::dispatch::entry!(super::run::<Gcra>),
};
