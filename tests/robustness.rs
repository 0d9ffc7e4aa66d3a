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

/// A limiter's five integers within what they may be.
fn assert_five(refs: &[&[u8]], v: &[i64]) {
    assert!(v[0] == 0 || v[0] == 1, "{refs:?} -> {v:?}");
    assert!(v[2] >= 0 && v[2] <= v[1], "remaining within [0, limit]: {refs:?} -> {v:?}");
    assert!(v[3] >= -1 && v[4] >= 0, "{refs:?} -> {v:?}");
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
                assert_five(&refs, &v);
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

/// CL.EACH's never-crash cases: random `numkeys`, keys of other types and invalid states among
/// fresh ones, specs of every algorithm with plausible or random numbers and options, random
/// words anywhere (the call's options among them): an error, or one array of five integers per
/// key, and nothing else changes.
#[test]
fn random_each_calls_get_an_error_or_five_integers_per_key() {
    let mut server = Server::start();
    let mut c = server.client();
    let _: () = redis::cmd("LPUSH").arg("{e}list").arg("x").query(&mut c).unwrap();
    let _: () = redis::cmd("SET").arg("{e}junk").arg("not a number").query(&mut c).unwrap();
    let mut rng = rand::rng();
    let specs = ["THROTTLE", "WINDOW", "BUCKET", "COUNTER", "QUOTA"];
    let (mut ok, mut errors) = (0, 0);
    for _ in 0..3000 {
        let n = rng.random_range(1..5usize);
        let claimed = if rng.random_bool(0.9) { n.to_string().into_bytes() } else { random_arg(&mut rng) };
        let mut args: Vec<Vec<u8>> = vec![b"CL.EACH".to_vec(), claimed];
        for i in 0..n {
            args.push(match rng.random_range(0..12) {
                0 => b"{e}list".to_vec(),
                1 => b"{e}junk".to_vec(),
                _ => format!("{{e}}k{}:{i}", rng.random_range(0..10)).into_bytes(),
            });
        }
        for _ in 0..n {
            let spec = specs[rng.random_range(0..specs.len())];
            args.push(spec.as_bytes().to_vec());
            match spec {
                "QUOTA" => args.extend([b"5".to_vec(), b"PER".to_vec(), b"MINUTE".to_vec()]),
                "THROTTLE" | "BUCKET" => args.extend((0..3).map(|_| rng.random_range(1..50).to_string().into_bytes())),
                _ => args.extend((0..2).map(|_| rng.random_range(1..50).to_string().into_bytes())),
            }
            if rng.random_bool(0.4) {
                args.push(b"QUANTITY".to_vec());
                args.push(rng.random_range(-3..6).to_string().into_bytes());
            }
        }
        for _ in 0..if rng.random_bool(0.3) { rng.random_range(1..3) } else { 0 } {
            let at = rng.random_range(2..=args.len());
            let word = match rng.random_range(0..4) {
                0 | 1 => random_arg(&mut rng),
                2 => b"MS".to_vec(),
                _ => [b"DEBIT".as_slice(), b"SHADOW", b"HELD", b"debit"][rng.random_range(0..4)].to_vec(),
            };
            args.insert(at, word);
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        match call(&mut c, &refs) {
            Ok(Value::Array(items)) => {
                let replies: Vec<Vec<i64>> = redis::FromRedisValue::from_redis_value(Value::Array(items))
                    .unwrap_or_else(|e| panic!("{refs:?}: {e}"));
                assert_eq!(replies.len(), n, "{refs:?}");
                for v in &replies {
                    assert_eq!(v.len(), 5, "{refs:?}");
                    assert_five(&refs, v);
                }
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
    let still: String = redis::cmd("GET").arg("{e}junk").query(&mut c).unwrap();
    assert_eq!(still, "not a number");
    let len: i64 = redis::cmd("LLEN").arg("{e}list").query(&mut c).unwrap();
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
