//! `CL.RELEASE key id`: gives a lease back early; 1 if `id` held a live lease, else 0.

use redis_throttle_core::Result;
use redis_throttle_core::lease::{self, Release};

use crate::clock;
use crate::counters::Class;
use crate::dispatch::{Call, Node, Response};
use crate::register::{Registered, registered};
use crate::store::Key;

pub static COMMAND: Registered = registered!(handler, &lease::RELEASE);

fn handler(call: &Call) -> Result<Response> {
    Release::parse(&call.args())?;
    let now = clock::now();
    let mut key = Key::open_set(call, 0)?;
    let id = call.word(1)?;
    // Nothing is counted: a limit of 1 keeps the scan to its least.
    let scan = lease::scan(&mut key.leases(id), now, 1)?;
    let outcome = lease::release(&scan.view);
    let write = key.prepare_leases(outcome.effect, &scan, id)?;
    key.apply_leases(write)?;
    // A lease given back: counted as a refund, whether or not one was held.
    call.count(Class::Refund);
    Ok(Response::Tree(Node::Integer(i64::from(outcome.reply))))
}
