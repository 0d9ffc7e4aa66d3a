//! `CL.PACE key count period [MAXWAIT w] [QUANTITY q] [MS] [BLOCK]`: the leaky bucket as a
//! meter. The reservation is decided, written and replicated by the call itself (as
//! `SET key TAT PXAT ms`); `BLOCK` only delays the reply.
//!
//! A blocked client is released by a module timer at its slot. The server's own timeout for
//! blocked clients is checked only when its event loop wakes for something else (on an idle
//! server, every `1000 / hz` ms), which would release pacing clients in bunches; a timer is an
//! event-loop timer, so the server wakes for it. Every blocked client has one entry in
//! [`PENDING`]; whichever comes first takes the entry, and with it the duty to stop the timer
//! and release the server's handle (`RedisModule_UnblockClient`), exactly once:
//! - the timer, at the slot: the reply as of the slot (`wait` 0);
//! - `CLIENT UNBLOCK` (the timeout callback): the reply at once, with the time still to wait;
//! - a disconnection (the disconnect callback; also `CLIENT KILL`, `CLIENT UNBLOCK … ERROR`):
//!   no reply, and nothing is kept for the client.
//!
//! Inside MULTI/EXEC, a script or a function, and for callers that may not block, the call
//! replies at once with its wait, as blocking list commands do.

use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};

use redis_module::raw::{self, RedisModuleBlockedClient, RedisModuleCtx, RedisModuleString, RedisModuleTimerID};
use throttle_core::limiter::{Algorithm, Write};
use throttle_core::pace::{self, Params, Request};
use throttle_core::time::NANOS_PER_MILLI;
use throttle_core::{Error, Instant, Nanos, Patch, Result, Unit};

use crate::api::api;
use crate::{clock, config};
use crate::dispatch::{Call, Node, Response, reply_error, reply_node};
use crate::operate::{self, Class};
use crate::register::{Registered, registered};
use crate::store::Key;

pub static COMMAND: Registered = registered!(handler, &pace::COMMAND);

fn handler(call: &Call) -> Result<Response> {
    let args = call.args();
    let request = Request::parse(&args)?;
    let now = clock::now();
    let mut key = Key::open(call, 0)?;
    key.load(Algorithm::Throttle)?;
    let tat = key.stored().map(|s| pace::read(s.value)).transpose()?;
    let decision = pace::decide(tat, now, &request.params, request.quantity)?;
    // The pacer's own form (`P` and the TAT), written whole: `SET key P… PXAT ms`.
    let effect = decision.effect.map(|tat| {
        let value = pace::encode(tat);
        Write::Patch(Patch { len: value.len(), chunks: vec![(0, value)] })
    });
    let prepared = key.prepare(&effect)?;
    key.apply(prepared)?;
    let mut reply = decision.reply;
    // Counted as the limiters are; in shadow mode a refusal (nothing reserved) is answered as
    // an admission to act now.
    let denied = reply.limited && request.quantity > 0;
    let shadow = denied && (config::shadow() || request.shadow);
    if denied {
        operate::denied(call, 0, request.key);
        if shadow {
            reply = reply.shadowed();
        }
    }
    call.count(Class::of(request.quantity, denied, shadow));
    match reply.wait {
        Some(wait) if request.block && wait > Nanos::ZERO && may_block(call.ctx) => {
            block(call.ctx, Pending { timer: 0, reply, params: request.params, unit: request.unit, now }, wait)
        }
        _ => Ok(Response::Five(reply.to_array(request.unit))),
    }
}

/// Whether the client may be blocked: not inside MULTI/EXEC, a script or a function, nor a
/// caller that denies blocking (`RedisModule_Call` from another module, for one).
fn may_block(ctx: *mut RedisModuleCtx) -> bool {
    // SAFETY: the command's context.
    let flags = unsafe { (api().get_context_flags)(ctx) } as u32;
    flags & (raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING) == 0
}

/// A blocked client's admission, until its slot.
struct Pending {
    timer: RedisModuleTimerID,
    reply: pace::Reply,
    params: Params,
    unit: Unit,
    /// The call's instant.
    now: Instant,
}

impl Pending {
    /// The reply `elapsed` after the call.
    fn reply_after(&self, elapsed: Nanos) -> [i64; 5] {
        self.reply.after(elapsed, &self.params).to_array(self.unit)
    }
}

/// Blocked clients by handle (callbacks all run on the server's main thread; the lock is never
/// contended).
static PENDING: Mutex<BTreeMap<usize, Pending>> = Mutex::new(BTreeMap::new());

fn pending() -> MutexGuard<'static, BTreeMap<usize, Pending>> {
    // A panic while the map was held left it consistent (each operation is one insert or remove).
    PENDING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn block(ctx: *mut RedisModuleCtx, mut entry: Pending, wait: Nanos) -> Result<Response> {
    let api = api();
    // No server timeout (0): the timer releases the client. The timeout callback still
    // answers `CLIENT UNBLOCK`.
    // SAFETY: the command's context, outside MULTI and scripts (checked); the callbacks are
    // plain functions that live as long as the module.
    let bc = unsafe { (api.block_client)(ctx, Some(on_reply), Some(on_timeout), Some(free_reply), 0) };
    if bc.is_null() {
        return Err(Error::Internal("cannot block the client".into()));
    }
    // SAFETY: the handle just created; the callback is a plain function.
    unsafe { (api.set_disconnect_callback)(bc, Some(on_disconnect)) };
    // The first whole millisecond at or after the slot (timers count milliseconds).
    let period = (wait.as_nanos() + NANOS_PER_MILLI - 1) / NANOS_PER_MILLI;
    // SAFETY: the command's context; the data is the handle, which stays valid until
    // `RedisModule_UnblockClient` is called for it (by whoever takes the entry below).
    entry.timer = unsafe { (api.create_timer)(ctx, period, Some(on_timer), bc.cast()) };
    pending().insert(bc as usize, entry);
    Ok(Response::Blocked)
}

/// Takes a blocked client's entry; stops its timer unless the timer is the caller.
fn take(ctx: *mut RedisModuleCtx, bc: *mut RedisModuleBlockedClient, stop_timer: bool) -> Option<Pending> {
    let entry = pending().remove(&(bc as usize))?;
    if stop_timer {
        // SAFETY: a context of this module; the timer is this module's and has not fired (the
        // entry was still there). Its data is the handle, which is not owned: nothing to free.
        unsafe { (api().stop_timer)(ctx, entry.timer, std::ptr::null_mut()) };
    }
    Some(entry)
}

/// Releases the server's handle, with the reply to send (`None`: no reply, the client is gone
/// or already answered).
fn unblock(bc: *mut RedisModuleBlockedClient, reply: Option<[i64; 5]>) {
    let privdata = reply.map_or(std::ptr::null_mut(), |r| Box::into_raw(Box::new(r)).cast::<c_void>());
    // SAFETY: a handle not yet released (its entry was just taken); the reply box is freed
    // by `free_reply`.
    unsafe { (api().unblock_client)(bc, privdata) };
}

/// Runs a server callback; a panic (a bug) is logged by the module's hook and stops here.
fn guarded(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// The timer: the slot has arrived.
unsafe extern "C" fn on_timer(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    guarded(|| {
        let bc = data.cast::<RedisModuleBlockedClient>();
        if let Some(entry) = take(ctx, bc, false) {
            let wait = entry.reply.wait.unwrap_or(Nanos::ZERO);
            unblock(bc, Some(entry.reply_after(wait)));
        }
    });
}

/// Sends the reply the timer prepared.
unsafe extern "C" fn on_reply(ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    guarded(|| {
        // SAFETY: a reply callback's context.
        let reply = unsafe { (api().get_blocked_client_private_data)(ctx) }.cast::<[i64; 5]>();
        // SAFETY: the box `unblock` made, alive until `free_reply`.
        match unsafe { reply.as_ref() } {
            Some(values) => reply_five(ctx, values),
            None => reply_error(ctx, &Error::Internal("a blocked CL.PACE lost its reply".into())),
        }
    });
    raw::Status::Ok as c_int
}

/// `CLIENT UNBLOCK`: the reply now, with the time still to wait.
unsafe extern "C" fn on_timeout(ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    guarded(|| {
        // SAFETY: a timeout callback's context.
        let bc = unsafe { (api().get_blocked_client_handle)(ctx) };
        match take(ctx, bc, true) {
            Some(entry) => {
                reply_five(ctx, &entry.reply_after(clock::now().saturating_since(entry.now)));
                unblock(bc, None);
            }
            None => reply_error(ctx, &Error::Internal("a blocked CL.PACE was unblocked twice".into())),
        }
    });
    raw::Status::Ok as c_int
}

/// The client went away while blocked: forget it (its reservation stays, as it was made).
unsafe extern "C" fn on_disconnect(ctx: *mut RedisModuleCtx, bc: *mut RedisModuleBlockedClient) {
    guarded(|| {
        if take(ctx, bc, true).is_some() {
            unblock(bc, None);
        }
    });
}

unsafe extern "C" fn free_reply(_ctx: *mut RedisModuleCtx, privdata: *mut c_void) {
    guarded(|| {
        if !privdata.is_null() {
            // SAFETY: the box `unblock` made, freed once, here.
            drop(unsafe { Box::from_raw(privdata.cast::<[i64; 5]>()) });
        }
    });
}

fn reply_five(ctx: *mut RedisModuleCtx, values: &[i64; 5]) {
    reply_node(ctx, &Node::Array(values.iter().map(|&v| Node::Integer(v)).collect()));
}
