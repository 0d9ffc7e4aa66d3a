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
//! no replica and no backlog (its own `INFO replication`): the module checks that when it
//! loads, and again when a child process ends or a dataset is loaded. It ends at the first of
//! the events that precede anything able to read the stream:
//! - a child process is forked: a replica's full sync (its snapshot, and the stream from that
//!   instant), an AOF being turned on or rewritten (`CONFIG SET appendonly yes` forks before
//!   the file takes writes), a BGSAVE;
//! - a dataset starts loading (a restart may bring a backlog back), the server's role changes,
//!   a replica or the link to a primary comes or goes.
//!
//! A replica, once attached, leaves a backlog behind it, so the server stays heard for good.
//! On a server that cannot announce all of these events, every write is replicated in full.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

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
    unsafe extern "C" fn heard(ctx: *mut RedisModuleCtx, event: raw::RedisModuleEvent, sub: u64, _: *mut std::ffi::c_void) {
        let over = match event.id {
            raw::REDISMODULE_EVENT_FORK_CHILD => sub == raw::REDISMODULE_SUBEVENT_FORK_CHILD_DIED,
            raw::REDISMODULE_EVENT_LOADING => matches!(sub, raw::REDISMODULE_SUBEVENT_LOADING_ENDED | raw::REDISMODULE_SUBEVENT_LOADING_FAILED),
            _ => false,
        };
        // A child gone or a load over: what the server has now decides (a replica's sync or a
        // loaded backlog leaves it heard). Anything else: heard.
        UNHEARD.store(over && quiet_now(ctx), Relaxed);
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
