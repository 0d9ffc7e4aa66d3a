//! What an operator sees of denials: the most-denied keys (`CL.TOP`, a Space-Saving sketch)
//! and the `throttled` keyspace event. Both live in the module's memory, per node, never in
//! the keyspace, and recording costs no allocation. (The per-command counters are
//! `counters`; `INFO throttle` prints both, in `info`.)

use std::os::raw::c_int;
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::raw;
use redis_throttle_core::top::Sketch;

use crate::api::api;
use crate::dispatch::Call;

/// The most-denied keys of this node.
static TOP: Mutex<Sketch> = Mutex::new(Sketch::new());

/// The sketch, locked (uncontended: one thread). A panic while it was held leaves it
/// consistent enough to keep counting (at worst one count is off).
pub fn top() -> MutexGuard<'static, Sketch> {
    TOP.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sketch if it is free now (a crash report may run while it is held).
pub fn try_top() -> Option<MutexGuard<'static, Sketch>> {
    TOP.try_lock().ok()
}

/// Seeds the sketch's hash at load, so which keys collide cannot be planned from outside.
pub fn seed() {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let here = &TOP as *const _ as u64;
    top().seed(now ^ here.rotate_left(32));
}

/// A denial of the key at argument `word` (bytes `key`): counted in the sketch, then
/// announced as the keyspace event `throttled` if the server's `notify-keyspace-events`
/// asks for module events (`d`, or `A`) on a channel (`K` or `E`). With events off, that is
/// one call reading the server's flags and nothing else.
pub fn denied(call: &Call, word: usize, key: &[u8]) {
    top().record(key);
    let module = raw::REDISMODULE_NOTIFY_MODULE as c_int;
    if crate::store::published_classes() & module == 0 {
        return;
    }
    if let Ok(name) = call.word(word) {
        // SAFETY: the command's context and one of its argument strings.
        unsafe { (api().notify_keyspace_event)(call.ctx, module, c"throttled".as_ptr(), name) };
    }
}
