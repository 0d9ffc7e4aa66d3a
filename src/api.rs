//! The server's module API, resolved once when the module loads: a required function the
//! server lacks makes the load fail with a clear log line, so no command ever discovers a
//! missing function half-way through a write.

use std::os::raw::{c_char, c_int, c_long, c_longlong};
use std::sync::OnceLock;

use redis_module::raw::{self, RedisModuleCallReply, RedisModuleCtx, RedisModuleKey, RedisModuleString, mstime_t, ustime_t};

type Variadic<R> = unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char, *const c_char, ...) -> R;

/// Function pointers into the server. Each is a plain `unsafe extern "C" fn`: calling one is
/// sound when its arguments are what the module API documents (valid context, open key, …).
pub struct Api {
    pub open_key: unsafe extern "C" fn(*mut RedisModuleCtx, *mut RedisModuleString, c_int) -> *mut RedisModuleKey,
    pub close_key: unsafe extern "C" fn(*mut RedisModuleKey),
    pub key_type: unsafe extern "C" fn(*mut RedisModuleKey) -> c_int,
    pub value_length: unsafe extern "C" fn(*mut RedisModuleKey) -> usize,
    pub string_dma: unsafe extern "C" fn(*mut RedisModuleKey, *mut usize, c_int) -> *mut c_char,
    pub string_truncate: unsafe extern "C" fn(*mut RedisModuleKey, usize) -> c_int,
    pub delete_key: unsafe extern "C" fn(*mut RedisModuleKey) -> c_int,
    pub set_expire: unsafe extern "C" fn(*mut RedisModuleKey, mstime_t) -> c_int,
    pub get_expire: unsafe extern "C" fn(*mut RedisModuleKey) -> mstime_t,
    /// Redis 7.0.5+ / Valkey; else the relative forms above.
    pub set_abs_expire: Option<unsafe extern "C" fn(*mut RedisModuleKey, mstime_t) -> c_int>,
    pub get_abs_expire: Option<unsafe extern "C" fn(*mut RedisModuleKey) -> mstime_t>,
    pub replicate: Variadic<c_int>,
    pub call: Variadic<*mut RedisModuleCallReply>,
    pub call_reply_type: unsafe extern "C" fn(*mut RedisModuleCallReply) -> c_int,
    pub call_reply_string_ptr: unsafe extern "C" fn(*mut RedisModuleCallReply, *mut usize) -> *const c_char,
    pub free_call_reply: unsafe extern "C" fn(*mut RedisModuleCallReply),
    pub reply_with_array: unsafe extern "C" fn(*mut RedisModuleCtx, c_long) -> c_int,
    pub reply_with_long_long: unsafe extern "C" fn(*mut RedisModuleCtx, c_longlong) -> c_int,
    pub reply_with_error: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char) -> c_int,
    pub notify_keyspace_event: unsafe extern "C" fn(*mut RedisModuleCtx, c_int, *const c_char, *mut RedisModuleString) -> c_int,
    pub signal_modified_key: unsafe extern "C" fn(*mut RedisModuleCtx, *mut RedisModuleString) -> c_int,
    pub string_ptr_len: unsafe extern "C" fn(*const RedisModuleString, *mut usize) -> *const c_char,
    pub is_keys_position_request: unsafe extern "C" fn(*mut RedisModuleCtx) -> c_int,
    pub key_at_pos: unsafe extern "C" fn(*mut RedisModuleCtx, c_int),
    /// Redis 7.2+ / Valkey: the command's cached time, frozen for a whole MULTI, script or function.
    pub cached_microseconds: Option<unsafe extern "C" fn() -> ustime_t>,
}

static API: OnceLock<Api> = OnceLock::new();

/// The resolved API. Only called from commands, which exist only after `resolve` succeeded.
pub fn api() -> &'static Api {
    API.get().expect("the module API is resolved when the module loads")
}

/// Resolves the API (from `init`); the name of the first missing required function otherwise.
pub fn resolve() -> Result<(), &'static str> {
    macro_rules! required {
        ($f:ident) => {{
            // SAFETY: a copy of a function pointer the server filled in before `init` ran.
            unsafe { raw::$f }.ok_or(stringify!($f))?
        }};
    }
    macro_rules! optional {
        ($f:ident) => {{
            // SAFETY: as above; `None` on servers without it.
            unsafe { raw::$f }
        }};
    }
    let api = Api {
        open_key: required!(RedisModule_OpenKey),
        close_key: required!(RedisModule_CloseKey),
        key_type: required!(RedisModule_KeyType),
        value_length: required!(RedisModule_ValueLength),
        string_dma: required!(RedisModule_StringDMA),
        string_truncate: required!(RedisModule_StringTruncate),
        delete_key: required!(RedisModule_DeleteKey),
        set_expire: required!(RedisModule_SetExpire),
        get_expire: required!(RedisModule_GetExpire),
        set_abs_expire: optional!(RedisModule_SetAbsExpire),
        get_abs_expire: optional!(RedisModule_GetAbsExpire),
        replicate: required!(RedisModule_Replicate),
        call: required!(RedisModule_Call),
        call_reply_type: required!(RedisModule_CallReplyType),
        call_reply_string_ptr: required!(RedisModule_CallReplyStringPtr),
        free_call_reply: required!(RedisModule_FreeCallReply),
        reply_with_array: required!(RedisModule_ReplyWithArray),
        reply_with_long_long: required!(RedisModule_ReplyWithLongLong),
        reply_with_error: required!(RedisModule_ReplyWithError),
        notify_keyspace_event: required!(RedisModule_NotifyKeyspaceEvent),
        signal_modified_key: required!(RedisModule_SignalModifiedKey),
        string_ptr_len: required!(RedisModule_StringPtrLen),
        is_keys_position_request: required!(RedisModule_IsKeysPositionRequest),
        key_at_pos: required!(RedisModule_KeyAtPos),
        cached_microseconds: optional!(RedisModule_CachedMicroseconds),
    };
    // A second load of the module in one process keeps the first resolution: the pointers
    // are the same server's.
    let _ = API.set(api);
    Ok(())
}
