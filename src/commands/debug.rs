//! `CL.DEBUG`: only registered when the module is loaded with `DEBUG-COMMANDS yes`.
//! - `CL.DEBUG PANIC` panics inside a command on purpose, so tests can prove that a bug
//!   becomes an error reply and the server keeps serving.
//! - `CL.DEBUG CLOCK <unix-µs>` pins the instant every later call sees (`CL.DEBUG CLOCK OFF`
//!   unpins), so a test can compare the module with the Functions twin at one instant on
//!   every server (Redis 7.0 has no frozen command time). Replies five integers, the first
//!   the pinned instant (0 when unpinned).

use throttle_core::{Error, Result, args};

use super::{Arg, ArgKind, Spec};
use crate::dispatch::Call;

pub const SPEC: Spec = Spec {
    name: "cl.debug",
    flags: c"readonly fast",
    arity: -2,
    has_key: false,
    summary: c"Testing aid: PANIC panics inside the module (the server must survive); CLOCK pins the instant of every call.",
    complexity: c"O(1)",
    args: &[Arg { name: c"panic", kind: ArgKind::Token(c"PANIC"), optional: false }],
    entry: crate::dispatch::entry!(handler),
};

fn handler(call: &Call) -> Result<[i64; 5]> {
    match *call.args() {
        [sub] if sub.eq_ignore_ascii_case(b"PANIC") => panic!("CL.DEBUG PANIC was called"),
        [sub, off] if sub.eq_ignore_ascii_case(b"CLOCK") && off.eq_ignore_ascii_case(b"OFF") => {
            crate::clock::pin(None);
            Ok([0, 0, 0, 0, 0])
        }
        [sub, micros] if sub.eq_ignore_ascii_case(b"CLOCK") => {
            let micros = args::integer(micros)?;
            if micros <= 0 {
                return Err(Error::Syntax);
            }
            crate::clock::pin(Some(micros));
            Ok([micros, 0, 0, 0, 0])
        }
        _ => Err(Error::Syntax),
    }
}
