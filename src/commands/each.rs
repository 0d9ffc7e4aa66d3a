//! `CL.EACH numkeys key [key ...] spec [spec ...] [MS] [DEBIT] [SHADOW]`: several independent
//! limiters of any algorithms at one instant, each admitted or denied on its own.

use redis_throttle_core::{Charge, Result, each};

use super::all::{read_keys, write_keys};
use crate::counters::Class;
use crate::dispatch::{Call, Response};
use crate::operate;
use crate::register::{Registered, registered};
use crate::{clock, config};

pub static COMMAND: Registered = registered!(handler, &each::COMMAND);

fn handler(call: &Call) -> Result<Response> {
    let args = call.args();
    let request = each::parse(&args, &config::caps())?;
    let now = clock::now();
    let mut keys = read_keys(call, &request)?;
    let stored: Vec<_> = keys.iter().map(crate::store::Key::stored).collect();
    let mut decisions = each::decide(&request.limiters, &request.held, &stored, now, request.charge)?;
    drop(stored);
    let debit = request.charge == Charge::Debit;
    // Each admitted limiter's write (a denied take has none; with DEBIT every charge is one),
    // except that a debit with the SHADOW option writes nothing (see `super::limiter`).
    if !(debit && request.shadow()) {
        write_keys(&mut keys, &decisions)?;
    }

    // Each limiter counts as a call of its own (a call of N limiters adds N to `calls`, and
    // each debit of units to `debits`), and a denied one (a refused take or check, an
    // overdrawn debit) is recorded as its single command's denial is (sketch, `throttled`).
    let shadow_call = config::shadow() || request.shadow();
    for (i, (d, &(_, quantity))) in decisions.iter_mut().zip(&request.limiters).enumerate() {
        let denied = d.reply.denies(quantity);
        let shadow = denied && shadow_call;
        if denied {
            operate::denied(call, 1 + i, request.keys[i]);
            if shadow {
                d.reply = d.reply.shadowed();
            }
        }
        call.count(Class::of(quantity, denied, shadow));
        if debit && quantity > 0 {
            call.count_debit();
        }
    }
    Ok(Response::Fives(decisions.iter().map(|d| d.reply.to_array(request.unit)).collect()))
}
