//! The boundary between Redis and a command: arguments in, one reply out, and no panic
//! ever crossing into the server (an unwinding panic would abort redis-server).

use std::ffi::CString;
use std::mem::MaybeUninit;
use std::os::raw::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};
use redis_throttle_core::command::Keys;
use redis_throttle_core::{Error, Result};

use crate::api::api;
use crate::counters::{Class, Counters};

/// One invocation: the context, the raw arguments (`argv[0]` is the command name) and the
/// command's INFO counters.
pub struct Call<'a> {
    pub ctx: *mut RedisModuleCtx,
    argv: &'a [*mut RedisModuleString],
    counters: Option<&'static Counters>,
}

/// Arguments kept on the stack: every single-key command fits (CL.ALL may not).
const ON_STACK: usize = 16;

impl<'a> Call<'a> {
    /// The arguments after the command name, as byte strings (binary safe).
    #[inline(always)] // built in the caller's frame: no copy of the array when returned
    pub fn args(&self) -> Args<'a> {
        let words = self.argv.get(1..).unwrap_or(&[]);
        if words.len() > ON_STACK {
            return Args::Heap(words.iter().map(|&s| bytes(s)).collect());
        }
        let mut items = [&[][..]; ON_STACK];
        read_into(words, &mut items);
        Args::Stack(items, words.len())
    }

    /// The arguments after the command name in `buf`, filled where it lives (no copy of the
    /// array, as returning [`Args`] makes, and no slot written twice: the buffer starts
    /// uninitialized); `None` when there are more than `N`.
    #[inline(always)]
    pub fn args_in<'b, const N: usize>(&self, buf: &'b mut [MaybeUninit<&'a [u8]>; N]) -> Option<&'b [&'a [u8]]> {
        let words = self.argv.get(1..).unwrap_or(&[]);
        let buf = buf.get_mut(..words.len())?;
        let string_ptr_len = api().string_ptr_len;
        for (slot, &s) in buf.iter_mut().zip(words) {
            slot.write(bytes_with(string_ptr_len, s));
        }
        // SAFETY: the loop wrote every one of the `words.len()` slots (`buf` has exactly that
        // many), and `MaybeUninit<T>` has `T`'s layout.
        Some(unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<&'a [u8]>(), buf.len()) })
    }

    /// Argument `i` after the command name as Redis holds it (to open a key by its name).
    pub fn word(&self, i: usize) -> Result<*mut RedisModuleString> {
        self.argv.get(i + 1).copied().ok_or_else(|| Error::Internal(format!("no argument {i}")))
    }

    /// Counts this call's outcome in its command's INFO counters (once per call; errors are
    /// counted by `run`).
    pub fn count(&self, class: Class) {
        if let Some(counters) = self.counters {
            counters.count(class);
        }
    }

    /// Counts a debit (a call with `DEBIT` that charged units) in its command's INFO counters.
    pub fn count_debit(&self) {
        if let Some(counters) = self.counters {
            counters.count_debit();
        }
    }
}

// The large variant is the point: the hot path's arguments live on the stack, unboxed.
#[allow(clippy::large_enum_variant)]
pub enum Args<'a> {
    Stack([&'a [u8]; ON_STACK], usize),
    Heap(Vec<&'a [u8]>),
}

impl<'a> std::ops::Deref for Args<'a> {
    type Target = [&'a [u8]];
    fn deref(&self) -> &Self::Target {
        match self {
            Args::Stack(items, len) => &items[..*len],
            Args::Heap(items) => items,
        }
    }
}

/// The bytes of each of `words` (argument strings) in `slots`, as many as both hold (the API
/// pointer read once).
#[inline(always)]
fn read_into(words: &[*mut RedisModuleString], slots: &mut [&[u8]]) {
    let string_ptr_len = api().string_ptr_len;
    for (slot, &s) in slots.iter_mut().zip(words) {
        *slot = bytes_with(string_ptr_len, s);
    }
}

/// The bytes of a Redis string, borrowed for the duration of the call.
#[inline]
pub fn bytes<'a>(s: *const RedisModuleString) -> &'a [u8] {
    bytes_with(api().string_ptr_len, s)
}

/// The server's `RedisModule_StringPtrLen`.
type StringPtrLen = unsafe extern "C" fn(*const RedisModuleString, *mut usize) -> *const c_char;

/// `bytes`, with the server's `StringPtrLen` already at hand.
#[inline(always)]
fn bytes_with<'a>(string_ptr_len: StringPtrLen, s: *const RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: argv strings are valid until the command returns; StringPtrLen never fails on them.
    let ptr = unsafe { string_ptr_len(s, &mut len) };
    // SAFETY: `ptr` points at `len` bytes that live as long as the argument.
    if ptr.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(ptr.cast(), len) } }
}

/// What a command replies.
pub enum Response {
    /// A limiter's five integers (the hot path: no allocation).
    Five([i64; 5]),
    /// An array of several limiters' five integers (CL.EACH: no tree to build and free).
    Fives(Vec<[i64; 5]>),
    /// Anything else: arrays of integers and strings.
    Tree(Node),
    /// Nothing now: the handler blocked the client, whose reply comes later (CL.PACE BLOCK).
    Blocked,
}

pub enum Node {
    Integer(i64),
    /// A bulk string (binary safe).
    Bulk(Vec<u8>),
    Array(Vec<Node>),
}

pub type Handler = fn(&Call) -> Result<Response>;

/// The C entry point Redis calls for a command.
pub type Entry = unsafe extern "C" fn(*mut RedisModuleCtx, *mut *mut RedisModuleString, c_int) -> c_int;

/// Makes the C entry point of a command from its handler, its table and its counters
/// (`Option<&'static Counters>`); see `register::registered!`.
macro_rules! entry {
    ($handler:expr, $table:expr, $counters:expr) => {{
        unsafe extern "C" fn entry(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            $crate::dispatch::run(ctx, argv, argc, $handler, $table.keys, $counters)
        }
        entry
    }};
}
pub(crate) use entry;

/// Runs `handler` and sends its reply, or the error's text. For a command whose keys are
/// counted (`numkeys key…`, registered with `getkeys-api`), a server asking where the keys
/// are (Cluster routing on Redis 7.0) gets their positions instead.
#[inline(always)]
pub fn run(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
    handler: Handler,
    keys: Keys,
    counters: Option<&'static Counters>,
) -> c_int {
    let argv: &[*mut RedisModuleString] = match usize::try_from(argc) {
        // SAFETY: Redis passes `argc` valid argument pointers.
        Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
        _ => &[],
    };
    let call = Call { ctx, argv, counters };
    // SAFETY: the command's context.
    if let Keys::Counted { max } = keys
        && unsafe { (api().is_keys_position_request)(ctx) } != 0
    {
        // `numkeys` at 1, the keys after it; nothing for a malformed count (the call errs).
        let numkeys = call.args().first().and_then(|n| redis_throttle_core::args::integer(n).ok());
        if let Some(n) =
            numkeys.and_then(|n| usize::try_from(n).ok()).filter(|n| (1..=max).contains(n) && n + 2 <= argv.len())
        {
            for pos in 2..2 + n {
                // SAFETY: the command's context, in a keys-position request.
                unsafe { (api().key_at_pos)(ctx, pos as c_int) };
            }
        }
        return raw::Status::Ok as c_int;
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| handler(&call))).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string());
        Err(Error::Internal(what))
    });
    match outcome {
        Ok(Response::Five(values)) => reply_five(ctx, values),
        Ok(Response::Fives(each)) => {
            // SAFETY: `ctx` is the command's context, valid for the whole call.
            unsafe { (api().reply_with_array)(ctx, each.len() as _) };
            for values in each {
                reply_five(ctx, values);
            }
        }
        Ok(Response::Tree(node)) => reply_node(ctx, &node),
        Ok(Response::Blocked) => {}
        Err(e) => {
            call.count(Class::Error);
            reply_error(ctx, &e)
        }
    }
    raw::Status::Ok as c_int
}

/// A limiter's five integers.
#[inline(always)]
fn reply_five(ctx: *mut RedisModuleCtx, values: [i64; 5]) {
    let api = api();
    // SAFETY: `ctx` is the command's context, valid for the whole call.
    unsafe { (api.reply_with_array)(ctx, 5) };
    for v in values {
        // SAFETY: as above.
        unsafe { (api.reply_with_long_long)(ctx, v) };
    }
}

pub(crate) fn reply_node(ctx: *mut RedisModuleCtx, node: &Node) {
    let api = api();
    // SAFETY (both): `ctx` is the command's context.
    match node {
        Node::Integer(v) => unsafe {
            (api.reply_with_long_long)(ctx, *v);
        },
        Node::Bulk(bytes) => unsafe {
            (api.reply_with_string_buffer)(ctx, bytes.as_ptr().cast(), bytes.len());
        },
        Node::Array(items) => {
            unsafe { (api.reply_with_array)(ctx, items.len() as _) };
            for item in items {
                reply_node(ctx, item);
            }
        }
    }
}

/// Replaces the process's panic hook: a panic (always caught by `run`) is written to the
/// server's log as its message and location. The default hook would print a backtrace
/// with `RUST_BACKTRACE` set, and capturing one mixes allocators in ways some servers
/// (Valkey 8.1) abort on.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let text: String = format!("throttle: a command panicked (bug, answered with an error): {info}")
            .chars()
            .map(|c| if c == '\0' { ' ' } else { c })
            .collect();
        // SAFETY: a copy of the server's log function, filled in before any command runs.
        if let (Some(log), Ok(text)) = (unsafe { raw::RedisModule_Log }, CString::new(text)) {
            // SAFETY: the message goes as an argument, never as the format; a null context
            // logs as the module.
            unsafe { log(std::ptr::null_mut(), c"warning".as_ptr(), c"%s".as_ptr(), text.as_ptr()) };
        }
    }));
}

pub(crate) fn reply_error(ctx: *mut RedisModuleCtx, e: &Error) {
    // An error reply is one line: drop what would break the protocol.
    let text: String = e.to_string().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let text = CString::new(text).unwrap_or_else(|_| c"ERR internal error".to_owned());
    // SAFETY: `ctx` is the command's context; `text` outlives the call.
    unsafe { (api().reply_with_error)(ctx, text.as_ptr()) };
}
