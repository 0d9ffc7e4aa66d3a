//! A limiter's key: an ordinary Redis string with an expiry, read and written through the key
//! API and replicated as plain commands with absolute times, so that replicas, AOF replays and
//! servers without the module reproduce it byte for byte.
//!
//! Applying an effect is all or nothing: [`Key::prepare`] checks everything that could fail
//! (sizes, patch bounds, the expiry) before [`Key::apply`] writes the first byte, and every
//! write is replicated and announced (keyspace events) as the equivalent Redis commands would
//! be: `SET key value PXAT ms` (`set`, `expire`), `SETRANGE` (`setrange`) and `PEXPIREAT`
//! (`expire`), `DEL` (`del`). While nothing can receive the replication stream (a server run as
//! a cache), those commands are not built at all (`replication`).

use std::borrow::Cow;
use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleKey, RedisModuleString};
use redis_throttle_core::args::Decimal;
use redis_throttle_core::limiter::{Algorithm, Stored, Write};
use redis_throttle_core::{Effect, Error, Patch, Result};

use crate::api::api;
use crate::dispatch::Call;

mod peek;
mod replication;
mod zset;

/// The longest value a limiter may write: Redis's own limit for a string.
const MAX_VALUE: usize = 512 * 1024 * 1024;

/// Values up to this length may be held in a compact encoding (an integer, or a string stored
/// with its object), which reading through `RedisModule_StringDMA` would convert to a plain
/// string (see `peek`); longer ones are always plain strings.
const COMPACT_UP_TO: usize = 64;

/// Redis stores a string shorter than this with no room to grow (its smallest header).
const SHORTEST_WITH_ROOM: usize = 32;

/// Values up to this length keep no more room than their allocator size class holds when they
/// grow (see [`room`]); longer ones grow as Redis grows strings (amortised O(1), up to twice
/// the length).
const EXACT_GROWTH_UP_TO: usize = 4096;

/// The capacity a small value growing to `len` bytes keeps: the rest of the allocator's size
/// class holding it, so that it takes about the memory an exact allocation would, yet a log
/// appends in place until it fills the class. Up to 256 bytes the classes taken are every other
/// one of jemalloc's (Redis's default allocator: 32-byte steps to 128, then 64-byte steps), so
/// that a short log grows in place for four to eight appends, at most 16 or 32 bytes beyond an
/// exact allocation; from there on, jemalloc's own (four per doubling). A step function with
/// `room(len) > len`: every length up to a room has that same room, so a value given it keeps
/// it until it outgrows it. The header counted is the largest a string under 64 KiB has
/// (5 bytes), plus its terminator. (With another allocator only the number of reallocations
/// changes, never a byte of the value.)
fn room(len: usize) -> usize {
    const HEADER: usize = 5;
    // Plus the terminator, plus one so that the room exceeds `len`.
    let need = len + HEADER + 2;
    let class = match need {
        ..=128 => need.next_multiple_of(32),
        129..=256 => need.next_multiple_of(64),
        _ => need.next_multiple_of(need.next_power_of_two() / 8),
    };
    class - HEADER - 1
}

/// A key opened (for reading and writing) for one call.
pub struct Key {
    ctx: *mut RedisModuleCtx,
    name: *mut RedisModuleString,
    key: *mut RedisModuleKey,
    /// The key held nothing when opened.
    empty: bool,
    value: Value,
    expires_at_ms: Option<i64>,
}

/// The value as read when the key was loaded.
enum Value {
    Missing,
    /// Redis's own bytes (`RedisModule_StringDMA` in WRITE mode), valid until the key is
    /// closed or resized: read by `stored`, and written in place by `writable` when the new
    /// value has the same length.
    Borrowed(*mut u8, usize),
    /// A copy of a value that may be compactly encoded, read without converting it.
    Copied([u8; COMPACT_UP_TO], usize),
}

impl Key {
    /// Opens argument `word` (after the command name) as a key, for reading and writing.
    /// WRONGTYPE unless it is missing or a string.
    #[inline(always)]
    pub fn open(call: &Call, word: usize) -> Result<Key> {
        let name = call.word(word)?;
        let api = api();
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: a valid context and argument string; the handle is closed on drop.
        let key = unsafe { (api.open_key)(call.ctx, name, mode) };
        if key.is_null() {
            return Err(Error::Internal("cannot open key".into()));
        }
        // SAFETY: an open key.
        let empty = match unsafe { (api.key_type)(key) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => true,
            raw::REDISMODULE_KEYTYPE_STRING => false,
            _ => {
                // SAFETY: the handle just opened, closed once.
                unsafe { (api.close_key)(key) };
                return Err(Error::WrongType);
            }
        };
        Ok(Key { ctx: call.ctx, name, key, empty, value: Value::Missing, expires_at_ms: None })
    }

    /// Reads the value for `algorithm`, leaving it stored as it is (see `peek`): a plain string
    /// in place, an integer or an embedded string copied from where Redis keeps it; a short value
    /// whose storage cannot be told is copied through `GET`.
    #[inline(always)]
    pub fn load(&mut self, algorithm: Algorithm) -> Result<()> {
        let api = api();
        if self.empty {
            return Ok(());
        }
        // SAFETY: an open string key.
        let len = unsafe { (api.value_length)(self.key) };
        let name_len = crate::dispatch::bytes(self.name).len();
        // SAFETY: an open key holding a string.
        self.value = match unsafe { peek::peek(self.key, name_len, len) } {
            peek::Peeked::Plain => {
                let value = self.borrow()?;
                if let Value::Borrowed(ptr, _) = value {
                    // SAFETY: an open string key; the pointer `StringDMA` just returned.
                    unsafe { peek::confirm_plain(self.key, ptr) };
                }
                value
            }
            peek::Peeked::Integer(v) => {
                let text = Decimal::new(v);
                let text = text.as_bytes();
                let mut copy = [0u8; COMPACT_UP_TO];
                copy[..text.len()].copy_from_slice(text);
                Value::Copied(copy, text.len())
            }
            peek::Peeked::Embedded(ptr, n) if n <= COMPACT_UP_TO => {
                let mut copy = [0u8; COMPACT_UP_TO];
                // SAFETY: `peek` found the key's `n` bytes at `ptr`, unchanged while it is open.
                copy[..n].copy_from_slice(unsafe { std::slice::from_raw_parts(ptr, n) });
                Value::Copied(copy, n)
            }
            // Longer than any compact value: a plain string.
            _ if len > COMPACT_UP_TO => self.borrow()?,
            _ => self.copy_through_get()?,
        };
        if algorithm.reads_expiry() {
            self.expires_at_ms = self.expiry();
        }
        Ok(())
    }

    /// The value in place, through `StringDMA` in WRITE mode, so that the write which usually
    /// follows reuses the pointer (one server call less). Only for a plain string, which
    /// neither mode converts (Redis copies a value only when it is shared or compact).
    #[inline(always)]
    fn borrow(&self) -> Result<Value> {
        let mut got = 0usize;
        // SAFETY: an open string key, opened for writing.
        let ptr = unsafe { (api().string_dma)(self.key, &mut got, raw::REDISMODULE_WRITE as c_int) };
        if ptr.is_null() {
            return Err(Error::WrongType);
        }
        Ok(Value::Borrowed(ptr.cast(), got))
    }

    fn copy_through_get(&self) -> Result<Value> {
        let api = api();
        // SAFETY: a valid context and key name; the reply is freed below.
        let reply = unsafe { (api.call)(self.ctx, c"GET".as_ptr(), c"s".as_ptr(), self.name) };
        if reply.is_null() {
            return Err(Error::Internal("GET failed".into()));
        }
        let mut len = 0usize;
        // SAFETY: a reply owned here.
        let is_string = unsafe { (api.call_reply_type)(reply) } as isize == raw::REDISMODULE_REPLY_STRING;
        // SAFETY: as above.
        let ptr = if is_string { unsafe { (api.call_reply_string_ptr)(reply, &mut len) } } else { std::ptr::null() };
        let mut copy = [0u8; COMPACT_UP_TO];
        let outcome = match copy.get_mut(..len) {
            Some(target) if !ptr.is_null() => {
                // SAFETY: the reply holds `len` bytes at `ptr` until it is freed.
                target.copy_from_slice(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) });
                Ok(Value::Copied(copy, len))
            }
            _ => Err(Error::Internal("GET did not return the value".into())),
        };
        // SAFETY: freed once, after its last use.
        unsafe { (api.free_call_reply)(reply) };
        outcome
    }

    /// What the key held when loaded, for a limiter to decide on.
    pub fn stored(&self) -> Option<Stored<'_>> {
        let value = match &self.value {
            Value::Missing => return None,
            // SAFETY: Redis's bytes of the open key, unchanged until `apply` writes.
            Value::Borrowed(ptr, len) => unsafe { std::slice::from_raw_parts(ptr.cast_const(), *len) },
            Value::Copied(bytes, len) => &bytes[..*len],
        };
        Some(Stored { value, expires_at_ms: self.expires_at_ms })
    }

    fn exists(&self) -> bool {
        !matches!(self.value, Value::Missing)
    }

    /// The key's absolute expiry in Unix milliseconds, `None` when it has none.
    fn expiry(&self) -> Option<i64> {
        let api = api();
        let at = match api.get_abs_expire {
            // SAFETY: an open key.
            Some(abs) => unsafe { abs(self.key) },
            None => {
                // Before 7.0.5: a relative TTL from the server's clock.
                // SAFETY: an open key.
                let ttl = unsafe { (api.get_expire)(self.key) };
                if ttl == raw::REDISMODULE_NO_EXPIRE as i64 {
                    ttl
                } else {
                    crate::clock::now().ceil_millis().saturating_add(ttl)
                }
            }
        };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    /// Checks that `effect` can be applied to this key, and what applying it writes.
    #[inline(always)]
    pub fn prepare<'e>(&self, effect: &'e Effect<Write>) -> Result<Prepared<'e>> {
        let (state, expires_at) = match effect {
            Effect::Nothing => return Ok(Prepared::Nothing),
            Effect::Delete if self.exists() => return Ok(Prepared::Delete),
            Effect::Delete => return Ok(Prepared::Nothing),
            Effect::Store { state, expires_at } => (state, expires_at),
        };
        let expires_ms = expires_at.ceil_millis();
        if expires_ms <= 0 {
            return Err(Error::Internal(format!("an expiry before 1970: {expires_ms}")));
        }
        let prepared = match state {
            // The same expiry (a counter within its window): the key keeps it, as `SET … KEEPTTL`.
            Write::Integer(v) if self.exists() && self.expires_at_ms == Some(expires_ms) => {
                Prepared::Integer { text: Decimal::new(*v), expires_ms: None, instant: false }
            }
            Write::Integer(v) => Prepared::Integer {
                text: Decimal::new(*v),
                expires_ms: Some(expires_ms),
                instant: *v == expires_at.as_nanos(),
            },
            Write::Tagged(tag, v) => {
                Prepared::Integer { text: Decimal::tagged(*tag, *v), expires_ms: Some(expires_ms), instant: false }
            }
            Write::Patch(patch) => {
                check(patch)?;
                let old_len = self.stored().map(|s| s.value.len());
                match old_len {
                    _ if patch.is_whole() => {
                        Prepared::Whole { value: Cow::Borrowed(&patch.chunks[0].1), expires_ms: Some(expires_ms) }
                    }
                    Some(old) if patch.len >= old => Prepared::Patch { patch, expires_ms },
                    // A new key, or one that shrinks (SETRANGE cannot): the whole value.
                    _ => {
                        let mut whole = self.stored().map(|s| s.value.to_vec()).unwrap_or_default();
                        patch.apply(&mut whole);
                        Prepared::Whole { value: Cow::Owned(whole), expires_ms: Some(expires_ms) }
                    }
                }
            }
        };
        Ok(prepared)
    }

    /// Applies a prepared effect: writes, sets the expiry, replicates, announces. After a write
    /// the value read by `load` is gone. Should a server call fail after bytes were written
    /// (`prepare` rules out every known cause), what was written is still replicated, so that
    /// replicas never diverge, and the call answers an error.
    #[inline(always)]
    pub fn apply(&mut self, prepared: Prepared<'_>) -> Result<()> {
        let api = api();
        match prepared {
            Prepared::Nothing => Ok(()),
            Prepared::Delete => {
                // SAFETY: a key open for writing.
                if unsafe { (api.delete_key)(self.key) } != raw::Status::Ok as c_int {
                    return Err(Error::Internal("cannot delete the key".into()));
                }
                self.value = Value::Missing;
                self.replicate(Replicated::Del)?;
                self.announce(&[(raw::REDISMODULE_NOTIFY_GENERIC, c"del")]);
                Ok(())
            }
            Prepared::Integer { text, expires_ms: None, .. } => self.write_whole(text.as_bytes(), None),
            Prepared::Integer { text, expires_ms: Some(ms), instant } => {
                // A TAT that is its own expiry: the milliseconds' text made from the TAT's.
                let at = match instant {
                    true => text.ceil_millis(),
                    false => None,
                };
                let at = at.unwrap_or_else(|| Decimal::new(ms));
                self.write_whole(text.as_bytes(), Some((ms, at.as_bytes())))
            }
            Prepared::Whole { value, expires_ms: None } => self.write_whole(&value, None),
            Prepared::Whole { value, expires_ms: Some(ms) } => {
                self.write_whole(&value, Some((ms, Decimal::new(ms).as_bytes())))
            }
            Prepared::Patch { patch, expires_ms } => {
                let buf = self.writable(patch.len)?;
                for (offset, bytes) in &patch.chunks {
                    // Within bounds: `check` proved it.
                    buf[*offset..offset + bytes.len()].copy_from_slice(bytes);
                }
                let expiry = self.set_expiry(expires_ms);
                for (offset, bytes) in &patch.chunks {
                    self.replicate(Replicated::SetRange { offset: *offset, bytes })?;
                }
                // Should the expiry have failed, the replica keeps its own, as the master did.
                expiry?;
                self.replicate(Replicated::PexpireAt { at_ms: expires_ms })?;
                for _ in &patch.chunks {
                    self.announce_one(raw::REDISMODULE_NOTIFY_STRING, c"setrange");
                }
                self.announce(&[(raw::REDISMODULE_NOTIFY_GENERIC, c"expire")]);
                Ok(())
            }
        }
    }

    /// Writes the whole value and its expiry: `SET key value PXAT ms`, or `SET key value
    /// KEEPTTL` when the expiry stays.
    /// `expires`: the expiry in Unix milliseconds and its decimal text.
    #[inline(always)]
    fn write_whole(&mut self, value: &[u8], expires: Option<(i64, &[u8])>) -> Result<()> {
        self.writable(value.len())?.copy_from_slice(value);
        let Some((expires_ms, at)) = expires else {
            self.replicate(Replicated::Set { value, at: None })?;
            self.announce(&[(raw::REDISMODULE_NOTIFY_STRING, c"set")]);
            return Ok(());
        };
        if let Err(e) = self.set_expiry(expires_ms) {
            // The replica keeps its own expiry, as the master did.
            self.replicate(Replicated::Set { value, at: None })?;
            return Err(e);
        }
        self.replicate(Replicated::Set { value, at: Some(at) })?;
        self.announce(&[(raw::REDISMODULE_NOTIFY_STRING, c"set"), (raw::REDISMODULE_NOTIFY_GENERIC, c"expire")]);
        Ok(())
    }

    /// The value resized to `len` (growth zero-filled), writable in place. A missing key is
    /// created as a plain string.
    #[inline(always)]
    fn writable(&mut self, len: usize) -> Result<&mut [u8]> {
        let api = api();
        let resize = |to: usize| {
            // SAFETY: a key open for writing, holding a string or nothing.
            match unsafe { (api.string_truncate)(self.key, to) } {
                status if status == raw::Status::Ok as c_int => Ok(()),
                _ => Err(Error::Internal("cannot resize the value".into())),
            }
        };
        let old = match self.value {
            Value::Missing => 0,
            Value::Borrowed(ptr, old) if old == len => {
                // The same length (a TAT rewritten): the bytes `load` borrowed for writing.
                self.value = Value::Missing;
                // SAFETY: Redis's `len` bytes of the value, from `StringDMA` in WRITE mode on this
                // open key, which has not been resized since; nothing else borrows them (`&mut self`).
                return Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) });
            }
            Value::Borrowed(_, len) | Value::Copied(_, len) => len,
        };
        let before = match self.value {
            Value::Borrowed(ptr, _) => ptr.cast_const(),
            _ => std::ptr::null(),
        };
        // Redis grows a string greedily (to twice the length), and reallocates one it shrinks
        // only when that would free over half of it. So to leave a value `room` bytes of
        // capacity: grow it past its capacity (`past`: greedily, to over twice the room), shrink
        // it to the room (reallocated to exactly that), then to `len` (within the room: kept).
        // A value with its size class's room keeps a window's log within 16 bytes per action,
        // and appends up to the room are made in place.
        let reserve = |past: usize, room: usize| -> Result<()> {
            resize(past)?;
            resize(room)?;
            resize(len)
        };
        // Within the room the value was given when it last grew: in place.
        let in_room = len > old && old >= SHORTEST_WITH_ROOM && len <= room(old);
        if !self.exists() {
            // A new plain string of exactly `len` bytes.
            resize(len)?;
        } else if in_room {
            resize(len)?;
        } else if len > old && len <= EXACT_GROWTH_UP_TO {
            // One byte past the room suffices after the room of the last growth. (Had the
            // value room to spare already, it keeps at most twice the room.)
            let room = room(len);
            reserve(room + 1, room)?;
        } else if len != old {
            resize(len)?;
        }
        self.value = Value::Missing; // whatever was read is no longer valid
        let dma = || {
            let mut got = 0usize;
            // SAFETY: a string key open for writing.
            let ptr = unsafe { (api.string_dma)(self.key, &mut got, raw::REDISMODULE_WRITE as c_int) };
            (ptr, got)
        };
        let (mut ptr, mut got) = dma();
        if in_room && len <= EXACT_GROWTH_UP_TO && !before.is_null() && ptr.cast::<u8>().cast_const() != before {
            // It had less room (shrunk since, or written otherwise) and was just reallocated
            // greedily, to twice its length: give it its room instead, growing past twice the
            // room so that the shrink to it is a reallocation whatever the capacity now.
            let room = room(len);
            reserve(2 * room + 1, room)?;
            (ptr, got) = dma();
        }
        if ptr.is_null() || got != len {
            return Err(Error::Internal("cannot write the value in place".into()));
        }
        // SAFETY: Redis's `len` bytes of the value, ours to write until the key is closed.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) })
    }

    #[inline(always)]
    fn set_expiry(&self, expires_ms: i64) -> Result<()> {
        let api = api();
        let status = match api.set_abs_expire {
            // SAFETY: a key open for writing that holds a value.
            Some(abs) => unsafe { abs(self.key, expires_ms) },
            None => {
                let ttl = expires_ms.saturating_sub(crate::clock::now().ceil_millis()).max(1);
                // SAFETY: as above.
                unsafe { (api.set_expire)(self.key, ttl) }
            }
        };
        match status == raw::Status::Ok as c_int {
            true => Ok(()),
            false => Err(Error::Internal("cannot set the key's expiry".into())),
        }
    }

    /// Propagates a command on this key to replicas and the AOF, with absolute times.
    #[inline(always)]
    fn replicate(&self, command: Replicated<'_>) -> Result<()> {
        if replication::unheard(self.ctx) {
            return Ok(());
        }
        let replicate = api().replicate;
        let (ctx, name) = (self.ctx, self.name);
        // SAFETY (every arm): each format matches the arguments passed with it: `s` a server
        // string (the key name, a word of `WORDS`), `b` a pointer and a length, `c` a
        // NUL-terminated literal.
        let (what, status) = match command {
            Replicated::Set { value, at: Some(at) } => {
                let pxat = WORDS.pxat.load(Relaxed);
                let status = match pxat.is_null() {
                    false => unsafe {
                        replicate(
                            ctx,
                            c"SET".as_ptr(),
                            c"sbsb".as_ptr(),
                            name,
                            value.as_ptr(),
                            value.len(),
                            pxat,
                            at.as_ptr(),
                            at.len(),
                        )
                    },
                    true => unsafe {
                        replicate(
                            ctx,
                            c"SET".as_ptr(),
                            c"sbcb".as_ptr(),
                            name,
                            value.as_ptr(),
                            value.len(),
                            c"PXAT".as_ptr(),
                            at.as_ptr(),
                            at.len(),
                        )
                    },
                };
                ("SET", status)
            }
            Replicated::Set { value, at: None } => {
                let keepttl = WORDS.keepttl.load(Relaxed);
                let status = match keepttl.is_null() {
                    false => unsafe {
                        replicate(ctx, c"SET".as_ptr(), c"sbs".as_ptr(), name, value.as_ptr(), value.len(), keepttl)
                    },
                    true => unsafe {
                        replicate(
                            ctx,
                            c"SET".as_ptr(),
                            c"sbc".as_ptr(),
                            name,
                            value.as_ptr(),
                            value.len(),
                            c"KEEPTTL".as_ptr(),
                        )
                    },
                };
                ("SET", status)
            }
            Replicated::SetRange { offset, bytes } => {
                let offset = Decimal::new(i64::try_from(offset).unwrap_or(i64::MAX));
                let offset = offset.as_bytes();
                let args = (offset.as_ptr(), offset.len(), bytes.as_ptr(), bytes.len());
                ("SETRANGE", unsafe {
                    replicate(ctx, c"SETRANGE".as_ptr(), c"sbb".as_ptr(), name, args.0, args.1, args.2, args.3)
                })
            }
            Replicated::PexpireAt { at_ms } => {
                let at = Decimal::new(at_ms);
                let at = at.as_bytes();
                ("PEXPIREAT", unsafe {
                    replicate(ctx, c"PEXPIREAT".as_ptr(), c"sb".as_ptr(), name, at.as_ptr(), at.len())
                })
            }
            Replicated::Del => ("DEL", unsafe { replicate(ctx, c"DEL".as_ptr(), c"s".as_ptr(), name) }),
            // `v`: an array of server strings and its length.
            Replicated::Zrem { members } => ("ZREM", unsafe {
                replicate(ctx, c"ZREM".as_ptr(), c"sv".as_ptr(), name, members.as_ptr(), members.len())
            }),
            Replicated::Zadd { score, member } => ("ZADD", unsafe {
                replicate(ctx, c"ZADD".as_ptr(), c"sbs".as_ptr(), name, score.as_ptr(), score.len(), member)
            }),
        };
        match status == raw::Status::Ok as c_int {
            true => Ok(()),
            false => Err(Error::Internal(format!("cannot replicate {what}"))),
        }
    }

    /// Keyspace events of a write, then the signal for WATCH and client tracking.
    #[inline(always)]
    fn announce(&self, events: &[(c_int, &CStr)]) {
        let flags = published_classes();
        for &(class, event) in events {
            self.notify(flags, class, event);
        }
        // SAFETY: a valid context and key name.
        unsafe { (api().signal_modified_key)(self.ctx, self.name) };
    }

    fn announce_one(&self, class: c_int, event: &CStr) {
        self.notify(published_classes(), class, event);
    }

    /// The keyspace event `event` of `class`, if `flags` (from `published_classes`) publish it.
    #[inline(always)]
    fn notify(&self, flags: c_int, class: c_int, event: &CStr) {
        if flags & class != 0 {
            // SAFETY: a valid context, key name and event name.
            unsafe { (api().notify_keyspace_event)(self.ctx, class, event.as_ptr(), self.name) };
        }
    }
}

/// The event classes the server's `notify-keyspace-events` publishes (on a channel, `K` or
/// `E`): the module announces only those, as the SPEC asks of its events ("no cost when
/// off"). Each announcement the server is not asked for would still walk the modules'
/// keyspace subscriptions, about 100 instructions, twice on every admitted call (`set`,
/// `expire`). So a module subscribed to keyspace events sees this module's writes when, and
/// only when, `notify-keyspace-events` names their class. Servers without the flags' reader
/// (before 6.0) get every event.
#[inline(always)]
pub fn published_classes() -> c_int {
    let Some(flags) = api().get_notify_keyspace_events else { return !0 };
    // SAFETY: a server function without arguments.
    let flags = unsafe { flags() };
    let channels = (raw::REDISMODULE_NOTIFY_KEYSPACE | raw::REDISMODULE_NOTIFY_KEYEVENT) as c_int;
    match flags & channels {
        0 => 0,
        _ => flags,
    }
}

/// The constant words of the replicated commands, made once as server strings when the module
/// loads (null before): `RedisModule_Replicate` takes a server string (`s`) by its reference
/// count, where it copies a C string (`c`) into a new object, freed again, on every call.
struct Words {
    pxat: AtomicPtr<RedisModuleString>,
    keepttl: AtomicPtr<RedisModuleString>,
}

static WORDS: Words =
    Words { pxat: AtomicPtr::new(std::ptr::null_mut()), keepttl: AtomicPtr::new(std::ptr::null_mut()) };

/// Makes the words of `WORDS` (from `init`; they live as long as the process).
pub fn make_words() {
    let api = api();
    for (slot, word) in [(&WORDS.pxat, "PXAT"), (&WORDS.keepttl, "KEEPTTL")] {
        if slot.load(Relaxed).is_null() {
            // SAFETY: a null context is allowed (the string is not auto-freed: it lives on);
            // `word` is `len` readable bytes.
            slot.store(unsafe { (api.create_string)(std::ptr::null_mut(), word.as_ptr().cast(), word.len()) }, Relaxed);
        }
    }
}

/// Follows the server's events, once, when the module loads, so that `replication` learns of
/// anything that may start reading the replication stream; and checks the layout `peek` reads.
/// The server keeps one callback per module and event, so each event is subscribed here, once,
/// to one callback.
pub fn watch_server(ctx: *mut raw::RedisModuleCtx) {
    peek::prove();
    unsafe extern "C" fn on_event(
        ctx: *mut raw::RedisModuleCtx,
        event: raw::RedisModuleEvent,
        _: u64,
        _: *mut std::ffi::c_void,
    ) {
        match event.id {
            raw::REDISMODULE_EVENT_CRON_LOOP => replication::tick(ctx),
            _ => replication::heard(),
        }
    }
    // SAFETY: a copy of a function pointer the server filled in (6.0+); `None` before.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else { return };
    let subscribed = |id: u64| {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: the module's context in `init`, a valid event and a callback that lives as
        // long as the module. A server that does not know the event refuses it.
        unsafe { subscribe(ctx, event, Some(on_event)) == raw::Status::Ok as c_int }
    };
    // Every one subscribed, whatever a refusal before it.
    let mut heard_all = true;
    for id in [raw::REDISMODULE_EVENT_LOADING].into_iter().chain(replication::EVENTS) {
        heard_all &= subscribed(id);
    }
    // Only a server that announces every one of them may skip building replicated commands.
    if heard_all && subscribed(raw::REDISMODULE_EVENT_CRON_LOOP) {
        replication::start(ctx);
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // SAFETY: the handle opened in `open`, closed once.
        unsafe { (api().close_key)(self.key) };
    }
}

/// A command that reproduces a write on replicas and in the AOF.
enum Replicated<'a> {
    /// `SET key value PXAT at` (`at`: the milliseconds' decimal text), or `SET key value KEEPTTL`.
    Set {
        value: &'a [u8],
        at: Option<&'a [u8]>,
    },
    SetRange {
        offset: usize,
        bytes: &'a [u8],
    },
    PexpireAt {
        at_ms: i64,
    },
    Del,
    /// Lease sets: `ZREM key member…`, `ZADD key score member` (the score's decimal text).
    Zrem {
        members: &'a [*mut RedisModuleString],
    },
    Zadd {
        score: &'a [u8],
        member: *mut RedisModuleString,
    },
}

/// An effect checked against its key, ready to be written.
pub enum Prepared<'e> {
    Nothing,
    Delete,
    /// An integer state, replicated as `SET key value PXAT ms` (`KEEPTTL` for `None`: the
    /// expiry stays).
    /// `instant`: the value is the expiry's instant in nanoseconds (a TAT).
    Integer {
        text: Decimal,
        expires_ms: Option<i64>,
        instant: bool,
    },
    /// The whole value, replicated as `SET key value PXAT ms`.
    Whole {
        value: Cow<'e, [u8]>,
        expires_ms: Option<i64>,
    },
    /// An in-place edit of a value at least as long, replicated as `SETRANGE`s and `PEXPIREAT`.
    Patch {
        patch: &'e Patch,
        expires_ms: i64,
    },
}

/// Every chunk lies within the patched length, which a string may have.
fn check(patch: &Patch) -> Result<()> {
    if patch.len > MAX_VALUE {
        return Err(Error::Internal(format!("a value of {} bytes", patch.len)));
    }
    for (offset, bytes) in &patch.chunks {
        if offset.checked_add(bytes.len()).is_none_or(|end| end > patch.len) {
            return Err(Error::Internal("a patch chunk lies outside the value".into()));
        }
    }
    Ok(())
}
