//! `CL.DEBUG PANIC`: only registered when the module is loaded with `DEBUG-COMMANDS yes`.
//! It panics inside a command on purpose, so tests can prove that a bug becomes an error
//! reply and the server keeps serving.

use throttle_core::command::{Arg, ArgKind, Command, Keys};
use throttle_core::{Error, Result};

use crate::dispatch::{Call, Response};
use crate::register::{Registered, registered};

static TABLE: Command = Command {
    name: "cl.debug",
    summary: "Testing aid: PANIC panics inside the module (the server must survive).",
    complexity: "O(1)",
    since: "1.0.0",
    flags: "readonly fast",
    acl_categories: "",
    keys: Keys::None,
    args: &[Arg { name: "panic", kind: ArgKind::Flag("PANIC"), optional: false, multiple: false }],
};

pub static COMMAND: Registered = registered!(handler, &TABLE, uncounted);

fn handler(call: &Call) -> Result<Response> {
    match *call.args() {
        [sub] if sub.eq_ignore_ascii_case(b"PANIC") => panic!("CL.DEBUG PANIC was called"),
        _ => Err(Error::Syntax),
    }
}
