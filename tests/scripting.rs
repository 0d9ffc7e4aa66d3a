//! The commands inside Lua scripts and functions: they work there, and (on servers with a
//! cached command clock) every call of one script sees the same instant. Their effects reach a
//! module-less replica like any other call's.
//!
//! skip twin: the module's commands inside Lua scripts and functions; the twin is itself a function.
//! skip containers: needs a module-less replica.

mod harness;

use harness::{Options, Server, frozen_clock, snapshot, wait_until};
use std::time::Duration;

#[test]
fn scripts_and_functions_call_every_limiter() {
    let server = Server::start();
    let mut c = server.client();
    let script = "return {redis.call('CL.THROTTLE', KEYS[1], 1, 1, 60), redis.call('CL.THROTTLE', KEYS[1], 1, 1, 60), \
                  redis.call('CL.THROTTLE', KEYS[1], 1, 1, 60), redis.call('CL.WINDOW', KEYS[2], 2, 60), \
                  redis.call('CL.BUCKET', KEYS[3], 2, 1, 60), redis.call('CL.COUNTER', KEYS[4], 2, 60)}";
    let replies: Vec<[i64; 5]> =
        redis::cmd("EVAL").arg(script).arg(4).arg(&["t", "w", "b", "c"]).query(&mut c).unwrap();
    assert_eq!(
        replies,
        vec![
            [0, 2, 1, -1, 60],
            [0, 2, 0, -1, 120],
            [1, 2, 0, 60, 120],
            [0, 2, 1, -1, 60],
            [0, 2, 1, -1, 60],
            [0, 2, 1, -1, 60]
        ]
    );

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
    wait_until("the replica to match the master", Duration::from_secs(10), || {
        snapshot(&mut replica.client()) == on_master
    });
}

/// Two `CL.THROTTLE … MS` calls with a few milliseconds of Lua work between them: the second's
/// reset_after is 2000 when both saw one instant, 2000 − the time that passed otherwise.
const TWO_CALLS_APART: &str = "local a = redis.call('CL.THROTTLE', KEYS[1], 9, 1, 1000, 'MS') \
    local x = 0 for i = 1, 2000000 do x = x + i end \
    local b = redis.call('CL.THROTTLE', KEYS[1], 9, 1, 1000, 'MS') return {a[5], b[5]}";

#[test]
fn one_instant_for_a_whole_script_or_function() {
    // Valkey 9 runs Lua in a module of its own (MODULE LIST shows `lua`): its scripts and
    // functions must still give every call the command time of the EVAL or FCALL.
    let server = Server::start();
    let mut c = server.client();
    let library =
        format!("#!lua name=clock\nredis.register_function('two_calls', function(KEYS, ARGV) {TWO_CALLS_APART} end)");
    let _: String = redis::cmd("FUNCTION").arg("LOAD").arg(library).query(&mut c).unwrap();
    let in_script: Vec<i64> = redis::cmd("EVAL").arg(TWO_CALLS_APART).arg(1).arg("s").query(&mut c).unwrap();
    let in_function: Vec<i64> = redis::cmd("FCALL").arg("two_calls").arg(1).arg("f").query(&mut c).unwrap();
    for (what, resets) in [("script", in_script), ("function", in_function)] {
        assert_eq!(resets[0], 1000, "{what}");
        if frozen_clock(&server) {
            assert_eq!(resets[1], 2000, "{what}: both calls see the same instant");
        } else {
            // Redis 7.0: the real-time clock moved on during the Lua loop.
            assert!((1000..2000).contains(&resets[1]), "{what}: real-time clock, reset_after {} ms", resets[1]);
        }
    }
}
