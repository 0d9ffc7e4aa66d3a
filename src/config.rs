//! The module's configs, through the server's module-config API (Redis 7.0+, Valkey):
//!
//! | config | values | default |
//! |---|---|---|
//! | `throttle.mode` | `enforce` \| `shadow` | `enforce` |
//! | `throttle.max-exact-limit` | 1 to 200,000 | 100,000 |
//! | `throttle.max-buckets` | 1 to 100,000 | 10,000 |
//!
//! `CONFIG SET/GET/REWRITE` work on them and the server validates the values itself; a
//! `throttle.<name> <value>` line in redis.conf or `MODULE LOADEX … CONFIG` applies at load.
//! Module arguments (`loadmodule …so mode shadow`) set the defaults, which a config line or a
//! `CONFIG SET` then overrides (`CONFIG REWRITE` writes a value only when it differs from the
//! default, so a restart with the same arguments keeps what was set). A server without module
//! configs takes the module arguments as the values.
//!
//! Commands read the values on every call: each is one relaxed atomic load.

use std::ffi::{CStr, c_char, c_void};
use std::os::raw::{c_int, c_longlong, c_uint};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

use redis_module::RedisString;
use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};
use redis_throttle_core::Caps;

static SHADOW: AtomicBool = AtomicBool::new(false);
static MAX_EXACT_LIMIT: AtomicI64 = AtomicI64::new(Caps::DEFAULT.max_exact_limit);
static MAX_BUCKETS: AtomicI64 = AtomicI64::new(Caps::DEFAULT.max_buckets);

/// Whether the node answers denials as admissions (`throttle.mode shadow`).
#[inline]
pub fn shadow() -> bool {
    SHADOW.load(Relaxed)
}

/// The argument caps now in force.
#[inline]
pub fn caps() -> Caps {
    Caps { max_exact_limit: MAX_EXACT_LIMIT.load(Relaxed), max_buckets: MAX_BUCKETS.load(Relaxed) }
}

/// The module arguments: `name value` pairs, names with or without `throttle.`, any case.
pub struct Args {
    /// `debug-commands yes`: register `CL.DEBUG` (tests only).
    pub debug_commands: bool,
    shadow: bool,
    max_exact_limit: i64,
    max_buckets: i64,
}

/// The numeric configs: name, the value they set, their bounds.
static NUMERIC: [(&CStr, &AtomicI64, i64, i64); 2] = [
    (c"max-exact-limit", &MAX_EXACT_LIMIT, Caps::FLOOR, Caps::CEILING.max_exact_limit),
    (c"max-buckets", &MAX_BUCKETS, Caps::FLOOR, Caps::CEILING.max_buckets),
];

impl Args {
    pub fn parse(args: &[RedisString]) -> Result<Args, String> {
        let mut parsed = Args {
            debug_commands: false,
            shadow: false,
            max_exact_limit: Caps::DEFAULT.max_exact_limit,
            max_buckets: Caps::DEFAULT.max_buckets,
        };
        let words: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(a.as_slice()).into_owned()).collect();
        for pair in words.chunks(2) {
            let [name, value] = pair else { return Err(format!("module argument '{}' has no value", pair[0])) };
            let lower = name.to_ascii_lowercase();
            let key = lower.strip_prefix("throttle.").unwrap_or(&lower);
            let number = |most: i64| value.parse::<i64>().ok().filter(|v| (Caps::FLOOR..=most).contains(v));
            let bad = || format!("module argument {name} must be {}, not '{value}'", expected(key));
            match key {
                "debug-commands" => parsed.debug_commands = yes_no(value).ok_or_else(bad)?,
                "mode" => parsed.shadow = shadow_mode(value).ok_or_else(bad)?,
                "max-exact-limit" => parsed.max_exact_limit = number(Caps::CEILING.max_exact_limit).ok_or_else(bad)?,
                "max-buckets" => parsed.max_buckets = number(Caps::CEILING.max_buckets).ok_or_else(bad)?,
                _ => {
                    return Err(format!(
                        "unknown module argument '{name}' (expected mode, max-exact-limit, max-buckets or debug-commands)"
                    ));
                }
            }
        }
        Ok(parsed)
    }
}

fn expected(key: &str) -> String {
    match key {
        "debug-commands" => "yes or no".into(),
        "mode" => "enforce or shadow".into(),
        "max-exact-limit" => format!("an integer from 1 to {}", Caps::CEILING.max_exact_limit),
        _ => format!("an integer from 1 to {}", Caps::CEILING.max_buckets),
    }
}

fn yes_no(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

fn shadow_mode(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "enforce" => Some(false),
        "shadow" => Some(true),
        _ => None,
    }
}

/// Registers the configs with the module arguments as their defaults and loads the values the
/// server holds for them (redis.conf, `MODULE LOADEX … CONFIG`). On a server without module
/// configs, the arguments are the values.
pub fn register(ctx: *mut RedisModuleCtx, args: &Args) -> Result<(), String> {
    SHADOW.store(args.shadow, Relaxed);
    MAX_EXACT_LIMIT.store(args.max_exact_limit, Relaxed);
    MAX_BUCKETS.store(args.max_buckets, Relaxed);
    // SAFETY: copies of function pointers the server filled in; `None` before Redis 7.0.
    let (Some(enum_config), Some(numeric_config), Some(load)) =
        (unsafe { raw::RedisModule_RegisterEnumConfig }, unsafe { raw::RedisModule_RegisterNumericConfig }, unsafe {
            raw::RedisModule_LoadConfigs
        })
    else {
        return Ok(());
    };
    let flags = raw::REDISMODULE_CONFIG_DEFAULT as c_uint;
    // The server copies the names and values.
    let mut names: [*const c_char; 2] = [c"enforce".as_ptr(), c"shadow".as_ptr()];
    let values: [c_int; 2] = [0, 1];
    // SAFETY: a valid context; the arrays and strings live until the call returns; the
    // callbacks match the server's types.
    let status = unsafe {
        enum_config(
            ctx,
            c"mode".as_ptr(),
            c_int::from(args.shadow),
            flags,
            names.as_mut_ptr(),
            values.as_ptr(),
            2,
            Some(get_mode),
            Some(set_mode),
            None,
            std::ptr::null_mut(),
        )
    };
    if status != raw::Status::Ok as c_int {
        return Err("cannot register the config throttle.mode".into());
    }
    for &(name, value, min, max) in NUMERIC.iter() {
        let default = value.load(Relaxed);
        // The config's value: a static, so the pointer stays valid for the process.
        let privdata = std::ptr::from_ref(value).cast_mut().cast::<c_void>();
        // SAFETY: as above.
        let status = unsafe {
            numeric_config(
                ctx,
                name.as_ptr(),
                default,
                flags,
                min,
                max,
                Some(get_number),
                Some(set_number),
                None,
                privdata,
            )
        };
        if status != raw::Status::Ok as c_int {
            return Err(format!("cannot register the config throttle.{}", name.to_string_lossy()));
        }
    }
    // SAFETY: a valid context, after every config of the module was registered.
    if unsafe { load(ctx) } != raw::Status::Ok as c_int {
        return Err("a throttle.* value given at load is invalid (see the line above)".into());
    }
    Ok(())
}

unsafe extern "C" fn get_mode(_name: *const c_char, _privdata: *mut c_void) -> c_int {
    c_int::from(shadow())
}

unsafe extern "C" fn set_mode(
    _name: *const c_char,
    value: c_int,
    _privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    // The server passes only the registered values (0 enforce, 1 shadow).
    SHADOW.store(value == 1, Relaxed);
    raw::Status::Ok as c_int
}

unsafe extern "C" fn get_number(_name: *const c_char, privdata: *mut c_void) -> c_longlong {
    // SAFETY: `privdata` is the `&'static AtomicI64` registered with this config.
    unsafe { &*privdata.cast::<AtomicI64>() }.load(Relaxed)
}

unsafe extern "C" fn set_number(
    _name: *const c_char,
    value: c_longlong,
    privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    // SAFETY: as above. The server has checked the value against the registered bounds.
    unsafe { &*privdata.cast::<AtomicI64>() }.store(value, Relaxed);
    raw::Status::Ok as c_int
}
