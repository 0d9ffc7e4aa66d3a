//! `CL.COUNTER key limit window [quantity] [MS]`: fixed window counter, the cheapest limiter.

use throttle_core::limiter::FixedWindow;

use super::{Arg, LIMITER_FLAGS, Spec};

pub const SPEC: Spec = Spec {
    name: "cl.counter",
    flags: LIMITER_FLAGS,
    arity: -4,
    has_key: true,
    summary: c"Rate-limits with a fixed window: at most limit units per window, counted from the window's first action.",
    complexity: c"O(1)",
    args: &[Arg::KEY, Arg::integer(c"limit"), Arg::integer(c"window"), Arg::QUANTITY, Arg::MS],
    entry: crate::dispatch::entry!(super::run::<FixedWindow>),
};
