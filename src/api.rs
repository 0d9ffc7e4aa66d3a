//! The server's module API, resolved once when the module loads: a required function the
//! server lacks makes the load fail with a clear log line, so no command ever discovers a
//! missing function half-way through a write.

use std::os::raw::{c_char, c_int, c_long, c_longlong, c_void};
use std::sync::OnceLock;

use redis_module::raw::{
    self, RedisModuleBlockedClient, RedisModuleCallReply, RedisModuleCmdFunc, RedisModuleCtx,
    RedisModuleDisconnectFunc, RedisModuleInfoCtx, RedisModuleKey, RedisModuleString, RedisModuleTimerID,
    RedisModuleTimerProc, mstime_t, ustime_t,
};

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
    pub replicate_verbatim: unsafe extern "C" fn(*mut RedisModuleCtx) -> c_int,
    pub call: Variadic<*mut RedisModuleCallReply>,
    pub call_reply_type: unsafe extern "C" fn(*mut RedisModuleCallReply) -> c_int,
    pub call_reply_string_ptr: unsafe extern "C" fn(*mut RedisModuleCallReply, *mut usize) -> *const c_char,
    pub free_call_reply: unsafe extern "C" fn(*mut RedisModuleCallReply),
    pub reply_with_array: unsafe extern "C" fn(*mut RedisModuleCtx, c_long) -> c_int,
    pub reply_with_long_long: unsafe extern "C" fn(*mut RedisModuleCtx, c_longlong) -> c_int,
    pub reply_with_error: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char) -> c_int,
    pub reply_with_string_buffer: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char, usize) -> c_int,
    pub notify_keyspace_event:
        unsafe extern "C" fn(*mut RedisModuleCtx, c_int, *const c_char, *mut RedisModuleString) -> c_int,
    pub signal_modified_key: unsafe extern "C" fn(*mut RedisModuleCtx, *mut RedisModuleString) -> c_int,
    pub string_ptr_len: unsafe extern "C" fn(*const RedisModuleString, *mut usize) -> *const c_char,
    pub is_keys_position_request: unsafe extern "C" fn(*mut RedisModuleCtx) -> c_int,
    /// The key name's object of an open key (6.0+): how `store::peek` checks the key handle.
    pub get_key_name_from_module_key: Option<unsafe extern "C" fn(*mut RedisModuleKey) -> *const RedisModuleString>,
    pub key_at_pos: unsafe extern "C" fn(*mut RedisModuleCtx, c_int),
    /// Redis 7.2+ / Valkey: the command's cached time, frozen for a whole MULTI, script or function.
    pub cached_microseconds: Option<unsafe extern "C" fn() -> ustime_t>,
    /// The server's `notify-keyspace-events` classes (6.0+): read before announcing a denial.
    pub get_notify_keyspace_events: Option<unsafe extern "C" fn() -> c_int>,
    /// `INFO` sections of the module (6.0+).
    pub info_add_section: Option<unsafe extern "C" fn(*mut RedisModuleInfoCtx, *const c_char) -> c_int>,
    pub info_add_field_long_long:
        Option<unsafe extern "C" fn(*mut RedisModuleInfoCtx, *const c_char, c_longlong) -> c_int>,
    pub info_add_field_cstring:
        Option<unsafe extern "C" fn(*mut RedisModuleInfoCtx, *const c_char, *const c_char) -> c_int>,
    pub free_string: unsafe extern "C" fn(*mut RedisModuleCtx, *mut RedisModuleString),
    pub create_string: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char, usize) -> *mut RedisModuleString,
    /// Sorted sets (the lease sets of CL.ACQUIRE and CL.RELEASE).
    pub zset_add: unsafe extern "C" fn(*mut RedisModuleKey, f64, *mut RedisModuleString, *mut c_int) -> c_int,
    pub zset_rem: unsafe extern "C" fn(*mut RedisModuleKey, *mut RedisModuleString, *mut c_int) -> c_int,
    pub zset_score: unsafe extern "C" fn(*mut RedisModuleKey, *mut RedisModuleString, *mut f64) -> c_int,
    pub zset_first_in_score_range: unsafe extern "C" fn(*mut RedisModuleKey, f64, f64, c_int, c_int) -> c_int,
    pub zset_last_in_score_range: unsafe extern "C" fn(*mut RedisModuleKey, f64, f64, c_int, c_int) -> c_int,
    pub zset_range_current_element: unsafe extern "C" fn(*mut RedisModuleKey, *mut f64) -> *mut RedisModuleString,
    pub zset_range_next: unsafe extern "C" fn(*mut RedisModuleKey) -> c_int,
    pub zset_range_prev: unsafe extern "C" fn(*mut RedisModuleKey) -> c_int,
    pub zset_range_stop: unsafe extern "C" fn(*mut RedisModuleKey),
    /// Blocked clients and timers (CL.PACE … BLOCK).
    pub get_context_flags: unsafe extern "C" fn(*mut RedisModuleCtx) -> c_int,
    pub block_client: unsafe extern "C" fn(
        *mut RedisModuleCtx,
        RedisModuleCmdFunc,
        RedisModuleCmdFunc,
        Option<unsafe extern "C" fn(*mut RedisModuleCtx, *mut c_void)>,
        c_longlong,
    ) -> *mut RedisModuleBlockedClient,
    pub unblock_client: unsafe extern "C" fn(*mut RedisModuleBlockedClient, *mut c_void) -> c_int,
    pub set_disconnect_callback: unsafe extern "C" fn(*mut RedisModuleBlockedClient, RedisModuleDisconnectFunc),
    pub get_blocked_client_private_data: unsafe extern "C" fn(*mut RedisModuleCtx) -> *mut c_void,
    pub get_blocked_client_handle: unsafe extern "C" fn(*mut RedisModuleCtx) -> *mut RedisModuleBlockedClient,
    pub create_timer:
        unsafe extern "C" fn(*mut RedisModuleCtx, mstime_t, RedisModuleTimerProc, *mut c_void) -> RedisModuleTimerID,
    pub stop_timer: unsafe extern "C" fn(*mut RedisModuleCtx, RedisModuleTimerID, *mut *mut c_void) -> c_int,
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
        replicate_verbatim: required!(RedisModule_ReplicateVerbatim),
        call: required!(RedisModule_Call),
        call_reply_type: required!(RedisModule_CallReplyType),
        call_reply_string_ptr: required!(RedisModule_CallReplyStringPtr),
        free_call_reply: required!(RedisModule_FreeCallReply),
        reply_with_array: required!(RedisModule_ReplyWithArray),
        reply_with_long_long: required!(RedisModule_ReplyWithLongLong),
        reply_with_error: required!(RedisModule_ReplyWithError),
        reply_with_string_buffer: required!(RedisModule_ReplyWithStringBuffer),
        notify_keyspace_event: required!(RedisModule_NotifyKeyspaceEvent),
        signal_modified_key: required!(RedisModule_SignalModifiedKey),
        string_ptr_len: required!(RedisModule_StringPtrLen),
        is_keys_position_request: required!(RedisModule_IsKeysPositionRequest),
        get_key_name_from_module_key: optional!(RedisModule_GetKeyNameFromModuleKey),
        key_at_pos: required!(RedisModule_KeyAtPos),
        cached_microseconds: optional!(RedisModule_CachedMicroseconds),
        get_notify_keyspace_events: optional!(RedisModule_GetNotifyKeyspaceEvents),
        info_add_section: optional!(RedisModule_InfoAddSection),
        info_add_field_long_long: optional!(RedisModule_InfoAddFieldLongLong),
        info_add_field_cstring: optional!(RedisModule_InfoAddFieldCString),
        free_string: required!(RedisModule_FreeString),
        create_string: required!(RedisModule_CreateString),
        zset_add: required!(RedisModule_ZsetAdd),
        zset_rem: required!(RedisModule_ZsetRem),
        zset_score: required!(RedisModule_ZsetScore),
        zset_first_in_score_range: required!(RedisModule_ZsetFirstInScoreRange),
        zset_last_in_score_range: required!(RedisModule_ZsetLastInScoreRange),
        zset_range_current_element: required!(RedisModule_ZsetRangeCurrentElement),
        zset_range_next: required!(RedisModule_ZsetRangeNext),
        zset_range_prev: required!(RedisModule_ZsetRangePrev),
        zset_range_stop: required!(RedisModule_ZsetRangeStop),
        get_context_flags: required!(RedisModule_GetContextFlags),
        block_client: required!(RedisModule_BlockClient),
        unblock_client: required!(RedisModule_UnblockClient),
        set_disconnect_callback: required!(RedisModule_SetDisconnectCallback),
        get_blocked_client_private_data: required!(RedisModule_GetBlockedClientPrivateData),
        get_blocked_client_handle: required!(RedisModule_GetBlockedClientHandle),
        create_timer: required!(RedisModule_CreateTimer),
        stop_timer: required!(RedisModule_StopTimer),
    };
    // A second load of the module in one process keeps the first resolution: the pointers
    // are the same server's.
    let _ = API.set(api);
    Ok(())
}
