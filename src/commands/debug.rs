//! `CL.DEBUG`: only registered when the module is loaded with `DEBUG-COMMANDS yes`.
//! - `CL.DEBUG PANIC` panics inside a command on purpose, so tests can prove that a bug
//!   becomes an error reply and the server keeps serving.
//! - `CL.DEBUG CLOCK <unix-µs>` pins the instant every later call sees (`CL.DEBUG CLOCK OFF`
//!   unpins), so a test can compare the module with the Functions twin at one instant on
//!   every server (Redis 7.0 has no frozen command time). Replies five integers, the first
//!   the pinned instant (0 when unpinned).

use redis_throttle_core::command::{Arg, ArgKind, Command, Keys};
use redis_throttle_core::{Error, Result, args};

use crate::dispatch::{Call, Response};
use crate::register::{Registered, registered};

static TABLE: Command = Command {
    name: "cl.debug",
    summary: "Testing aid: PANIC panics inside the module (the server must survive); CLOCK pins the instant of every call.",
    complexity: "O(1)",
    since: "1.0.0",
    flags: "readonly fast",
    acl_categories: "",
    keys: Keys::None,
    args: &[
        Arg { name: "panic", kind: ArgKind::Flag("PANIC"), optional: true, multiple: false },
        Arg { name: "clock", kind: ArgKind::Option("CLOCK"), optional: true, multiple: false },
    ],
};

pub static COMMAND: Registered = registered!(handler, &TABLE, uncounted);

fn handler(call: &Call) -> Result<Response> {
    match *call.args() {
        [sub] if sub.eq_ignore_ascii_case(b"PANIC") => panic!("CL.DEBUG PANIC was called"),
        [sub, off] if sub.eq_ignore_ascii_case(b"CLOCK") && off.eq_ignore_ascii_case(b"OFF") => {
            crate::clock::pin(None);
            Ok(Response::Five([0, 0, 0, 0, 0]))
        }
        [sub, micros] if sub.eq_ignore_ascii_case(b"CLOCK") => match args::integer(micros)? {
            micros if micros > 0 => {
                crate::clock::pin(Some(micros));
                Ok(Response::Five([micros, 0, 0, 0, 0]))
            }
            _ => Err(Error::Syntax),
        },
        _ => Err(Error::Syntax),
    }
}
