//! redis-throttle: atomic rate-limiting commands for Redis and Valkey.
//!
//! This crate is the Redis side only: it registers the commands, turns each call into a
//! typed request, reads and writes the limiters' keys, and replies. The algorithms, the
//! command tables and the argument parsing are pure code in `redis-throttle-core`.

mod api;
mod clock;
mod commands;
mod config;
mod counters;
mod dispatch;
mod info;
mod operate;
mod register;
mod store;

use redis_module::{Context, RedisString, Status, redis_module};

/// Module arguments, `name value` pairs: the defaults of the configs (`mode shadow`,
/// `max-exact-limit 200000`, `max-buckets 20000`; see `config`), and `DEBUG-COMMANDS yes`,
/// which registers `CL.DEBUG PANIC`, a command that panics on purpose so that tests can prove
/// the server survives a bug (like Redis's own `enable-debug-command`, it is off unless the
/// operator loads the module with it). An unknown argument or a bad value fails the load.
///
/// A failed load must leave nothing behind. When `RedisModule_OnLoad` fails, the server
/// (Redis 7.0) unregisters the module's commands and configs and unloads the library, but keeps
/// its keyspace and server-event subscriptions, whose callbacks would then jump into unmapped
/// memory at the next expiry, eviction, flush or swap. So every step that can fail comes first
/// (arguments, configs and the values given at load, commands: a name may be taken, by
/// redis-cell for one), and the subscriptions, which cannot fail, come last (`tests/load.rs`).
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    dispatch::install_panic_hook();
    if let Err(missing) = api::resolve() {
        ctx.log_warning(&format!("throttle: this server lacks {missing}, which the module needs"));
        return Status::Err;
    }
    let args = match config::Args::parse(args) {
        Ok(args) => args,
        Err(e) => {
            ctx.log_warning(&format!("throttle: {e}"));
            return Status::Err;
        }
    };
    if let Err(e) = config::register(ctx.ctx, &args) {
        ctx.log_warning(&format!("throttle: {e}"));
        return Status::Err;
    }
    for command in commands::ALL.iter().chain(args.debug_commands.then_some(&commands::DEBUG)) {
        if let Err(e) = register::register(ctx, command) {
            ctx.log_warning(&format!("throttle: cannot register {}: {e}", command.table.name));
            return Status::Err;
        }
    }
    // Nothing below fails, and the server undoes none of it on a failed load.
    // Writes signal modified keys (WATCH, client tracking) explicitly, and only when
    // something changed: a denied call or a peek must not abort a watcher's transaction.
    // SAFETY: a copy of a function pointer the server filled in; a valid context.
    if let Some(set_options) = unsafe { redis_module::raw::RedisModule_SetModuleOptions } {
        unsafe { set_options(ctx.ctx, redis_module::raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as i32) };
    }
    // Replaces the do-nothing INFO callback `redis_module!` registered.
    // SAFETY: a copy of a function pointer the server filled in; a valid context.
    if let Some(register_info) = unsafe { redis_module::raw::RedisModule_RegisterInfoFunc } {
        unsafe { register_info(ctx.ctx, Some(info::info)) };
    }
    operate::seed();
    store::make_words();
    store::watch_server(ctx.ctx);
    Status::Ok
}

/// `MODULE LIST`'s `ver`: this crate's version (the workspace's) as Redis encodes one,
/// major·10000 + minor·100 + patch (0.1.0 is 100), so the module states the version everything
/// else states (scripts/dist-test.py reads it from a loaded server).
const MODULE_VERSION: i32 = {
    const fn number(s: &str) -> i32 {
        let b = s.as_bytes();
        let mut i = 0;
        let mut n = 0;
        while i < b.len() {
            assert!(b[i].is_ascii_digit() && n < 10_000, "a version part must be a small number");
            n = n * 10 + (b[i] - b'0') as i32;
            i += 1;
        }
        n
    }
    let (major, minor, patch) = (
        number(env!("CARGO_PKG_VERSION_MAJOR")),
        number(env!("CARGO_PKG_VERSION_MINOR")),
        number(env!("CARGO_PKG_VERSION_PATCH")),
    );
    assert!(minor < 100 && patch < 100, "Redis encodes a version's minor and patch in two digits each");
    major * 10_000 + minor * 100 + patch
};

redis_module! {
    name: "throttle",
    version: MODULE_VERSION,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
}
