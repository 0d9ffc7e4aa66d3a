//! One interface over the four algorithms, so that a command (or a coming multi-key command
//! evaluating several limiters all-or-nothing) handles any of them the same way: parse the
//! arguments, decide from what the key holds, and only then, if told to, apply the effect.

use crate::error::Result;
use crate::kind::{self, Kind};
use crate::request::Request;
use crate::time::Instant;
use crate::{Decision, Patch, bucket, counter, gcra, window};

/// What a limiter's key holds when the call starts.
#[derive(Debug, Clone, Copy)]
pub struct Stored<'a> {
    pub value: &'a [u8],
    /// The key's absolute expiry in Unix milliseconds; read only for limiters whose state
    /// includes it (`READS_EXPIRY`), else `None`.
    pub expires_at_ms: Option<i64>,
}

pub trait Limiter {
    /// Which stored values are this limiter's (see `kind`).
    const KIND: Kind;
    /// Whether the key's expiry is part of the state (reading it costs the server a lookup).
    const READS_EXPIRY: bool;
    type Params;
    /// What a decision stores: an integer value, or an edit of a binary one.
    type Write;

    fn parse<'a>(args: &[&'a [u8]]) -> Result<Request<'a, Self::Params>>;

    /// Decides a call without writing anything. A value that belongs to another kind of
    /// limiter is WRONGTYPE.
    fn decide(stored: Option<Stored<'_>>, now: Instant, params: &Self::Params, quantity: i64) -> Result<Decision<Self::Write>>;
}

/// CL.THROTTLE.
pub struct Gcra;
/// CL.WINDOW.
pub struct SlidingWindow;
/// CL.BUCKET.
pub struct TokenBucket;
/// CL.COUNTER.
pub struct FixedWindow;

impl Limiter for Gcra {
    const KIND: Kind = Kind::Throttle;
    const READS_EXPIRY: bool = false;
    type Params = gcra::Params;
    type Write = i64;

    fn parse<'a>(args: &[&'a [u8]]) -> Result<Request<'a, gcra::Params>> {
        crate::request::Throttle::parse(args)
    }

    fn decide(stored: Option<Stored<'_>>, now: Instant, params: &gcra::Params, quantity: i64) -> Result<Decision<i64>> {
        let tat = stored.map(|s| kind::read(Self::KIND, s.value, gcra::decode)).transpose()?;
        let decision = gcra::decide(tat, now, params, quantity)?;
        Ok(Decision { reply: decision.reply, effect: decision.effect.map(Instant::as_nanos) })
    }
}

impl Limiter for SlidingWindow {
    const KIND: Kind = Kind::Window;
    const READS_EXPIRY: bool = false;
    type Params = window::Params;
    type Write = Patch;

    fn parse<'a>(args: &[&'a [u8]]) -> Result<Request<'a, window::Params>> {
        crate::request::Window::parse(args)
    }

    fn decide(stored: Option<Stored<'_>>, now: Instant, params: &window::Params, quantity: i64) -> Result<Decision<Patch>> {
        match stored {
            Some(s) => kind::read(Self::KIND, s.value, |log| window::decide(Some(log), now, params, quantity)),
            None => window::decide(None, now, params, quantity),
        }
    }
}

impl Limiter for TokenBucket {
    const KIND: Kind = Kind::Bucket;
    const READS_EXPIRY: bool = true;
    type Params = bucket::Params;
    type Write = i64;

    fn parse<'a>(args: &[&'a [u8]]) -> Result<Request<'a, bucket::Params>> {
        crate::request::Bucket::parse(args)
    }

    fn decide(stored: Option<Stored<'_>>, now: Instant, params: &bucket::Params, quantity: i64) -> Result<Decision<i64>> {
        let state = stored.map(|s| kind::read(Self::KIND, s.value, |v| bucket::decode(v, s.expires_at_ms))).transpose()?;
        bucket::decide(state, now, params, quantity)
    }
}

impl Limiter for FixedWindow {
    const KIND: Kind = Kind::Counter;
    const READS_EXPIRY: bool = true;
    type Params = counter::Params;
    type Write = i64;

    fn parse<'a>(args: &[&'a [u8]]) -> Result<Request<'a, counter::Params>> {
        crate::request::Counter::parse(args)
    }

    fn decide(stored: Option<Stored<'_>>, now: Instant, params: &counter::Params, quantity: i64) -> Result<Decision<i64>> {
        let state = stored.map(|s| kind::read(Self::KIND, s.value, |v| counter::decode(v, s.expires_at_ms))).transpose()?;
        counter::decide(state, now, params, quantity)
    }
}
