//! A limiter's key: an ordinary Redis string with an expiry, read and written through the
//! key API and replicated as plain commands with absolute times, so that replicas, AOF
//! replays and servers without the module reproduce it byte for byte.

use std::os::raw::{c_int, c_longlong};

use redis_module::raw::{self, RedisModuleKey, RedisModuleString};
use throttle_core::{Effect, Error, Result};

use crate::dispatch::Call;

/// What can be stored as a limiter's value.
pub trait Value {
    /// Writes `self` into the open key (which exists as a string of `old` bytes, or not at all)
    /// and replicates the write, with the key expiring at `expires_ms`.
    fn write(&self, key: &LimiterKey, old: Option<usize>, expires_ms: i64) -> Result<()>;
}

pub struct LimiterKey {
    ctx: *mut raw::RedisModuleCtx,
    name: *mut RedisModuleString,
    key: *mut RedisModuleKey,
}

macro_rules! api {
    ($f:ident) => {
        {
            // SAFETY: a copy of the function pointer Redis filled in at load time.
            #[allow(unused_unsafe)]
            let f = unsafe { raw::$f };
            f.ok_or(Error::Internal(concat!(stringify!($f), " is not available").into()))?
        }
    };
}

impl LimiterKey {
    /// Opens the call's key for reading and writing. WRONGTYPE unless it is missing or a string.
    pub fn open(call: &Call) -> Result<LimiterKey> {
        let name = call.key_name()?;
        let open = api!(RedisModule_OpenKey);
        let key_type = api!(RedisModule_KeyType);
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        let key = unsafe { open(call.ctx, name, mode) }.cast::<RedisModuleKey>();
        if key.is_null() {
            return Err(Error::Internal("cannot open key".into()));
        }
        let opened = LimiterKey { ctx: call.ctx, name, key };
        match unsafe { key_type(key) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY | raw::REDISMODULE_KEYTYPE_STRING => Ok(opened),
            _ => Err(Error::WrongType),
        }
    }

    /// The stored bytes, `None` when the key does not exist.
    pub fn value(&self) -> Result<Option<&[u8]>> {
        if self.is_empty()? {
            return Ok(None);
        }
        let dma = api!(RedisModule_StringDMA);
        let mut len = 0usize;
        let ptr = unsafe { dma(self.key, &mut len, raw::REDISMODULE_READ as c_int) };
        if ptr.is_null() {
            return Err(Error::WrongType);
        }
        // SAFETY: valid until the key is modified or closed; callers decode before writing.
        Ok(Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }))
    }

    /// The key's absolute expiry in Unix milliseconds, `None` when it has none.
    pub fn expires_at_ms(&self) -> Result<Option<i64>> {
        let at = if let Some(abs) = unsafe { raw::RedisModule_GetAbsExpire } {
            unsafe { abs(self.key) }
        } else {
            // Before 7.0.5: a relative TTL from the server's clock.
            let ttl = unsafe { api!(RedisModule_GetExpire)(self.key) };
            if ttl == raw::REDISMODULE_NO_EXPIRE as i64 { ttl } else { crate::clock::now().ceil_millis().saturating_add(ttl) }
        };
        Ok((at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at))
    }

    fn is_empty(&self) -> Result<bool> {
        Ok(unsafe { api!(RedisModule_KeyType)(self.key) } as isize == raw::REDISMODULE_KEYTYPE_EMPTY)
    }

    /// Applies a decision's effect: store (in place where the length allows), or delete.
    pub fn apply<V: Value>(&self, effect: Effect<V>) -> Result<()> {
        match effect {
            Effect::Nothing => return Ok(()),
            Effect::Store { state, expires_at } => {
                let old = self.value()?.map(<[u8]>::len);
                let expires_ms = expires_at.ceil_millis();
                state.write(self, old, expires_ms)?;
                self.set_expiry(expires_ms)?;
                self.notify(raw::REDISMODULE_NOTIFY_STRING, c"set");
            }
            Effect::Delete => {
                if self.is_empty()? {
                    return Ok(());
                }
                unsafe { api!(RedisModule_DeleteKey)(self.key) };
                unsafe { api!(RedisModule_Replicate)(self.ctx, c"DEL".as_ptr(), c"s".as_ptr(), self.name) };
                self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
            }
        }
        if let Some(signal) = unsafe { raw::RedisModule_SignalModifiedKey } {
            unsafe { signal(self.ctx, self.name) };
        }
        Ok(())
    }

    fn set_expiry(&self, expires_ms: i64) -> Result<()> {
        if let Some(abs) = unsafe { raw::RedisModule_SetAbsExpire } {
            unsafe { abs(self.key, expires_ms) };
        } else {
            let ttl = expires_ms.saturating_sub(crate::clock::now().ceil_millis()).max(1);
            unsafe { api!(RedisModule_SetExpire)(self.key, ttl) };
        }
        Ok(())
    }

    fn notify(&self, class: c_int, event: &std::ffi::CStr) {
        if let Some(notify) = unsafe { raw::RedisModule_NotifyKeyspaceEvent } {
            unsafe { notify(self.ctx, class, event.as_ptr(), self.name) };
        }
    }

    /// Writable bytes of the existing string value, resized to `len` first.
    fn bytes_mut(&self, len: usize) -> Result<&mut [u8]> {
        let current = self.value()?.map_or(0, <[u8]>::len);
        if current != len && unsafe { api!(RedisModule_StringTruncate)(self.key, len) } != raw::Status::Ok as c_int {
            return Err(Error::Internal("cannot resize the value".into()));
        }
        let mut got = 0usize;
        let ptr = unsafe { api!(RedisModule_StringDMA)(self.key, &mut got, raw::REDISMODULE_WRITE as c_int) };
        if ptr.is_null() || got != len {
            return Err(Error::Internal("cannot write the value".into()));
        }
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) })
    }
}

impl Drop for LimiterKey {
    fn drop(&mut self) {
        if let Some(close) = unsafe { raw::RedisModule_CloseKey } {
            unsafe { close(self.key) };
        }
    }
}

/// An integer value (a TAT, a count, a deficit), stored as its decimal text like `SET key <int>`.
impl Value for i64 {
    fn write(&self, key: &LimiterKey, old: Option<usize>, expires_ms: i64) -> Result<()> {
        let digits = Decimal::new(*self);
        let text = digits.as_bytes();
        if old == Some(text.len()) {
            // Same length (a TAT always is): overwrite in place, no reallocation.
            key.bytes_mut(text.len())?.copy_from_slice(text);
        } else {
            // A new key: an integer-encoded value, as compact as `SET key <int>`.
            let create = api!(RedisModule_CreateStringFromLongLong);
            let value = unsafe { create(key.ctx, *self) };
            let status = unsafe { api!(RedisModule_StringSet)(key.key, value) };
            unsafe { api!(RedisModule_FreeString)(key.ctx, value) };
            if status != raw::Status::Ok as c_int {
                return Err(Error::Internal("cannot set the value".into()));
            }
        }
        // `SET key <value> PXAT <ms>`: absolute, so every copy expires at the same instant.
        let replicate = api!(RedisModule_Replicate);
        unsafe { replicate(key.ctx, c"SET".as_ptr(), c"slcl".as_ptr(), key.name, *self as c_longlong, c"PXAT".as_ptr(), expires_ms as c_longlong) };
        Ok(())
    }
}

/// The decimal text of an i64, formatted on the stack (this runs on every call).
struct Decimal {
    bytes: [u8; 20],
    start: usize,
}

impl Decimal {
    fn new(v: i64) -> Decimal {
        let mut d = Decimal { bytes: [0; 20], start: 20 };
        let mut n = v.unsigned_abs();
        loop {
            d.start -= 1;
            d.bytes[d.start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if v < 0 {
            d.start -= 1;
            d.bytes[d.start] = b'-';
        }
        d
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}
