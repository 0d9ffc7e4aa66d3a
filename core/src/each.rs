//! CL.EACH: several independent limiters, of any algorithms, decided at one instant.
//!
//! `CL.EACH numkeys key [key ...] spec [spec ...] [MS] [DEBIT] [SHADOW]`: CL.ALL's grammar and
//! key specs (see [`crate::all`]), but each limiter is decided on its own: each admitted one
//! (each refund, and with `DEBIT` every one) applies its effect, a denied one writes nothing,
//! whatever the others decide. One
//! command per hash slot replaces one command per limiter where the limits are independent
//! (an Envoy gateway's descriptors, several routes' limits), in one round trip.

use crate::all::{MAX_KEYS, Request, SPECS};
use crate::caps::Caps;
use crate::command::{Arg, ArgKind, Command, Keys};
use crate::error::Result;
use crate::limiter::{LIMITER_FLAGS, Stored, Write};
use crate::time::Instant;
use crate::{Charge, Decision};

pub static COMMAND: Command = Command {
    name: "cl.each",
    summary: "Decides several independent limiters of any algorithms at one instant: each admitted one is charged, each denied one is left as it was.",
    complexity: "The sum of the limiters' own complexities",
    since: "1.3.0",
    flags: LIMITER_FLAGS,
    acl_categories: "write fast",
    keys: Keys::Counted { max: MAX_KEYS },
    args: &[
        Arg { name: "spec", kind: ArgKind::Spec(&SPECS), optional: false, multiple: true },
        Arg::MS,
        Arg::DEBIT,
        Arg::SHADOW,
    ],
};

/// Parses a call, every limiter's parameters within `caps` (CL.ALL's parser with this table).
pub fn parse<'a>(args: &[&'a [u8]], caps: &Caps) -> Result<Request<'a>> {
    Request::parse_as(&COMMAND, args, caps)
}

/// Decides every limiter against its key's state at `now`, each on its own: the decisions in
/// the keys' order, each exactly what its single command would decide with the call's `charge`
/// (`DEBIT`: every limiter counts its quantity, `limited` saying whether it overdrew) and its
/// `HELD t`, if any, bounding its refund (`held[i]`, missing entries `None`). An error of any
/// limiter is the call's, naming that limiter, and then nothing is written for any.
pub fn decide(
    limiters: &[(crate::limiter::Limiter, i64)],
    held: &[Option<Instant>],
    stored: &[Option<Stored<'_>>],
    now: Instant,
    charge: Charge,
) -> Result<Vec<Decision<Write>>> {
    limiters
        .iter()
        .zip(stored)
        .enumerate()
        .map(|(i, ((limiter, quantity), stored))| {
            let held = held.get(i).copied().flatten();
            limiter.decide_charge(*stored, now, *quantity, held, charge).map_err(|e| e.in_limiter(i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests;
