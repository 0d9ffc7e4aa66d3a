//! `CL.DEBUG PANIC`: only registered when the module is loaded with `DEBUG-COMMANDS yes`.
//! It panics inside a command on purpose, so tests can prove that a bug becomes an error
//! reply and the server keeps serving.

use throttle_core::{Error, Result};

use super::{Arg, ArgKind, Spec};
use crate::dispatch::Call;

pub const SPEC: Spec = Spec {
    name: "cl.debug",
    flags: c"readonly fast",
    arity: 2,
    has_key: false,
    summary: c"Testing aid: PANIC panics inside the module (the server must survive).",
    complexity: c"O(1)",
    args: &[Arg { name: c"panic", kind: ArgKind::Token(c"PANIC"), optional: false }],
    entry: crate::dispatch::entry!(handler),
};

fn handler(call: &Call) -> Result<[i64; 5]> {
    match *call.args() {
        [sub] if sub.eq_ignore_ascii_case(b"PANIC") => panic!("CL.DEBUG PANIC was called"),
        _ => Err(Error::Syntax),
    }
}
