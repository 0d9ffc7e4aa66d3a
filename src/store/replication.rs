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

/// The server events (besides a load, which `store` follows for its own reasons too) at which
/// something may start reading the stream: each calls [`heard`].
pub const EVENTS: [u64; 4] = [
    raw::REDISMODULE_EVENT_FORK_CHILD,
    raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
    raw::REDISMODULE_EVENT_REPLICA_CHANGE,
    raw::REDISMODULE_EVENT_MASTER_LINK_CHANGE,
];

/// Something may read the stream from now on: every write is replicated until [`tick`] finds
/// the server quiet again.
pub fn heard() {
    UNHEARD.store(false, Relaxed);
}

/// Once the module follows every event of [`EVENTS`], a load, and the cron (from `init`):
/// whether nothing can receive the stream now.
pub fn start(ctx: *mut RedisModuleCtx) {
    UNHEARD.store(quiet_now(ctx), Relaxed);
}

/// On each run of the server's cron (`hz` a second, 10 by default): once a second, while
/// writes are replicated, whether the server has become quiet again.
pub fn tick(ctx: *mut RedisModuleCtx) {
    static TICKS: AtomicU32 = AtomicU32::new(0);
    let n = TICKS.load(Relaxed).wrapping_add(1);
    TICKS.store(n, Relaxed); // (the main thread only)
    // `start` has run: the cron is subscribed only after every event was.
    if n.is_multiple_of(10) && !UNHEARD.load(Relaxed) {
        UNHEARD.store(quiet_now(ctx), Relaxed);
    }
}

/// The server has nowhere to send a replicated command now.
fn quiet_now(ctx: *mut RedisModuleCtx) -> bool {
    // SAFETY: the module's context in `init`, or the cron event's.
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
    let (Some(info), Some(field), Some(free)) = (unsafe {
        (raw::RedisModule_GetServerInfo, raw::RedisModule_ServerInfoGetFieldSigned, raw::RedisModule_FreeServerInfo)
    }) else {
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
