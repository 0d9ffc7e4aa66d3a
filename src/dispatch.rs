//! The boundary between Redis and a command: arguments in, one reply out, and no panic
//! ever crossing into the server (an unwinding panic would abort redis-server).

use std::ffi::CString;
use std::os::raw::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};
use throttle_core::{Error, Result};

/// One invocation: the context and the raw arguments (`argv[0]` is the command name).
pub struct Call<'a> {
    pub ctx: *mut RedisModuleCtx,
    argv: &'a [*mut RedisModuleString],
}

impl<'a> Call<'a> {
    /// The arguments after the command name, as byte strings (binary safe), on the stack:
    /// no command takes more than `MAX_ARGS`, and one more is kept so that parsing still
    /// sees "too many".
    pub fn args(&self) -> Args<'a> {
        let mut args = Args { items: [&[]; MAX_ARGS + 1], len: 0 };
        for (slot, &s) in args.items.iter_mut().zip(self.argv.iter().skip(1)) {
            *slot = bytes(s);
            args.len += 1;
        }
        args
    }

    /// The key name as Redis holds it (argument 1; arity guarantees it exists).
    pub fn key_name(&self) -> Result<*mut RedisModuleString> {
        self.argv.get(1).copied().ok_or(Error::Internal("missing key argument".into()))
    }
}

/// The most arguments (after the command name) any command accepts.
pub const MAX_ARGS: usize = 8;

pub struct Args<'a> {
    items: [&'a [u8]; MAX_ARGS + 1],
    len: usize,
}

impl<'a> std::ops::Deref for Args<'a> {
    type Target = [&'a [u8]];
    fn deref(&self) -> &Self::Target {
        &self.items[..self.len]
    }
}

/// The bytes of a Redis string, borrowed for the duration of the call.
pub fn bytes<'a>(s: *const RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: argv strings live until the command returns; StringPtrLen never fails on them.
    let ptr = unsafe { raw::RedisModule_StringPtrLen.map_or(std::ptr::null(), |f| f(s, &mut len)) };
    if ptr.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(ptr.cast(), len) } }
}

pub type Handler = fn(&Call) -> Result<[i64; 5]>;

/// The C entry point Redis calls for a command.
pub type Entry = unsafe extern "C" fn(*mut RedisModuleCtx, *mut *mut RedisModuleString, c_int) -> c_int;

/// Makes the C entry point of a command from its handler.
macro_rules! entry {
    ($handler:expr) => {{
        unsafe extern "C" fn entry(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            $crate::dispatch::run(ctx, argv, argc, $handler)
        }
        entry
    }};
}
pub(crate) use entry;

/// Runs `handler` and sends its reply: five integers, or the error's text.
pub fn run(ctx: *mut RedisModuleCtx, argv: *mut *mut RedisModuleString, argc: c_int, handler: Handler) -> c_int {
    let argv: &[*mut RedisModuleString] = match usize::try_from(argc) {
        Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
        _ => &[],
    };
    let call = Call { ctx, argv };
    let outcome = catch_unwind(AssertUnwindSafe(|| handler(&call))).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string());
        Err(Error::Internal(what))
    });
    unsafe {
        match outcome {
            Ok(values) => {
                if let (Some(array), Some(int)) = (raw::RedisModule_ReplyWithArray, raw::RedisModule_ReplyWithLongLong) {
                    array(ctx, values.len() as _);
                    for v in values {
                        int(ctx, v);
                    }
                }
            }
            Err(e) => reply_error(ctx, &e),
        }
    }
    raw::Status::Ok as c_int
}

fn reply_error(ctx: *mut RedisModuleCtx, e: &Error) {
    // An error reply is one line: drop what would break the protocol.
    let text: String = e.to_string().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let text = CString::new(text).unwrap_or_else(|_| c"ERR internal error".to_owned());
    if let Some(reply) = unsafe { raw::RedisModule_ReplyWithError } {
        unsafe { reply(ctx, text.as_ptr()) };
    }
}
