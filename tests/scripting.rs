//! The commands inside Lua scripts and functions: they work there, and (on servers with a
//! cached command clock) every call of one script sees the same instant. Their effects reach a
//! module-less replica like any other call's.

mod harness;

use harness::{Options, Server, snapshot, wait_until};
use std::time::Duration;

#[test]
fn scripts_and_functions_call_every_limiter() {
    let server = Server::start();
    let mut c = server.client();
    let script = "return {redis.call('CL.THROTTLE', KEYS[1], 1, 1, 60), redis.call('CL.THROTTLE', KEYS[1], 1, 1, 60), \
                  redis.call('CL.THROTTLE', KEYS[1], 1, 1, 60), redis.call('CL.WINDOW', KEYS[2], 2, 60), \
                  redis.call('CL.BUCKET', KEYS[3], 2, 1, 60), redis.call('CL.COUNTER', KEYS[4], 2, 60)}";
    let replies: Vec<[i64; 5]> = redis::cmd("EVAL").arg(script).arg(4).arg(&["t", "w", "b", "c"]).query(&mut c).unwrap();
    assert_eq!(replies, vec![[0, 2, 1, -1, 60], [0, 2, 0, -1, 120], [1, 2, 0, 60, 120], [0, 2, 1, -1, 60], [0, 2, 1, -1, 60], [0, 2, 1, -1, 60]]);

    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=limits\nredis.register_function('allow', function(keys, args) return redis.call('CL.THROTTLE', keys[1], 0, 1, 60)[1] == 0 end)")
        .query(&mut c)
        .unwrap();
    let first: Option<i64> = redis::cmd("FCALL").arg("allow").arg(1).arg("f").query(&mut c).unwrap();
    let second: Option<i64> = redis::cmd("FCALL").arg("allow").arg(1).arg("f").query(&mut c).unwrap();
    assert_eq!((first, second), (Some(1), None), "a function admits once, then denies");
}

#[test]
fn a_scripts_effects_replicate_to_a_module_less_replica() {
    let master = Server::start();
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    let script = "for i = 1, 5 do redis.call('CL.WINDOW', KEYS[1], 3, 600) redis.call('CL.THROTTLE', KEYS[2], 3, 1, 600) end return 1";
    let _: i64 = redis::cmd("EVAL").arg(script).arg(2).arg("sw").arg("st").query(&mut c).unwrap();
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    let on_master = snapshot(&mut c);
    wait_until("the replica to match the master", Duration::from_secs(10), || snapshot(&mut replica.client()) == on_master);
}
