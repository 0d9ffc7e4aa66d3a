//! `CL.TOP [count] [RESET]`: the keys denied most on this node since the last reset, with
//! their denial counts, highest first, as a flat array `key, count, key, count, …`. `RESET`
//! replies the same, then clears the sketch (read and reset at one instant: no denial is lost
//! between them). It reads and writes the module's memory only, never the keyspace, and is
//! not replicated: each node answers for the denials it made.

use redis_throttle_core::Result;
use redis_throttle_core::top::{self, Request};

use crate::dispatch::{Call, Node, Response};
use crate::operate;
use crate::register::{Registered, registered};

pub static COMMAND: Registered = registered!(handler, &top::COMMAND, uncounted);

fn handler(call: &Call) -> Result<Response> {
    let request = Request::parse(&call.args())?;
    let mut sketch = operate::top();
    let mut reply = Vec::with_capacity(2 * request.count);
    for entry in sketch.top(request.count) {
        reply.push(Node::Bulk(entry.key.to_vec()));
        reply.push(Node::Integer(i64::try_from(entry.count).unwrap_or(i64::MAX)));
    }
    if request.reset {
        sketch.reset();
    }
    Ok(Response::Tree(Node::Array(reply)))
}
