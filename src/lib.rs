//! redis-throttle: atomic rate-limiting commands for Redis and Valkey.
//!
//! This crate is the Redis side only: it registers the commands, turns each call into a
//! typed request, reads and writes the limiters' keys, and replies. The algorithms, the
//! command tables and the argument parsing are pure code in `throttle-core`.

mod api;
mod clock;
mod commands;
mod dispatch;
mod register;
mod store;

use redis_module::{Context, RedisString, Status, redis_module};

/// Module arguments: `DEBUG-COMMANDS yes` registers `CL.DEBUG PANIC`, which panics inside a
/// command on purpose so that tests can prove the server survives a bug (like Redis's own
/// `enable-debug-command`, it is off unless the operator loads the module with it).
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    dispatch::install_panic_hook();
    if let Err(missing) = api::resolve() {
        ctx.log_warning(&format!("throttle: this server lacks {missing}, which the module needs"));
        return Status::Err;
    }
    // Writes signal modified keys (WATCH, client tracking) explicitly, and only when
    // something changed: a denied call or a peek must not abort a watcher's transaction.
    // SAFETY: a copy of a function pointer the server filled in; a valid context.
    if let Some(set_options) = unsafe { redis_module::raw::RedisModule_SetModuleOptions } {
        unsafe { set_options(ctx.ctx, redis_module::raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as i32) };
    }
    store::watch_dataset(ctx.ctx);
    let debug = args.chunks(2).any(|pair| {
        matches!(pair, [name, value] if name.as_slice().eq_ignore_ascii_case(b"DEBUG-COMMANDS")
            && value.as_slice().eq_ignore_ascii_case(b"yes"))
    });
    for command in commands::ALL.iter().chain(debug.then_some(&commands::DEBUG)) {
        if let Err(e) = register::register(ctx, command) {
            ctx.log_warning(&format!("throttle: cannot register {}: {e}", command.table.name));
            return Status::Err;
        }
    }
    Status::Ok
}

redis_module! {
    name: "throttle",
    version: 1_01_00,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
}
