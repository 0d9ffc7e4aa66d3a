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
//! - the timer, at the slot: the reply callback answers `wait` 0;
//! - `CLIENT UNBLOCK` (the timeout callback): the reply at once, with the time still to wait;
//! - a disconnection (the disconnect callback; also `CLIENT KILL`, `CLIENT UNBLOCK … ERROR`):
//!   no reply, and nothing is kept for the client.
//!
//! Either way `queued` and `reset_after` describe the schedule when the reply is sent: the key
//! is read again then (`GET`, in the client's database), and its TAT counted with the call's
//! own reservation, which stands even if the key was deleted, flushed, swapped away or
//! overwritten meanwhile.
//!
//! Inside MULTI/EXEC, a script or a function, and for callers that may not block, the call
//! replies at once with its wait, as blocking list commands do.

use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};

use redis_module::raw::{self, RedisModuleBlockedClient, RedisModuleCtx, RedisModuleString, RedisModuleTimerID};
use redis_throttle_core::limiter::{Algorithm, Write};
use redis_throttle_core::pace::{self, Params, Request};
use redis_throttle_core::time::NANOS_PER_MILLI;
use redis_throttle_core::{Effect, Error, Instant, Nanos, Result, Unit};

use crate::api::api;
use crate::counters::Class;
use crate::dispatch::{Call, Node, Response, reply_error, reply_node};
use crate::operate;
use crate::register::{Registered, registered};
use crate::store::Key;
use crate::{clock, config};

pub static COMMAND: Registered = registered!(handler, &pace::COMMAND);

fn handler(call: &Call) -> Result<Response> {
    let args = call.args();
    let request = Request::parse(&args)?;
    let now = clock::now();
    let mut key = Key::open(call, 0)?;
    key.load(Algorithm::Throttle)?;
    let tat = key.stored().map(|s| pace::read(s.value)).transpose()?;
    let decision = pace::decide(tat, now, &request.params, request.quantity)?;
    // The pacer's own form (`P` and the TAT): `SET key P… PXAT ms`.
    let effect = decision.effect.clone().map(|tat| Write::Tagged(pace::TAG, tat.as_nanos()));
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
    match (reply.wait, decision.effect) {
        (Some(wait), Effect::Store { state: end, .. })
            if request.block && wait > Nanos::ZERO && may_block(call.ctx) =>
        {
            let slot = now.checked_add(wait)?;
            let entry =
                Pending { timer: 0, key: request.key.to_vec(), slot, end, params: request.params, unit: request.unit };
            block(call.ctx, entry, wait)
        }
        _ => Ok(Response::Five(reply.to_array(request.unit))),
    }
}

/// Whether the client may be blocked: not inside MULTI/EXEC, a script or a function, nor a
/// caller that denies blocking (`RedisModule_Call` from another module, for one).
fn may_block(ctx: *mut RedisModuleCtx) -> bool {
    // SAFETY: the command's context.
    let flags = unsafe { (api().get_context_flags)(ctx) } as u32;
    flags
        & (raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING)
        == 0
}

/// A blocked client's admission, until its reply is sent.
struct Pending {
    timer: RedisModuleTimerID,
    /// The key, read again when the reply is sent.
    key: Vec<u8>,
    /// When the client may act.
    slot: Instant,
    /// Where its reservation ends (the TAT its call stored).
    end: Instant,
    params: Params,
    unit: Unit,
}

impl Pending {
    /// The reply at `now`, the schedule read from the key in `ctx`'s database.
    fn reply_at(&self, ctx: *mut RedisModuleCtx, now: Instant) -> [i64; 5] {
        pace::Reply::released(self.slot, self.end, stored_tat(ctx, &self.key), now, &self.params).to_array(self.unit)
    }
}

/// The TAT `key` holds in `ctx`'s database (through `GET`: a key that expired is missing);
/// `None` when it is missing or holds no pacer's state.
fn stored_tat(ctx: *mut RedisModuleCtx, key: &[u8]) -> Option<Instant> {
    let api = api();
    // SAFETY: a context of a blocked client's callback; `b` takes a pointer and a length, both
    // of `key`, alive for the call. The reply is freed below.
    let reply = unsafe { (api.call)(ctx, c"GET".as_ptr(), c"b".as_ptr(), key.as_ptr(), key.len()) };
    if reply.is_null() {
        return None;
    }
    let mut len = 0usize;
    // SAFETY: a reply owned here.
    let is_string = unsafe { (api.call_reply_type)(reply) } as isize == raw::REDISMODULE_REPLY_STRING;
    // SAFETY: as above.
    let ptr = if is_string { unsafe { (api.call_reply_string_ptr)(reply, &mut len) } } else { std::ptr::null() };
    // SAFETY: the reply holds `len` bytes at `ptr` until it is freed.
    let tat =
        (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }).and_then(pace::decode);
    // SAFETY: freed once, after its last use.
    unsafe { (api.free_call_reply)(reply) };
    tat
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

/// Releases the server's handle, with the entry whose reply the reply callback sends (`None`:
/// no reply, the client is gone or already answered).
fn unblock(bc: *mut RedisModuleBlockedClient, entry: Option<Pending>) {
    let privdata = entry.map_or(std::ptr::null_mut(), |e| Box::into_raw(Box::new(e)).cast::<c_void>());
    // SAFETY: a handle not yet released (its entry was just taken); the box is freed by
    // `free_reply`.
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
            unblock(bc, Some(entry));
        }
    });
}

/// The slot has arrived (the timer released the client): the reply, `wait` 0, with the
/// schedule as it stands now.
unsafe extern "C" fn on_reply(ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    guarded(|| {
        // SAFETY: a reply callback's context.
        let entry = unsafe { (api().get_blocked_client_private_data)(ctx) }.cast::<Pending>();
        // SAFETY: the box `unblock` made, alive until `free_reply`.
        match unsafe { entry.as_ref() } {
            // The timer fired at or after the slot (whole milliseconds, rounded up): never
            // reply a wait because a clock reads a little behind it.
            Some(entry) => reply_five(ctx, &entry.reply_at(ctx, clock::now().max(entry.slot))),
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
                reply_five(ctx, &entry.reply_at(ctx, clock::now()));
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
            drop(unsafe { Box::from_raw(privdata.cast::<Pending>()) });
        }
    });
}

fn reply_five(ctx: *mut RedisModuleCtx, values: &[i64; 5]) {
    reply_node(ctx, &Node::Array(values.iter().map(|&v| Node::Integer(v)).collect()));
}
