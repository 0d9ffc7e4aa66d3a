//! Reading a value as Redis stores it, without converting it.
//!
//! `RedisModule_StringDMA`, the module API's only way to read a string in place, first converts
//! a value Redis keeps compactly (an integer, or a short string embedded in its object: what
//! `SET`, a replica, an RDB or AOF load and `DEBUG RELOAD` leave) into a plain string, even to
//! read it, so a denial or a peek would change how the value is stored. A nested `GET` leaves it
//! as it is, but costs about a fifth of a call. So the module looks at the value's object
//! header, which tells how the value is stored: a plain string is read through `StringDMA`
//! (which then converts nothing), an integer's value and an embedded string's bytes are read
//! where Redis keeps them. Every key is read so, whoever wrote it and whatever the number of keys.
//!
//! The header is the server's object (`robj`: `type:4`, `encoding:4`, 24 bits of LRU, a 32-bit
//! reference count, then `ptr`), whose layout is the same from Redis 2.6 to 8 and in Valkey;
//! the module's key handle holds the context, the database, the key name's object and the value's
//! object first, in that order, in all of them. Nothing is taken on trust, and anything
//! unexpected means `GET` (never a wrong read, never a conversion):
//! - when the module loads ([`prove`]), strings the API makes (a plain one and an embedded one)
//!   must show the expected types, encodings and `ptr` (against `RedisModule_StringPtrLen`);
//! - on every read, the handle's key-name field must be what `RedisModule_GetKeyNameFromModuleKey`
//!   returns, and the value's type a string; an integer must have as many characters as
//!   `RedisModule_ValueLength` counts, an embedded string's header its length, and lie within its
//!   object's allocation;
//! - on every plain string read, `ptr` must be the pointer `StringDMA` returns: should it not be,
//!   peeking stops for the process.
//!
//! Valkey 9.1 keeps no `ptr` in an object whose value is embedded (its bytes follow the header):
//! there plain strings and integers are read so, embedded strings (a window's short log, a
//! pace's state after a reload) through `GET`.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use redis_module::raw::{RedisModuleKey, RedisModuleString};

use crate::api::api;

/// `OBJ_STRING`, and the encodings of a string (`OBJ_ENCODING_RAW`, `_INT`, `_EMBSTR`).
const STRING: u8 = 0;
const RAW: u8 = 0;
const INT: u8 = 1;
const EMBSTR: u8 = 8;

/// The header before an object's `ptr`: the type, encoding and LRU word, the reference count.
const HEADER: usize = 8;
/// An embedded string's bytes start after its object (16 bytes) and a 3-byte `sdshdr8`. Servers
/// that also embed the key name and an expiry (Redis 8, Valkey 8.1) put them in between: an
/// 8-byte expiry, the name with a header of at most 9 bytes and its terminator. Beyond that the
/// bytes are not read.
const fn embedded_within(name_len: usize) -> usize {
    16 + 8 + 9 + name_len + 1 + 3
}

/// True once [`prove`] has found the layout it expects of a plain string on this server (which
/// an integer shares), until a plain string read shows otherwise.
static PROVEN: AtomicBool = AtomicBool::new(false);
/// True once [`prove`] has found an embedded string's bytes where `ptr` says. (Valkey 9.1 keeps
/// no `ptr` in an object whose value is embedded: there, such values are read through `GET`.)
static EMBEDDED: AtomicBool = AtomicBool::new(false);

/// How a key's value is stored, as its object header says.
pub enum Peeked {
    /// A plain string: `StringDMA` reads it in place and converts nothing.
    Plain,
    /// An integer (`OBJ_ENCODING_INT`): the value's decimal text is this number's.
    Integer(i64),
    /// A short string embedded in its object: its bytes, valid while the key is open and unwritten.
    Embedded(*const u8, usize),
    /// The layout is not proven (or something did not match): read through `GET`.
    Unknown,
}

/// The value object's first word (type and encoding in its low byte) and its `ptr`.
///
/// # Safety
/// `object` is a live server object.
#[inline(always)]
unsafe fn header(object: *const u8) -> (u8, *const c_void) {
    // SAFETY: a live object is at least its header and `ptr` (16 bytes), pointer-aligned.
    unsafe { (*object, *object.add(HEADER).cast::<*const c_void>()) }
}

/// The value object of an open key, when the handle's layout is the one expected.
///
/// # Safety
/// `key` is an open key handle.
#[inline(always)]
unsafe fn value_object(key: *mut RedisModuleKey) -> Option<*const u8> {
    let name_of = api().get_key_name_from_module_key?;
    let fields = key.cast::<*const c_void>().cast_const();
    // SAFETY: a handle begins with (at least) four pointers on every server: the context, the
    // database, the key name's object, the value's object. Reading them is reading the handle.
    let (name, value) = unsafe { (*fields.add(2), *fields.add(3)) };
    // SAFETY: an open key.
    let expected = unsafe { name_of(key) };
    (!value.is_null() && name == expected.cast()).then_some(value.cast())
}

/// How the value of `key` (whose name is `name_len` bytes long), a string of `len` characters
/// (`RedisModule_ValueLength`), is stored.
///
/// # Safety
/// `key` is an open key handle holding a string.
#[inline(always)]
pub unsafe fn peek(key: *mut RedisModuleKey, name_len: usize, len: usize) -> Peeked {
    if !PROVEN.load(Relaxed) {
        return Peeked::Unknown;
    }
    // SAFETY: an open key.
    let Some(object) = (unsafe { value_object(key) }) else { return Peeked::Unknown };
    // SAFETY: the key's value object (the handle's layout was checked).
    let (word, ptr) = unsafe { header(object) };
    if word & 0x0f != STRING {
        return Peeked::Unknown;
    }
    match word >> 4 {
        RAW => Peeked::Plain,
        INT => {
            // The integer is `ptr` itself; Redis stores only canonical decimals so (no sign but
            // `-`, no leading zero), whose text is exactly this number's.
            let v = ptr as isize as i64;
            match decimal_len(v) == len {
                true => Peeked::Integer(v),
                false => Peeked::Unknown,
            }
        }
        EMBSTR if EMBEDDED.load(Relaxed) => {
            let (at, start) = (ptr as usize, object as usize);
            if at < start + 16 + 3 || at > start + embedded_within(name_len) {
                return Peeked::Unknown;
            }
            let bytes = ptr.cast::<u8>();
            // SAFETY: `sdshdr8` (length, allocation, flags) just before the bytes, within the
            // object's allocation (checked above: after its header, as an embedded string's).
            let (stored_len, flags) = unsafe { (*bytes.sub(3), *bytes.sub(1)) };
            // `SDS_TYPE_8` in the flags' low three bits; its length must be the value's.
            match flags & 7 == 1 && usize::from(stored_len) == len {
                true => Peeked::Embedded(bytes, len),
                false => Peeked::Unknown,
            }
        }
        _ => Peeked::Unknown,
    }
}

/// After `StringDMA` returned `dma` for a value [`peek`] found plain: stops peeking for the
/// process unless the value's `ptr` is that pointer (the layout holds).
///
/// # Safety
/// `key` is an open key handle holding a string.
#[inline(always)]
pub unsafe fn confirm_plain(key: *mut RedisModuleKey, dma: *const u8) {
    // SAFETY: an open key; its value object read again (a shared value is copied by `StringDMA`).
    let same = unsafe { value_object(key) }.is_some_and(|object| unsafe { header(object) }.1 == dma.cast());
    if !same {
        PROVEN.store(false, Relaxed);
    }
}

/// The number of characters of `v`'s decimal text.
#[inline(always)]
fn decimal_len(v: i64) -> usize {
    let sign = usize::from(v < 0);
    let digits = v.unsigned_abs().checked_ilog10().map_or(1, |d| d as usize + 1);
    sign + digits
}

/// Checks, once when the module loads, that strings the API makes have the layout [`peek`]
/// reads: a plain string (longer than any embedded one), then an embedded one. Until then,
/// and on any server where the first does not hold, every compact-sized value is read through
/// `GET`; where only the second does not, every embedded one.
pub fn prove() {
    let api = api();
    if api.get_key_name_from_module_key.is_none() {
        return;
    }
    let holds = |bytes: &[u8], encoding: u8| {
        // SAFETY: a null context is allowed (the string is freed below); `bytes` is readable.
        let s: *mut RedisModuleString =
            unsafe { (api.create_string)(std::ptr::null_mut(), bytes.as_ptr().cast(), bytes.len()) };
        if s.is_null() {
            return false;
        }
        let mut len = 0usize;
        // SAFETY: a string just made.
        let ptr = unsafe { (api.string_ptr_len)(s, &mut len) };
        // SAFETY: a server string is its object.
        let (word, held) = unsafe { header(s.cast::<u8>().cast_const()) };
        let ok = word & 0x0f == STRING && word >> 4 == encoding && held == ptr.cast() && len == bytes.len();
        // SAFETY: made above with a null context, freed once.
        unsafe { (api.free_string)(std::ptr::null_mut(), s) };
        ok
    };
    let plain = holds(&[b'p'; 1000], RAW);
    PROVEN.store(plain, Relaxed);
    EMBEDDED.store(plain && holds(b"e5", EMBSTR), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::decimal_len;

    #[test]
    fn decimal_lengths_are_the_texts() {
        for v in [0, 1, 9, 10, -1, -10, 99, 100, i64::MAX, i64::MIN, 1_795_354_456_188_603_542, -999_999] {
            assert_eq!(decimal_len(v), v.to_string().len(), "{v}");
        }
    }
}
