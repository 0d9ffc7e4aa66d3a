//! Whether anything can receive a replicated write yet.
//!
//! Every write is replicated as plain commands (see `store`). Building one
//! (`RedisModule_Replicate`: a command-table lookup, new argument objects) is about a fifth of
//! a limiter call, and the server drops it unread when there is nowhere to send it: no AOF,
//! no replica and no replication backlog, as on a server run as a cache. So while that is
//! certain, a write is only counted as one (`RedisModule_ReplicateVerbatim`, which adds to the
//! changes that trigger RDB save points, as before, and which the server drops as well).
//!
//! It is certain when the server is a primary outside a cluster with no AOF, no child process,
//! no replica and no backlog (its own `INFO replication`): an exact reading of the server's
//! state, taken when the module loads and then once a second (on the server's cron) while
//! writes are replicated. It ends at once, before the next command, at any of the events that
//! precede anything able to read the stream:
//! - a child process is forked: a replica's full sync (its snapshot, and the stream from that
//!   instant), an AOF being turned on or rewritten (`CONFIG SET appendonly yes` forks before
//!   the file takes writes), a BGSAVE;
//! - a dataset starts or ends loading (a restart may bring a backlog back), the server's role
//!   changes, a replica or the link to a primary comes or goes.
//!
//! A replica leaves a backlog behind it (for `repl-backlog-ttl`, an hour by default), so a
//! server that had one stays heard that long. On a server that cannot announce all of these
//! events, every write is replicated in full.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

use redis_module::raw::{self, RedisModuleCtx};

use crate::api::api;

/// True while nothing can receive the replication stream (see the module comment).
static UNHEARD: AtomicBool = AtomicBool::new(false);

/// When nothing can receive a replicated write: counts the write as the server counts
/// replicated ones and returns true (the caller builds nothing). Else false.
#[inline(always)]
pub fn unheard(ctx: *mut RedisModuleCtx) -> bool {
    if !UNHEARD.load(Relaxed) {
        return false;
    }
    // SAFETY: the command's context. With nowhere to send it, the server only counts it.
    unsafe { (api().replicate_verbatim)(ctx) };
    true
}

/// From `init`: subscribes to the events that end it, then decides whether it holds now.
pub fn watch(ctx: *mut RedisModuleCtx) {
    unsafe extern "C" fn heard(_: *mut RedisModuleCtx, _: raw::RedisModuleEvent, _: u64, _: *mut std::ffi::c_void) {
        UNHEARD.store(false, Relaxed);
    }
    // Once a second (the cron runs `hz` times a second, 10 by default), while heard.
    unsafe extern "C" fn tick(ctx: *mut RedisModuleCtx, _: raw::RedisModuleEvent, _: u64, _: *mut std::ffi::c_void) {
        static TICKS: AtomicU32 = AtomicU32::new(0);
        let n = TICKS.load(Relaxed).wrapping_add(1);
        TICKS.store(n, Relaxed); // (the main thread only)
        if n.is_multiple_of(10) && !UNHEARD.load(Relaxed) {
            UNHEARD.store(quiet_now(ctx), Relaxed);
        }
    }
    // SAFETY: a copy of a function pointer the server filled in (6.0+); `None` before.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else { return };
    let events = [
        raw::REDISMODULE_EVENT_FORK_CHILD,
        raw::REDISMODULE_EVENT_LOADING,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        raw::REDISMODULE_EVENT_REPLICA_CHANGE,
        raw::REDISMODULE_EVENT_MASTER_LINK_CHANGE,
    ];
    for id in events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: the module's context in `init`, a callback that lives as long as the module.
        // A server that does not know the event refuses it: then nothing is ever skipped.
        if unsafe { subscribe(ctx, event, Some(heard)) } != raw::Status::Ok as c_int {
            return;
        }
    }
    UNHEARD.store(quiet_now(ctx), Relaxed);
    let cron = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_CRON_LOOP, dataver: 1 };
    // SAFETY: as above. Without it, a server heard once stays heard.
    unsafe { subscribe(ctx, cron, Some(tick)) };
}

/// The server has nowhere to send a replicated command now.
fn quiet_now(ctx: *mut RedisModuleCtx) -> bool {
    // SAFETY: the module's context in `init`, or an event's.
    let flags = unsafe { (api().get_context_flags)(ctx) } as u32;
    let loud = raw::REDISMODULE_CTX_FLAGS_SLAVE
        | raw::REDISMODULE_CTX_FLAGS_CLUSTER
        | raw::REDISMODULE_CTX_FLAGS_AOF
        | raw::REDISMODULE_CTX_FLAGS_LOADING
        | raw::REDISMODULE_CTX_FLAGS_ACTIVE_CHILD;
    if flags & raw::REDISMODULE_CTX_FLAGS_MASTER == 0 || flags & loud != 0 {
        return false;
    }
    // SAFETY: copies of function pointers the server filled in (6.0+); `None` before.
    let (Some(info), Some(field), Some(free)) =
        (unsafe { (raw::RedisModule_GetServerInfo, raw::RedisModule_ServerInfoGetFieldSigned, raw::RedisModule_FreeServerInfo) })
    else {
        return false;
    };
    // SAFETY: a valid context; the data is freed below, after its last use.
    let data = unsafe { info(ctx, c"replication".as_ptr()) };
    if data.is_null() {
        return false;
    }
    // Zero, and present (a server that names them otherwise is not taken as quiet).
    let zero = |name: &std::ffi::CStr| {
        let mut err: c_int = 0;
        // SAFETY: the data read above, a C string.
        let value = unsafe { field(data, name.as_ptr(), &mut err) };
        err == 0 && value == 0
    };
    let quiet = zero(c"connected_slaves") && zero(c"repl_backlog_active");
    // SAFETY: the data read above, freed once.
    unsafe { free(ctx, data) };
    quiet
}
