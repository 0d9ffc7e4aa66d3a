//! `CL.ACQUIRE key limit lease id [MS]`: takes or renews a lease; at most `limit` live at once.

use redis_throttle_core::Result;
use redis_throttle_core::lease::{self, Acquire};

use crate::counters::Class;
use crate::dispatch::{Call, Response};
use crate::operate;
use crate::register::{Registered, registered};
use crate::store::Key;
use crate::{clock, config};

pub static COMMAND: Registered = registered!(handler, &lease::ACQUIRE);

fn handler(call: &Call) -> Result<Response> {
    let args = call.args();
    let request = Acquire::parse(&args)?;
    let now = clock::now();
    let mut key = Key::open_set(call, 0)?;
    let id = call.word(3)?;
    let scan = lease::scan(&mut key.leases(id), now, request.limit)?;
    let outcome = lease::acquire(&scan.view, now, request.limit, request.lease)?;
    let write = key.prepare_leases(outcome.effect, &scan, id)?;
    key.apply_leases(write)?;
    // Counted as a call taking one unit; in shadow mode a denial (no lease taken) is answered
    // as an admission.
    let mut reply = outcome.reply;
    let shadow = reply.limited && (config::shadow() || request.shadow);
    if reply.limited {
        operate::denied(call, 0, request.key);
        if shadow {
            reply = reply.shadowed();
        }
    }
    call.count(Class::of(1, outcome.reply.limited, shadow));
    Ok(Response::Five(reply.to_array(request.unit)))
}
