//! The server never dies because of us: thousands of random argument vectors against a live
//! server, and a deliberate panic inside a command.

mod harness;

use harness::{Options, Server, call};
use rand::Rng;
use rand::seq::IndexedRandom;
use redis::Value;

const COMMANDS: &[&str] = &["CL.THROTTLE", "CL.WINDOW", "CL.BUCKET", "CL.COUNTER"];

fn random_arg(rng: &mut impl Rng) -> Vec<u8> {
    let numbers: &[&str] = &[
        "0",
        "1",
        "-1",
        "2",
        "15",
        "60",
        "1000",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "4611686018427387904",
        "1.5",
        "0x10",
        " 5",
        "",
        "+5",
        "05",
        "MS",
        "ms",
        "PRECISION",
        "FOO",
        "-0",
    ];
    match rng.random_range(0..4) {
        0 => numbers.choose(rng).unwrap().as_bytes().to_vec(),
        1 => rng.random_range(i64::MIN..=i64::MAX).to_string().into_bytes(),
        2 => rng.random_range(-100i64..100_000).to_string().into_bytes(),
        _ => (0..rng.random_range(0..12)).map(|_| rng.random()).collect(),
    }
}

#[test]
fn random_argument_vectors_get_an_error_or_five_integers() {
    let mut server = Server::start();
    let mut c = server.client();
    let _: () = redis::cmd("LPUSH").arg("list").arg("x").query(&mut c).unwrap();
    let _: () = redis::cmd("SET").arg("junk").arg("not a number").query(&mut c).unwrap();
    let mut rng = rand::rng();
    let (mut ok, mut errors) = (0, 0);
    for _ in 0..5000 {
        let command = COMMANDS.choose(&mut rng).unwrap().as_bytes().to_vec();
        let key: Vec<u8> = match rng.random_range(0..4) {
            0 => b"list".to_vec(),
            1 => b"junk".to_vec(),
            _ => format!("k{}", rng.random_range(0..20)).into_bytes(),
        };
        let mut args = vec![command, key];
        if rng.random_bool(0.7) {
            // Plausible parameters, so that many calls reach the algorithm and the state.
            args.extend((0..3).map(|_| rng.random_range(1..100).to_string().into_bytes()));
            if rng.random_bool(0.5) {
                args.push(rng.random_range(-5..10).to_string().into_bytes());
            }
        }
        for _ in 0..rng.random_range(0..3) {
            args.push(random_arg(&mut rng));
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        match call(&mut c, &refs) {
            Ok(Value::Array(items)) => {
                assert_eq!(items.len(), 5, "{refs:?}");
                let v: Vec<i64> = redis::FromRedisValue::from_redis_value(Value::Array(items)).unwrap();
                assert!(v[0] == 0 || v[0] == 1, "{refs:?} -> {v:?}");
                assert!(v[2] >= 0 && v[2] <= v[1], "remaining within [0, limit]: {refs:?} -> {v:?}");
                assert!(v[3] >= -1 && v[4] >= 0, "{refs:?} -> {v:?}");
                ok += 1;
            }
            Ok(other) => panic!("{refs:?} -> unexpected reply {other:?}"),
            Err(e) => {
                assert!(e.code().is_some(), "a Redis error with a code: {e}");
                errors += 1;
            }
        }
    }
    assert!(server.is_alive(), "the server survived");
    assert!(ok > 100 && errors > 100, "both paths were exercised: {ok} ok, {errors} errors");
    let still: String = redis::cmd("GET").arg("junk").query(&mut c).unwrap();
    assert_eq!(still, "not a number");
    let len: i64 = redis::cmd("LLEN").arg("list").query(&mut c).unwrap();
    assert_eq!(len, 1);
}

/// skip twin: a panic inside the module.
#[test]
fn a_panic_inside_a_command_is_an_error_reply_and_the_server_lives() {
    let mut server = Server::with(Options::default().debug_commands());
    let mut c = server.client();
    for _ in 0..3 {
        let e = harness::error_of(&mut c, &[b"CL.DEBUG", b"PANIC"]);
        assert!(e.starts_with("ERR internal error"), "{e}");
    }
    assert!(server.is_alive());
    assert_eq!(harness::throttle(&mut c, "CL.THROTTLE after 1 1 60"), [0, 2, 1, -1, 60]);
    // Without the load-time switch the debug command does not exist.
    let plain = Server::start();
    let e = harness::error_of(&mut plain.client(), &[b"CL.DEBUG", b"PANIC"]);
    assert!(e.contains("unknown command"), "{e}");
}
