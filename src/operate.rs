//! What an operator sees: per-command counters (`INFO throttle`), the most-denied keys
//! (`CL.TOP`, a Space-Saving sketch) and the `throttled` keyspace event. All of it lives in
//! the module's memory, per node, never in the keyspace, and recording costs no allocation.
//!
//! The counters are exact: every command, and the INFO callback, runs on the server's main
//! thread (module commands called from other threads hold the global lock), so each counter
//! has one writer at a time and a plain load-add-store loses nothing. They are atomics only so
//! that sharing them is sound Rust; `Relaxed` loads and stores compile to plain moves (no
//! locked instruction on the hot path).

use std::ffi::{CString, c_char};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::raw::{self, RedisModuleInfoCtx};
use redis_throttle_core::top::Sketch;

use crate::api::api;
use crate::dispatch::Call;

/// What a call of a limiter command was, for its counters. Every call is exactly one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Consumed units (quantity > 0) and was admitted.
    Admitted,
    /// Consumed units and was denied, and answered so.
    Denied,
    /// Consumed units and was denied, but answered as admitted (shadow mode or `SHADOW`).
    ShadowDenied,
    /// Quantity 0: a read of the limiter, neither admitted nor denied.
    Peek,
    /// Quantity < 0: units given back.
    Refund,
    /// Answered with an error (nothing written).
    Error,
}

impl Class {
    const ALL: [(Class, &'static str); 6] = [
        (Class::Admitted, "admitted"),
        (Class::Denied, "denied"),
        (Class::ShadowDenied, "shadow_denied"),
        (Class::Peek, "peeks"),
        (Class::Refund, "refunds"),
        (Class::Error, "errors"),
    ];

    /// The class of a successful call consuming `quantity` (CL.ALL: the call's) that was
    /// `denied`, answered in `shadow`.
    pub fn of(quantity: i64, denied: bool, shadow: bool) -> Class {
        match quantity {
            0 => Class::Peek,
            q if q < 0 => Class::Refund,
            _ if !denied => Class::Admitted,
            _ if shadow => Class::ShadowDenied,
            _ => Class::Denied,
        }
    }
}

/// One command's counters, by [`Class`]; `calls` is their sum.
pub struct Counters([AtomicU64; Class::ALL.len()]);

impl Counters {
    #[allow(clippy::new_without_default)] // only ever a static
    pub const fn new() -> Counters {
        Counters([const { AtomicU64::new(0) }; Class::ALL.len()])
    }

    #[inline]
    pub fn count(&self, class: Class) {
        let counter = &self.0[class as usize];
        // One writer (see the module comment): not a read-modify-write instruction.
        counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
    }

    fn get(&self, class: Class) -> u64 {
        self.0[class as usize].load(Relaxed)
    }
}

/// The most-denied keys of this node.
static TOP: Mutex<Sketch> = Mutex::new(Sketch::new());

/// The sketch, locked (uncontended: one thread). A panic while it was held leaves it
/// consistent enough to keep counting (at worst one count is off).
pub fn top() -> MutexGuard<'static, Sketch> {
    TOP.lock().unwrap_or_else(PoisonError::into_inner)
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

/// `INFO throttle` (also in `INFO modules` and `INFO everything`): the mode, each counted
/// command's counters as `throttle_<command>_<counter>` (`cl.throttle` → `cl_throttle`), and
/// the sketch's size and error bound.
pub unsafe extern "C" fn info(ctx: *mut RedisModuleInfoCtx, for_crash_report: c_int) {
    let api = api();
    let (Some(section), Some(number), Some(text)) =
        (api.info_add_section, api.info_add_field_long_long, api.info_add_field_cstring)
    else {
        return;
    };
    // SAFETY (every call below): the INFO context the server passed, C strings alive for the call.
    if unsafe { section(ctx, c"".as_ptr()) } != raw::Status::Ok as c_int {
        return; // this section was not asked for
    }
    let mode = if crate::config::shadow() { c"shadow" } else { c"enforce" };
    unsafe { text(ctx, c"mode".as_ptr(), mode.as_ptr()) };
    // CL.QUOTA's time zone rules, compiled in: every server running this build agrees.
    if let Ok(version) = CString::new(redis_throttle_core::calendar::tzdb_version()) {
        unsafe { text(ctx, c"tzdb_version".as_ptr(), version.as_ptr()) };
    }
    let field = |name: String, value: u64| {
        if let Ok(name) = CString::new(name) {
            let name: *const c_char = name.as_ptr();
            unsafe { number(ctx, name, i64::try_from(value).unwrap_or(i64::MAX)) };
        }
    };
    for command in crate::commands::ALL.iter() {
        let Some(counters) = command.counters else { continue };
        let prefix = command.table.name.replace('.', "_");
        let calls = Class::ALL.iter().fold(0u64, |sum, &(class, _)| sum.wrapping_add(counters.get(class)));
        field(format!("{prefix}_calls"), calls);
        for (class, name) in Class::ALL {
            field(format!("{prefix}_{name}"), counters.get(class));
        }
    }
    // A crash report may run while the sketch is held: skip it rather than wait.
    let sketch = if for_crash_report != 0 { TOP.try_lock().ok() } else { Some(top()) };
    if let Some(sketch) = sketch {
        field("top_denials".into(), sketch.total());
        field("top_tracked_keys".into(), sketch.tracked() as u64);
        field("top_error_bound".into(), sketch.error_bound());
    }
}
