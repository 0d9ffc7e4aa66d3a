//! `CL.WINDOW key limit window [quantity] [MS] [PRECISION p]`: sliding window, exact (a log of
//! action times) or bucketed with `PRECISION`.

use throttle_core::limiter::SlidingWindow;

use super::{Arg, ArgKind, LIMITER_FLAGS, Spec};

pub const SPEC: Spec = Spec {
    name: "cl.window",
    flags: LIMITER_FLAGS,
    arity: -4,
    has_key: true,
    summary: c"Rate-limits with a sliding window: at most limit units in any span of window (exact, or bucketed with PRECISION).",
    complexity: c"O(log limit + quantity); O(window / precision) with PRECISION",
    args: &[
        Arg::KEY,
        Arg::integer(c"limit"),
        Arg::integer(c"window"),
        Arg::QUANTITY,
        Arg::MS,
        Arg { name: c"precision", kind: ArgKind::TokenInteger(c"PRECISION"), optional: true },
    ],
    entry: crate::dispatch::entry!(super::run::<SlidingWindow>),
};
