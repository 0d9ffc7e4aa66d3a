//! A limiter's key: an ordinary Redis string with an expiry, read and written through the
//! key API and replicated as plain commands with absolute times, so that replicas, AOF
//! replays and servers without the module reproduce it byte for byte.

use std::os::raw::c_int;

use redis_module::raw::{self, RedisModuleKey, RedisModuleString};
use throttle_core::limiter::Stored;
use throttle_core::{Effect, Error, Patch, Result};

use crate::dispatch::Call;

/// Values up to this length are reallocated to their exact size when they grow; longer
/// ones grow as Redis grows strings (amortised O(1), up to twice the length).
const EXACT_GROWTH_UP_TO: usize = 4096;

/// What can be stored as a limiter's value. Implementations write the value, its expiry
/// and the replicated commands that reproduce both.
pub trait Value {
    fn store(&self, key: LimiterKey, expires_ms: i64) -> Result<()>;
}

pub struct LimiterKey {
    ctx: *mut raw::RedisModuleCtx,
    name: *mut RedisModuleString,
    /// Null once closed.
    key: *mut RedisModuleKey,
    /// The value read when the key was opened (`None`: no key), as Redis's own bytes: read
    /// once per call, valid until the value is written (`apply` consumes the key).
    value: Option<(*const u8, usize)>,
}

macro_rules! api {
    ($f:ident) => {
        {
            // SAFETY: a copy of the function pointer Redis filled in at load time.
            #[allow(unused_unsafe)]
            let f = unsafe { raw::$f };
            f.ok_or_else(|| Error::Internal(concat!(stringify!($f), " is not available").into()))?
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
        let mut opened = LimiterKey { ctx: call.ctx, name, key, value: None };
        match unsafe { key_type(key) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => {}
            raw::REDISMODULE_KEYTYPE_STRING => {
                let mut len = 0usize;
                let ptr = unsafe { api!(RedisModule_StringDMA)(key, &mut len, raw::REDISMODULE_READ as c_int) };
                if ptr.is_null() {
                    return Err(Error::WrongType);
                }
                opened.value = Some((ptr.cast::<u8>().cast_const(), len));
            }
            _ => return Err(Error::WrongType),
        }
        Ok(opened)
    }

    /// The stored bytes, `None` when the key does not exist.
    fn value(&self) -> Option<&[u8]> {
        // SAFETY: Redis's bytes of the open key, unchanged until a write consumes the key.
        self.value.map(|(ptr, len)| unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// What the key holds, for a limiter to decide on; its expiry only when asked for.
    pub fn stored(&self, with_expiry: bool) -> Result<Option<Stored<'_>>> {
        let Some(value) = self.value() else { return Ok(None) };
        let expires_at_ms = if with_expiry { self.expires_at_ms()? } else { None };
        Ok(Some(Stored { value, expires_at_ms }))
    }

    /// The key's absolute expiry in Unix milliseconds, `None` when it has none.
    fn expires_at_ms(&self) -> Result<Option<i64>> {
        let at = if let Some(abs) = unsafe { raw::RedisModule_GetAbsExpire } {
            unsafe { abs(self.key) }
        } else {
            // Before 7.0.5: a relative TTL from the server's clock.
            let ttl = unsafe { api!(RedisModule_GetExpire)(self.key) };
            if ttl == raw::REDISMODULE_NO_EXPIRE as i64 { ttl } else { crate::clock::now().ceil_millis().saturating_add(ttl) }
        };
        Ok((at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at))
    }

    /// Applies a decision's effect. Consumes the key: after a write it must not be read.
    pub fn apply<V: Value>(self, effect: Effect<V>) -> Result<()> {
        match effect {
            Effect::Nothing => Ok(()),
            Effect::Store { state, expires_at } => state.store(self, expires_at.ceil_millis()),
            Effect::Delete if self.value.is_none() => Ok(()),
            Effect::Delete => {
                unsafe { api!(RedisModule_DeleteKey)(self.key) };
                unsafe { api!(RedisModule_Replicate)(self.ctx, c"DEL".as_ptr(), c"s".as_ptr(), self.name) };
                self.wrote(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
                Ok(())
            }
        }
    }

    /// Creates or replaces the value through Redis's own `SET key value PXAT ms`: the value
    /// gets SET's compact encoding (an integer costs no more than `SET key <int>`), and SET
    /// itself notifies, marks the dataset dirty and propagates, with an absolute time.
    fn set(mut self, value: &[u8], expires_ms: i64) -> Result<()> {
        self.close(); // SET replaces the value under any open handle
        let at = Decimal::new(expires_ms);
        let at = at.as_bytes();
        let call = api!(RedisModule_Call);
        let reply = unsafe {
            call(self.ctx, c"SET".as_ptr(), c"!sbcb".as_ptr(), self.name, value.as_ptr(), value.len(), c"PXAT".as_ptr(), at.as_ptr(), at.len())
        };
        if reply.is_null() {
            return Err(Error::Internal(format!("SET failed: {}", std::io::Error::last_os_error())));
        }
        let failed = unsafe { api!(RedisModule_CallReplyType)(reply) } as isize == raw::REDISMODULE_REPLY_ERROR;
        let outcome = if failed {
            let mut len = 0usize;
            let text = unsafe { api!(RedisModule_CallReplyStringPtr)(reply, &mut len) };
            let text = if text.is_null() { &[][..] } else { unsafe { std::slice::from_raw_parts(text.cast::<u8>(), len) } };
            Err(Error::Internal(format!("SET failed: {}", String::from_utf8_lossy(text))))
        } else {
            Ok(())
        };
        unsafe { api!(RedisModule_FreeCallReply)(reply) };
        outcome
    }

    /// Overwrites the existing value's bytes in place (no reallocation) and moves its expiry.
    /// The caller replicates.
    fn overwrite(&self, value: &[u8], expires_ms: i64) -> Result<()> {
        self.resize_for_writing(value.len())?.copy_from_slice(value);
        self.set_expiry(expires_ms)
    }

    /// The existing value resized to `len` (growth zero-filled), writable in place.
    fn resize_for_writing(&self, len: usize) -> Result<&mut [u8]> {
        let truncate = api!(RedisModule_StringTruncate);
        let resize = |to: usize| match unsafe { truncate(self.key, to) } {
            status if status == raw::Status::Ok as c_int => Ok(()),
            _ => Err(Error::Internal("cannot resize the value".into())),
        };
        let old = self.value.map_or(0, |(_, len)| len);
        if len > old && len <= EXACT_GROWTH_UP_TO {
            // Redis grows strings greedily (up to twice the length). For a small value, grow
            // one byte more and shrink back: Redis then reallocates it to its exact size,
            // which keeps a window's log within 16 bytes per action.
            resize(len + 1)?;
            resize(len)?;
        } else if len != old {
            resize(len)?;
        }
        let mut got = 0usize;
        let ptr = unsafe { api!(RedisModule_StringDMA)(self.key, &mut got, raw::REDISMODULE_WRITE as c_int) };
        if ptr.is_null() || got != len {
            return Err(Error::Internal("cannot write the value in place".into()));
        }
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) })
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

    /// After a write through the key API: keyspace notification, and WATCH / client tracking.
    fn wrote(&self, class: c_int, event: &std::ffi::CStr) {
        if let Some(notify) = unsafe { raw::RedisModule_NotifyKeyspaceEvent } {
            unsafe { notify(self.ctx, class, event.as_ptr(), self.name) };
        }
        if let Some(signal) = unsafe { raw::RedisModule_SignalModifiedKey } {
            unsafe { signal(self.ctx, self.name) };
        }
    }

    fn close(&mut self) {
        if !self.key.is_null() {
            if let Some(close) = unsafe { raw::RedisModule_CloseKey } {
                unsafe { close(self.key) };
            }
            self.key = std::ptr::null_mut();
        }
    }
}

impl Drop for LimiterKey {
    fn drop(&mut self) {
        self.close();
    }
}

/// An integer value (a TAT, a count, a deficit), stored as its decimal text like `SET key <int>`.
impl Value for i64 {
    fn store(&self, key: LimiterKey, expires_ms: i64) -> Result<()> {
        let digits = Decimal::new(*self);
        let text = digits.as_bytes();
        if key.value.map(|(_, len)| len) != Some(text.len()) {
            return key.set(text, expires_ms);
        }
        // Same length (a TAT always is): rewrite the digits in place, then replicate the
        // equivalent `SET key <value> PXAT <ms>` (numbers as text buffers, cheapest for Redis).
        key.overwrite(text, expires_ms)?;
        let at = Decimal::new(expires_ms);
        let at = at.as_bytes();
        unsafe {
            api!(RedisModule_Replicate)(key.ctx, c"SET".as_ptr(), c"sbcb".as_ptr(), key.name, text.as_ptr(), text.len(), c"PXAT".as_ptr(), at.as_ptr(), at.len())
        };
        key.wrote(raw::REDISMODULE_NOTIFY_STRING, c"set");
        Ok(())
    }
}

/// A binary value edited in place (CL.WINDOW's log): the patch's chunks are written into the
/// existing string and replicated as `SETRANGE`s plus `PEXPIREAT`, so a call costs what it
/// changes. A new key, a whole rewrite or a shrink goes as one `SET … PXAT`.
impl Value for Patch {
    fn store(&self, key: LimiterKey, expires_ms: i64) -> Result<()> {
        match key.value() {
            Some(old) if !self.is_whole() && self.len >= old.len() => {}
            old => {
                let mut whole = old.map(<[u8]>::to_vec).unwrap_or_default();
                self.apply(&mut whole);
                return key.set(&whole, expires_ms);
            }
        }
        let buf = key.resize_for_writing(self.len)?;
        for (offset, bytes) in &self.chunks {
            let target = offset
                .checked_add(bytes.len())
                .and_then(|end| buf.get_mut(*offset..end))
                .ok_or_else(|| Error::Internal("a patch chunk lies outside the value".into()))?;
            target.copy_from_slice(bytes);
        }
        key.set_expiry(expires_ms)?;
        let replicate = api!(RedisModule_Replicate);
        for (offset, bytes) in &self.chunks {
            let offset = Decimal::new(i64::try_from(*offset).unwrap_or(i64::MAX));
            let offset = offset.as_bytes();
            unsafe {
                replicate(key.ctx, c"SETRANGE".as_ptr(), c"sbb".as_ptr(), key.name, offset.as_ptr(), offset.len(), bytes.as_ptr(), bytes.len())
            };
        }
        let at = Decimal::new(expires_ms);
        let at = at.as_bytes();
        unsafe { replicate(key.ctx, c"PEXPIREAT".as_ptr(), c"sb".as_ptr(), key.name, at.as_ptr(), at.len()) };
        key.wrote(raw::REDISMODULE_NOTIFY_STRING, c"setrange");
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
