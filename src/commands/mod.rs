//! One file per command. Each is thin: parse a typed request, read the key, let the pure
//! algorithm decide, apply its effect, reply.

mod bucket;
mod counter;
mod debug;
mod throttle;
mod window;

use std::ffi::CStr;

use throttle_core::Result;
use throttle_core::limiter::Limiter;

use crate::clock;
use crate::dispatch::Call;
use crate::store::{LimiterKey, Value};

/// Every rate-limiting command: parse a typed request, read the key, let the algorithm
/// decide, apply its effect, reply.
pub fn run<L: Limiter>(call: &Call) -> Result<[i64; 5]>
where
    L::Write: Value,
{
    let request = L::parse(&call.args())?;
    let now = clock::now();
    let key = LimiterKey::open(call)?;
    let decision = L::decide(key.stored(L::READS_EXPIRY)?, now, &request.params, request.quantity)?;
    key.apply(decision.effect)?;
    Ok(decision.reply.to_array(request.unit))
}

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

impl Arg {
    pub const KEY: Arg = Arg { name: c"key", kind: ArgKind::Key, optional: false };
    pub const QUANTITY: Arg = Arg { name: c"quantity", kind: ArgKind::Integer, optional: true };
    pub const MS: Arg = Arg { name: c"ms", kind: ArgKind::Token(c"MS"), optional: true };

    pub const fn integer(name: &'static CStr) -> Arg {
        Arg { name, kind: ArgKind::Integer, optional: false }
    }
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
