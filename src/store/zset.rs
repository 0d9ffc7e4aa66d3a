//! A lease set's key (CL.ACQUIRE, CL.RELEASE): a native sorted set, member = id, score =
//! expiry in Unix ms, read through the key API's range iterators and written through
//! `RedisModule_ZsetAdd/ZsetRem`, in the same prepare/apply style as string keys: a change is
//! checked before the first write, then replicated as the Redis commands that reproduce it
//! (`DEL`, `ZREM`, `ZADD`, `PEXPIREAT` with absolute times) and announced with their keyspace
//! events (`del`, `zrem`, `zadd`, `expire`).

use std::marker::PhantomData;
use std::os::raw::c_int;

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};
use redis_throttle_core::args::Decimal;
use redis_throttle_core::lease::{Change, From, MAX_EXPIRY_MS, Scan, Set};
use redis_throttle_core::{Error, Result};

use super::{Key, Replicated, Value};
use crate::api::api;
use crate::dispatch::{Call, bytes};

impl Key {
    /// Opens argument `word` as a lease set, for reading and writing: WRONGTYPE unless the key
    /// is missing or a sorted set.
    pub fn open_set(call: &Call, word: usize) -> Result<Key> {
        let name = call.word(word)?;
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: a valid context and argument string; the handle is closed on drop.
        let key = unsafe { (api().open_key)(call.ctx, name, mode) };
        if key.is_null() {
            return Err(Error::Internal("cannot open key".into()));
        }
        // SAFETY: an open key.
        let kind = unsafe { (api().key_type)(key) } as isize;
        let key = Key {
            ctx: call.ctx,
            name,
            key,
            empty: kind == raw::REDISMODULE_KEYTYPE_EMPTY,
            value: Value::Missing,
            expires_at_ms: None,
        };
        match kind {
            raw::REDISMODULE_KEYTYPE_EMPTY | raw::REDISMODULE_KEYTYPE_ZSET => Ok(key),
            _ => Err(Error::WrongType),
        }
    }

    /// The set as the lease decisions read it, for the call's `id`.
    pub fn leases(&self, id: *mut RedisModuleString) -> Leases<'_> {
        // SAFETY: an open key (an empty one has length 0).
        let members = unsafe { (api().value_length)(self.key) };
        Leases { key: self, id, cursor: None, members }
    }

    /// Checks a change to the set (after `scan`), and what applying it writes.
    pub fn prepare_leases<'s>(
        &self,
        change: Change,
        scan: &'s Scan<Member>,
        id: *mut RedisModuleString,
    ) -> Result<LeaseWrite<'s>> {
        let mut write =
            LeaseWrite { clear: false, remove: Vec::new(), add: None, expires_ms: None, id, members: PhantomData };
        let exists = scan.view.members > 0;
        match change {
            Change::Prune => {}
            Change::Clear => write.clear = exists,
            Change::Replace { expires_ms } => {
                (write.clear, write.add, write.expires_ms) = (exists, Some(expires_ms), Some(expires_ms))
            }
            Change::Hold { expires_ms, key_expires_ms } => {
                (write.add, write.expires_ms) = (Some(expires_ms), Some(key_expires_ms))
            }
            Change::Remove { key_expires_ms } => {
                write.remove.push(id);
                write.expires_ms = key_expires_ms;
            }
        }
        if !write.clear {
            write.remove.extend(scan.expired.iter().map(|m| m.0));
            // A renewal within the same millisecond leaves the key's expiry as it is.
            if write.expires_ms.is_some() && write.expires_ms == self.expiry() {
                write.expires_ms = None;
            }
        }
        for at in write.add.iter().chain(&write.expires_ms) {
            // An expiry is after 1970 and within 64-bit nanoseconds (exact as a double).
            if !(1..=MAX_EXPIRY_MS).contains(at) {
                return Err(Error::Internal(format!("a lease expiry out of range: {at}")));
            }
        }
        Ok(write)
    }

    /// Applies a checked change: writes, replicates, announces. As for strings, should a server
    /// call fail after a write, what was written is still replicated.
    pub fn apply_leases(&mut self, write: LeaseWrite<'_>) -> Result<()> {
        let api = api();
        let mut changed = false;
        if write.clear {
            // SAFETY: a key open for writing.
            if unsafe { (api.delete_key)(self.key) } != raw::Status::Ok as c_int {
                return Err(Error::Internal("cannot delete the key".into()));
            }
            self.replicate(Replicated::Del)?;
            self.announce_one(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
            changed = true;
        }
        if !write.remove.is_empty() {
            let mut removed = Ok(());
            for &member in &write.remove {
                let mut deleted: c_int = 0;
                // SAFETY: a sorted set open for writing (the scan's cursor is stopped) and a
                // member string alive until the call ends.
                if unsafe { (api.zset_rem)(self.key, member, &mut deleted) } != raw::Status::Ok as c_int {
                    removed = Err(Error::Internal("cannot remove a lease".into()));
                }
            }
            self.replicate(Replicated::Zrem { members: &write.remove })?;
            removed?;
            self.announce_one(raw::REDISMODULE_NOTIFY_ZSET, c"zrem");
            changed = true;
        }
        if let Some(score) = write.add {
            let mut flags: c_int = 0;
            // SAFETY: a key open for writing, missing or a sorted set; the id is an argument.
            if unsafe { (api.zset_add)(self.key, score as f64, write.id, &mut flags) } != raw::Status::Ok as c_int {
                return Err(Error::Internal("cannot add the lease".into()));
            }
            // Like ZADD: an unchanged score is no change (no event).
            if flags & (raw::REDISMODULE_ZADD_ADDED | raw::REDISMODULE_ZADD_UPDATED) as c_int != 0 {
                let score = Decimal::new(score);
                let score = score.as_bytes();
                self.replicate(Replicated::Zadd { score, member: write.id })?;
                self.announce_one(raw::REDISMODULE_NOTIFY_ZSET, c"zadd");
                changed = true;
            }
        }
        if let Some(at_ms) = write.expires_ms {
            self.set_expiry(at_ms)?;
            self.replicate(Replicated::PexpireAt { at_ms })?;
            self.announce_one(raw::REDISMODULE_NOTIFY_GENERIC, c"expire");
            changed = true;
        }
        if changed {
            self.announce(&[]);
        }
        Ok(())
    }
}

/// What a lease call writes, checked.
pub struct LeaseWrite<'s> {
    /// `DEL` first (the key exists).
    clear: bool,
    /// `ZREM key member…`: the id released and the expired members found.
    remove: Vec<*mut RedisModuleString>,
    /// `ZADD key score id`.
    add: Option<i64>,
    /// `PEXPIREAT key ms`.
    expires_ms: Option<i64>,
    id: *mut RedisModuleString,
    /// The removed members' strings live in the scan, which outlives the write.
    members: PhantomData<&'s [Member]>,
}

/// A member read from the set: a string the module owns, freed on drop.
pub struct Member(*mut RedisModuleString, *mut RedisModuleCtx);

impl Drop for Member {
    fn drop(&mut self) {
        // SAFETY: a string `ZsetRangeCurrentElement` created for this context, freed once.
        unsafe { (api().free_string)(self.1, self.0) };
    }
}

/// The key API's view of a lease set: one range cursor at a time, stopped on drop.
pub struct Leases<'k> {
    key: &'k Key,
    id: *mut RedisModuleString,
    /// The direction of the open cursor (`true`: ascending).
    cursor: Option<bool>,
    members: usize,
}

impl Leases<'_> {
    fn stop(&mut self) {
        if self.cursor.take().is_some() {
            // SAFETY: an open sorted set with a cursor.
            unsafe { (api().zset_range_stop)(self.key.key) };
        }
    }

    fn current(&self) -> Option<(Member, f64)> {
        let mut score = 0.0;
        // SAFETY: an open sorted set with a cursor; null at its end.
        let member = unsafe { (api().zset_range_current_element)(self.key.key, &mut score) };
        // Not `then_some`: a `Member` made of a null pointer would be freed when dropped.
        if member.is_null() { None } else { Some((Member(member, self.key.ctx), score)) }
    }
}

impl Drop for Leases<'_> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Set for Leases<'_> {
    type Member = Member;

    fn members(&self) -> usize {
        self.members
    }

    fn id_score(&mut self) -> Result<Option<f64>> {
        let mut score = 0.0;
        // SAFETY: an open sorted set and an argument string.
        let found = unsafe { (api().zset_score)(self.key.key, self.id, &mut score) } == raw::Status::Ok as c_int;
        Ok(found.then_some(score))
    }

    fn start(&mut self, from: From, threshold: f64) -> Result<Option<(Member, f64)>> {
        self.stop();
        let api = api();
        let inf = f64::INFINITY;
        // SAFETY (all three): an open, non-empty sorted set (a missing key is never read).
        let status = unsafe {
            match from {
                From::Expired => (api.zset_first_in_score_range)(self.key.key, -inf, threshold, 0, 0),
                From::Live => (api.zset_first_in_score_range)(self.key.key, threshold, inf, 1, 0),
                From::Latest => (api.zset_last_in_score_range)(self.key.key, threshold, inf, 1, 0),
            }
        };
        if status != raw::Status::Ok as c_int {
            return Err(Error::Internal("cannot read the lease set".into()));
        }
        self.cursor = Some(from != From::Latest);
        Ok(self.current())
    }

    fn next(&mut self) -> Result<Option<(Member, f64)>> {
        let api = api();
        let step = match self.cursor {
            Some(true) => api.zset_range_next,
            Some(false) => api.zset_range_prev,
            None => return Ok(None),
        };
        // SAFETY: an open sorted set with a cursor.
        Ok(if unsafe { step(self.key.key) } != 0 { self.current() } else { None })
    }

    fn is_id(&self, member: &Member) -> bool {
        bytes(member.0) == bytes(self.id)
    }

    fn member_len(&self, member: &Member) -> usize {
        bytes(member.0).len()
    }
}
