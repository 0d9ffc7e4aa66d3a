//! CL.ACQUIRE and CL.RELEASE: a concurrency limit with crash-safe leases. At most `limit`
//! holders at once, each lease lasting `lease` unless renewed, so a holder that dies frees its
//! slot by itself. The state is a native sorted set: member = the holder's id, score = its
//! lease's expiry in whole Unix milliseconds; the key expires with its latest lease.
//!
//! A lease is live while now is before its expiry (a score `s` is live iff `s > floor(now in
//! ms)`). A member is a lease of these commands iff it is 1 to [`MAX_ID`] bytes long and its
//! score a whole number of milliseconds from 1 to [`MAX_EXPIRY_MS`]; every member a call reads
//! must be one, or the call is `ERR key does not hold valid CL.ACQUIRE state` and writes
//! nothing. A call removes only members it has read, and deletes or replaces the whole set only
//! when it has read every member. Expired members are removed as calls find them, with bounded
//! work per call:
//! - a call visits at most the two latest members, [`PRUNE`] + 1 expired members from the
//!   bottom (it removes the first [`PRUNE`]), the earliest live member when a denial needs it,
//!   and, only when more than [`PRUNE`] expired members remain or more than `limit` leases are
//!   live (the limit was lowered), up to `limit` members from the top to count the live ones;
//!   plus one lookup of the id;
//! - a call that finds no live lease besides the caller's reads every member of a set of at most
//!   [`READ_WHOLE`] members, then deletes (or replaces) the key as a whole: one `DEL`, however
//!   many leases ended. These commands alone never make a larger set (each call adds at most one
//!   member, and only while fewer than `limit` ≤ [`MAX_LIMIT`] are live and at most [`PRUNE`]
//!   expired ones remain, which it removes); a larger one is pruned [`PRUNE`] members at a time.
//!
//! The decision is pure: the module reads the set through [`Set`] (the key API), [`scan`]
//! builds a small [`View`] of it, and [`acquire`] / [`release`] decide from the view alone.

use crate::Reply;
use crate::args::duration;
use crate::command::{Arg, Command, Keys, Parsed};
use crate::error::{Error, Range, Result};
use crate::limiter::LIMITER_FLAGS;
use crate::time::{Instant, NANOS_PER_MILLI, Nanos, Unit};

/// The largest `limit`: a call may count up to `limit` members (see the module doc).
pub const MAX_LIMIT: i64 = 10_000;
/// The longest id, in bytes.
pub const MAX_ID: usize = 128;
/// The most expired leases one call removes.
pub const PRUNE: usize = 32;
/// The largest expiry (Unix ms) a lease may have: its nanoseconds fit in 64 bits (the year 2262).
pub const MAX_EXPIRY_MS: i64 = i64::MAX / NANOS_PER_MILLI;
/// The most members a call reads to delete or replace a set whose leases all ended.
pub const READ_WHOLE: usize = MAX_LIMIT as usize;

const COMPLEXITY: &str = "O(log N) where N is the number of leases in the key, plus the removal of at most 32 expired leases; O(limit) when over 32 expired leases remain; O(N) when no other lease is live and N is at most 10,000 (every member is read, then the key deleted or rewritten)";

pub static ACQUIRE: Command = Command {
    name: "cl.acquire",
    summary: "Takes or renews a lease for id: at most limit live leases at once, each lasting lease unless renewed (a crashed holder's slot frees itself).",
    complexity: COMPLEXITY,
    since: "1.1.0",
    flags: LIMITER_FLAGS,
    acl_categories: "write fast",
    keys: Keys::One,
    args: &[Arg::integer("limit"), Arg::duration("lease"), Arg::string("id"), Arg::MS, Arg::SHADOW],
};

pub static RELEASE: Command = Command {
    name: "cl.release",
    summary: "Gives id's lease back before it expires: replies 1 if id held a live lease, else 0.",
    complexity: COMPLEXITY,
    since: "1.1.0",
    // Like ZREM: it only ever frees memory.
    flags: "write fast",
    acl_categories: "write fast",
    keys: Keys::One,
    args: &[Arg::string("id")],
};

/// A parsed `CL.ACQUIRE key limit lease id [MS]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub key: &'a [u8],
    pub limit: i64,
    pub lease: Nanos,
    pub id: &'a [u8],
    pub unit: Unit,
    /// `SHADOW`: a denial is answered as an admission (no lease is taken).
    pub shadow: bool,
}

impl<'a> Acquire<'a> {
    /// Checks, in order: arity, integers, options, then limit, lease, id.
    pub fn parse(args: &[&'a [u8]]) -> Result<Acquire<'a>> {
        let parsed = Parsed::parse(&ACQUIRE, args)?;
        let unit = parsed.tail.unit;
        let limit = parsed.integer(0);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(Error::OutOfRange { name: "limit", range: Range::Integer { min: 1, max: MAX_LIMIT } });
        }
        let lease = duration(parsed.integer(1), unit, "lease")?;
        Ok(Acquire {
            key: parsed.key,
            limit,
            lease,
            id: id(parsed.string(2))?,
            unit,
            shadow: parsed.tail.has("SHADOW"),
        })
    }
}

/// A parsed `CL.RELEASE key id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release<'a> {
    pub key: &'a [u8],
    pub id: &'a [u8],
}

impl<'a> Release<'a> {
    pub fn parse(args: &[&'a [u8]]) -> Result<Release<'a>> {
        let parsed = Parsed::parse(&RELEASE, args)?;
        Ok(Release { key: parsed.key, id: id(parsed.string(0))? })
    }
}

fn id(id: &[u8]) -> Result<&[u8]> {
    match id.len() {
        1..=MAX_ID => Ok(id),
        _ => Err(Error::OutOfRange { name: "id", range: Range::Text("a string of 1 to 128 bytes") }),
    }
}

/// Read access to a lease set (`None` of it for a missing key), as the module has it through
/// the key API: one cursor at a time, members ordered by score, then by member (as Redis
/// orders a sorted set).
pub trait Set {
    /// A member as the module holds it (kept for the expired ones, which the call removes).
    type Member;
    /// Members in the set (0: no key).
    fn members(&self) -> usize;
    /// The score of the call's id, if it is a member.
    fn id_score(&mut self) -> Result<Option<f64>>;
    /// Starts a cursor at `from`, where scores up to `threshold` are expired and those above it
    /// live, and reads that member. The cursor stays within its part (expired or live), so an
    /// empty part costs a range check, not a read.
    fn start(&mut self, from: From, threshold: f64) -> Result<Option<(Self::Member, f64)>>;
    /// The next member in the cursor's direction and part.
    fn next(&mut self) -> Result<Option<(Self::Member, f64)>>;
    /// Whether a member is the call's id.
    fn is_id(&self, member: &Self::Member) -> bool;
    /// A member's length in bytes.
    fn member_len(&self, member: &Self::Member) -> usize;
}

/// Where a cursor starts, and which way it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// The earliest expired lease, upwards through the expired ones.
    Expired,
    /// The earliest live lease, upwards.
    Live,
    /// The latest live lease, downwards through the live ones.
    Latest,
}

/// What a call needs to know of the set, read with bounded work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct View {
    /// Members in the set, live or not (0: no key).
    pub members: usize,
    /// Whether the id is a member (live or not).
    pub id_member: bool,
    /// Live leases, counted up to the call's limit (exact below it).
    pub live: i64,
    /// When at least `limit` leases are live and the id holds none (a denial): the expiry of
    /// the `limit`-th latest, the instant the live leases drop below `limit`.
    pub frees_at: Option<Instant>,
    /// The latest live expiry.
    pub latest: Option<Instant>,
    /// The latest live expiry among members other than the id.
    pub latest_other: Option<Instant>,
    /// The id's lease, when it is live.
    pub holder: Option<Instant>,
    /// Every member was read and is a lease: the call may delete or replace the set as a whole.
    pub whole: bool,
}

/// A view of the set, and the expired members found at its bottom (at most [`PRUNE`]).
#[derive(Debug)]
pub struct Scan<M> {
    pub view: View,
    pub expired: Vec<M>,
}

/// The highest score that is no longer live at `now`: `floor(now in ms)`.
pub fn threshold(now: Instant) -> f64 {
    now.as_nanos().div_euclid(NANOS_PER_MILLI) as f64
}

/// A score as an expiry: a whole number of milliseconds from 1 to [`MAX_EXPIRY_MS`]. Anything
/// else (a fraction, an infinity, zero or below, beyond the year 2262) was not written by these
/// commands.
fn expiry(score: f64) -> Result<Instant> {
    if score.fract() == 0.0 && (1.0..=MAX_EXPIRY_MS as f64).contains(&score) {
        Ok(Instant::from_nanos(score as i64 * NANOS_PER_MILLI))
    } else {
        Err(Error::InvalidState("CL.ACQUIRE"))
    }
}

/// A member read from the set as a lease: its id 1 to [`MAX_ID`] bytes, its score an expiry.
fn lease<S: Set>(set: &S, member: &S::Member, score: f64) -> Result<Instant> {
    match (1..=MAX_ID).contains(&set.member_len(member)) {
        true => expiry(score),
        false => Err(Error::InvalidState("CL.ACQUIRE")),
    }
}

/// Reads `set` for a call at `now` with `limit` (CL.RELEASE, which counts nothing, passes 1).
/// Every member visited must be a lease.
pub fn scan<S: Set>(set: &mut S, now: Instant, limit: i64) -> Result<Scan<S::Member>> {
    let t = threshold(now);
    let mut view = View { members: set.members(), ..View::default() };
    if view.members == 0 {
        view.whole = true;
        return Ok(Scan { view, expired: Vec::new() });
    }
    if let Some(score) = set.id_score()? {
        view.id_member = true;
        let e = expiry(score)?;
        view.holder = (score > t).then_some(e);
    }
    // The latest lease, and the latest that is not the id's: at most two members.
    let mut top = set.start(From::Latest, t)?;
    while let Some((member, score)) = top {
        let e = lease(set, &member, score)?;
        view.latest.get_or_insert(e);
        if !set.is_id(&member) {
            view.latest_other = Some(e);
            break;
        }
        top = set.next()?;
    }
    // Expired members from the bottom, at most PRUNE to remove. With no live lease besides the
    // id's, the call would delete or replace the set: then every member is read first (a set
    // of at most READ_WHOLE), so that nothing unread goes with it.
    let read_whole = view.latest_other.is_none() && view.members <= READ_WHOLE;
    let mut expired = Vec::new();
    let mut read = 0;
    let mut cursor = set.start(From::Expired, t)?;
    while let Some((member, score)) = cursor {
        lease(set, &member, score)?;
        read += 1;
        if expired.len() < PRUNE {
            expired.push(member);
        } else if !read_whole {
            break; // later calls (or the key's expiry) take the rest
        }
        cursor = set.next()?;
    }
    let backlog = read > expired.len();
    view.whole = view.latest_other.is_none() && read + usize::from(view.holder.is_some()) == view.members;
    if view.latest.is_none() {
        return Ok(Scan { view, expired }); // nothing live
    }
    let live = (!backlog).then(|| (view.members - expired.len()) as i64);
    match live {
        Some(n) if n < limit || (n == limit && view.holder.is_some()) => view.live = n,
        // Exactly at the limit and denied: the earliest live lease frees the first slot.
        Some(n) if n == limit => {
            view.live = n;
            if let Some((member, score)) = set.start(From::Live, t)? {
                view.frees_at = Some(lease(set, &member, score)?);
            }
        }
        // Over PRUNE expired members remain, or over `limit` leases are live: count from the top.
        _ => {
            let mut cursor = set.start(From::Latest, t)?;
            while let Some((member, score)) = cursor {
                let e = lease(set, &member, score)?;
                view.live += 1;
                if view.live == limit {
                    view.frees_at = Some(e);
                    break;
                }
                cursor = set.next()?;
            }
        }
    }
    Ok(Scan { view, expired })
}

/// What a call does to the set. Every change but `Clear` and `Replace` also removes the
/// expired members the scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Only the removal of expired members (none: nothing is written).
    Prune,
    /// No live lease remains: delete the key.
    Clear,
    /// The id's is the only live lease: the key is rewritten to hold it alone, expiring with
    /// it (`DEL`, `ZADD`, `PEXPIREAT`): expired members go at once, however many.
    Replace { expires_ms: i64 },
    /// (Re)set the id's lease; the key expires at `key_expires_ms`.
    Hold { expires_ms: i64, key_expires_ms: i64 },
    /// Remove the id; the key expires at `key_expires_ms` (the latest lease left; `None`: no
    /// live lease is left but the set was too large to read whole, and its expiry stays).
    Remove { key_expires_ms: Option<i64> },
}

/// A call's reply and its change to the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome<R> {
    pub reply: R,
    pub effect: Change,
}

/// CL.ACQUIRE: admitted iff the id holds a live lease (renewed) or fewer than `limit` are
/// live. The lease starts on the whole millisecond at or before `now`, as the counter's window
/// and the bucket's refill do, so that no reply time exceeds `lease` (ending on the millisecond
/// after `now + lease` added up to a millisecond to every reply time).
pub fn acquire(view: &View, now: Instant, limit: i64, lease: Nanos) -> Result<Outcome<Reply>> {
    let expires = now.whole_milli_at_or_before()?.checked_add(lease)?;
    let expires_ms = expires.as_nanos() / NANOS_PER_MILLI;
    let until = |at: Option<Instant>| at.map_or(Nanos::ZERO, |at| at.saturating_since(now));
    if view.holder.is_none() && view.live >= limit {
        let reply = Reply {
            limited: true,
            limit,
            remaining: 0,
            retry_after: Some(until(view.frees_at.or(view.latest))),
            reset_after: until(view.latest),
        };
        return Ok(Outcome { reply, effect: Change::Prune });
    }
    let live = if view.holder.is_some() { view.live } else { view.live + 1 };
    let latest = view.latest_other.map_or(expires, |other| other.max(expires));
    let reply = Reply {
        limited: false,
        limit,
        remaining: (limit - live).clamp(0, limit),
        retry_after: None,
        reset_after: until(Some(latest)),
    };
    let others = view.members - usize::from(view.id_member);
    let effect = match view.latest_other {
        // Other members, all expired and all read: start the set afresh.
        None if others > 0 && view.whole => Change::Replace { expires_ms },
        _ => Change::Hold { expires_ms, key_expires_ms: latest.ceil_millis() },
    };
    Ok(Outcome { reply, effect })
}

/// CL.RELEASE: 1 (true) if the id held a live lease, which is removed.
pub fn release(view: &View) -> Outcome<bool> {
    let effect = match (view.holder, view.latest_other) {
        (Some(_), Some(other)) => Change::Remove { key_expires_ms: Some(other.ceil_millis()) },
        // No other live lease: the key goes as a whole once every member was read.
        (Some(_), None) if view.whole => Change::Clear,
        (Some(_), None) => Change::Remove { key_expires_ms: None },
        (None, _) if view.members > 0 && view.latest.is_none() && view.whole => Change::Clear,
        (None, _) => Change::Prune,
    };
    Outcome { reply: view.holder.is_some(), effect }
}

#[cfg(test)]
mod tests;
