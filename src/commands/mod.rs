//! One file per command. Each is thin: parse a typed request, read the key, let the pure
//! algorithm decide, apply its effect, reply.

mod bucket;
mod counter;
mod debug;
mod throttle;
mod window;

use std::ffi::CStr;

/// A command as registered: its handler and what `COMMAND INFO` / `COMMAND DOCS` say of it.
pub struct Spec {
    pub name: &'static str,
    pub flags: &'static CStr,
    /// Redis arity: negative means "at least".
    pub arity: i32,
    /// Whether argument 1 is the limiter's key (every rate-limiting command).
    pub has_key: bool,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub args: &'static [Arg],
    /// The function Redis calls: `dispatch::entry!(handler)`.
    pub entry: crate::dispatch::Entry,
}

/// One documented argument.
pub struct Arg {
    pub name: &'static CStr,
    pub kind: ArgKind,
    pub optional: bool,
}

pub enum ArgKind {
    Key,
    Integer,
    /// A literal word such as `MS`.
    Token(&'static CStr),
    /// A word followed by an integer, such as `PRECISION p`.
    TokenInteger(&'static CStr),
}

/// Flags of every rate-limiting command: it writes, may grow memory, and runs in O(1)-ish time.
pub const LIMITER_FLAGS: &CStr = c"write deny-oom fast";

pub static ALL: [&Spec; 4] = [&throttle::SPEC, &window::SPEC, &bucket::SPEC, &counter::SPEC];
pub static DEBUG: &Spec = &debug::SPEC;
