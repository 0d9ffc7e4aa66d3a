//! CL.THROTTLE against a real server: the contract's vectors, every reply field, peek,
//! refund, MS, state format and expiry, errors, and drop-in compatibility with redis-cell keys.

mod harness;

use harness::{Options, Server, call, error_of, frozen_clock, in_multi, throttle};

#[test]
fn documented_example_and_burst_vectors() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(
        in_multi(&mut c, &["CL.THROTTLE user123 15 30 60", "CL.THROTTLE user123 15 30 60"]),
        vec![[0, 16, 15, -1, 2], [0, 16, 14, -1, 4]]
    );
    let burst = in_multi(&mut c, &["CL.THROTTLE b 4 1 10"; 6]);
    assert_eq!(
        burst,
        vec![
            [0, 5, 4, -1, 10],
            [0, 5, 3, -1, 20],
            [0, 5, 2, -1, 30],
            [0, 5, 1, -1, 40],
            [0, 5, 0, -1, 50],
            [1, 5, 0, 10, 50]
        ]
    );
    assert_eq!(throttle(&mut c, "CL.THROTTLE fresh 4 1 10 6"), [1, 5, 5, -1, 0]);
    let exists: bool = redis::cmd("EXISTS").arg("fresh").query(&mut c).unwrap();
    assert!(!exists, "a denied call on a fresh key creates nothing");
}

#[test]
fn state_is_redis_cells_and_expires_at_the_tat() {
    let server = Server::start();
    let mut c = server.client();
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    throttle(&mut c, "CL.THROTTLE k 9 1 10 3");
    let tat: i64 = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    let expires: i64 = redis::cmd("PEXPIRETIME").arg("k").query(&mut c).unwrap();
    // 3 units of 10 s each after (about) now.
    let ahead = tat - before;
    assert!((30_000_000_000..31_000_000_000).contains(&ahead), "TAT {ahead} ns ahead");
    assert_eq!(expires, (tat as u64).div_ceil(1_000_000) as i64, "the key expires at its TAT, rounded up to the ms");
    // Further calls keep the value a 19-digit decimal and move the expiry with it.
    throttle(&mut c, "CL.THROTTLE k 9 1 10 2");
    let tat2: i64 = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(tat2, tat + 20_000_000_000);
    let expires2: i64 = redis::cmd("PEXPIRETIME").arg("k").query(&mut c).unwrap();
    assert_eq!(expires2, (tat2 as u64).div_ceil(1_000_000) as i64);
}

#[test]
fn continues_keys_written_by_redis_cell() {
    let server = Server::start();
    let mut c = server.client();
    // redis-cell stores the TAT as decimal nanoseconds with a TTL. A limiter 3 units deep
    // (10 s each, burst 4) written by it must be continued, not reset.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    let tat = now + 30_000_000_000;
    let _: () = redis::cmd("SET").arg("cell").arg(tat.to_string()).arg("PX").arg(30_000).query(&mut c).unwrap();
    assert_eq!(throttle(&mut c, "CL.THROTTLE cell 4 1 10"), [0, 5, 1, -1, 40]);
    assert_eq!(throttle(&mut c, "CL.THROTTLE cell 4 1 10"), [0, 5, 0, -1, 50]);
    assert_eq!(throttle(&mut c, "CL.THROTTLE cell 4 1 10"), [1, 5, 0, 10, 50]);
    // A TAT in the past (the key outlived it) is a full limiter.
    let _: () = redis::cmd("SET").arg("old").arg((now - 5_000_000_000).to_string()).query(&mut c).unwrap();
    assert_eq!(throttle(&mut c, "CL.THROTTLE old 4 1 10"), [0, 5, 4, -1, 10]);
}

#[test]
fn peek_writes_nothing_and_refund_gives_back() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(throttle(&mut c, "CL.THROTTLE p 4 1 10 0"), [0, 5, 5, -1, 0]);
    let exists: bool = redis::cmd("EXISTS").arg("p").query(&mut c).unwrap();
    assert!(!exists, "a peek creates nothing");

    throttle(&mut c, "CL.THROTTLE p 4 1 10 3");
    let tat: i64 = redis::cmd("GET").arg("p").query(&mut c).unwrap();
    let at: i64 = redis::cmd("PEXPIRETIME").arg("p").query(&mut c).unwrap();
    assert_eq!(throttle(&mut c, "CL.THROTTLE p 4 1 10 0"), [0, 5, 2, -1, 30]);
    let tat_after: i64 = redis::cmd("GET").arg("p").query(&mut c).unwrap();
    let at_after: i64 = redis::cmd("PEXPIRETIME").arg("p").query(&mut c).unwrap();
    assert_eq!((tat_after, at_after), (tat, at), "a peek re-times nothing");

    assert_eq!(throttle(&mut c, "CL.THROTTLE p 4 1 10 -1"), [0, 5, 3, -1, 20]);
    let refunded: i64 = redis::cmd("GET").arg("p").query(&mut c).unwrap();
    assert_eq!(refunded, tat - 10_000_000_000);
    assert_eq!(throttle(&mut c, "CL.THROTTLE p 4 1 10 -50"), [0, 5, 5, -1, 0]);
    let exists: bool = redis::cmd("EXISTS").arg("p").query(&mut c).unwrap();
    assert!(!exists, "a refund that leaves the limiter full removes its key");
}

#[test]
fn milliseconds_everywhere_with_ms() {
    let server = Server::start();
    let mut c = server.client();
    // 1 per 250 ms, burst 1: reply times in ms, rounded up.
    let r = in_multi(&mut c, &["CL.THROTTLE m 1 1 250 MS", "CL.THROTTLE m 1 1 250 MS", "CL.THROTTLE m 1 1 250 1 MS"]);
    assert_eq!(r[0], [0, 2, 1, -1, 250]);
    assert_eq!(r[1], [0, 2, 0, -1, 500]);
    assert_eq!(r[2][..3], [1, 2, 0]);
    assert!((249..=250).contains(&r[2][3]) && (499..=500).contains(&r[2][4]), "{:?}", r[2]);
    // MS may come before the quantity.
    assert_eq!(throttle(&mut c, "CL.THROTTLE m2 9 10 1000 MS 3")[..3], [0, 10, 7]);
}

#[test]
fn every_bad_input_is_a_clear_error_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    throttle(&mut c, "CL.THROTTLE k 4 1 10");
    let before = harness::snapshot(&mut c);
    let int_err = "ERR value is not an integer or out of range";
    let cases: Vec<(&[&[u8]], &str)> = vec![
        (&[b"CL.THROTTLE", b"k", b"1", b"1"], "ERR wrong number of arguments for 'cl.throttle' command"),
        (
            &[b"CL.THROTTLE", b"k", b"1", b"1", b"1", b"-1", b"HELD", b"1", b"MS", b"DEBIT", b"SHADOW", b"x"],
            "ERR wrong number of arguments for 'cl.throttle' command",
        ),
        (&[b"CL.THROTTLE", b"k", b"1", b"1", b"1", b"1", b"MS", b"SHADOW", b"x"], "ERR syntax error"),
        (
            &[b"CL.THROTTLE", b"k", b"1", b"1", b"1", b"1", b"HELD", b"5"],
            "ERR HELD is valid only with a negative quantity (a refund)",
        ),
        (
            &[b"CL.THROTTLE", b"k", b"1", b"1", b"1", b"-1", b"HELD", b"-5"],
            "ERR held must be an integer from 0 to 9223372036854",
        ),
        (&[b"CL.THROTTLE", b"k", b"1", b"1", b"1", b"-1", b"HELD"], "ERR syntax error"),
        (&[b"CL.THROTTLE", b"k", b"1", b"1", b"1", b"1", b"MS", b"x"], "ERR syntax error"),
        (&[b"CL.THROTTLE", b"k", b"1.5", b"1", b"1"], int_err),
        (&[b"CL.THROTTLE", b"k", b"0x10", b"1", b"1"], int_err),
        (&[b"CL.THROTTLE", b"k", b" 5", b"1", b"1"], int_err),
        (&[b"CL.THROTTLE", b"k", b"", b"1", b"1"], int_err),
        (&[b"CL.THROTTLE", b"k", b"\xff\xfe", b"1", b"1"], int_err),
        (&[b"CL.THROTTLE", b"k", b"99999999999999999999", b"1", b"1"], int_err),
        (&[b"CL.THROTTLE", b"k", b"1", b"1", b"1", b"2.5"], int_err),
        (&[b"CL.THROTTLE", b"k", b"-1", b"1", b"1"], "ERR max_burst must be an integer from 0 to 999999999999999999"),
        (&[b"CL.THROTTLE", b"k", b"1", b"0", b"1"], "ERR count must be an integer from 1 to 1000000000000000000"),
        (&[b"CL.THROTTLE", b"k", b"1", b"1", b"-5"], "ERR period must be an integer from 1 to 1000000000 (seconds)"),
        (
            &[b"CL.THROTTLE", b"k", b"1", b"1000000000", b"1", b"MS"],
            "ERR rate is too fast: period divided by count is less than one nanosecond",
        ),
        (
            &[b"CL.THROTTLE", b"k", b"1", b"1", b"9223372036854775807"],
            "ERR period must be an integer from 1 to 1000000000 (seconds)",
        ),
        (
            &[b"CL.THROTTLE", b"k", b"9223372036854775806", b"1", b"1000"],
            "ERR max_burst must be an integer from 0 to 999999999999999999",
        ),
        (
            &[b"CL.THROTTLE", b"k", b"999999999", b"1", b"2"],
            "ERR parameters are too large: (max_burst + 1) * period / count must be at most 1000000000 seconds (1000000000000 milliseconds)",
        ),
        (&[b"CL.THROTTLE", b"k", b"1", b"1", b"1", b"FOO"], "ERR syntax error"),
        (&[b"CL.THROTTLE", b"k", b"1", b"1", b"1", b"MS", b"MS"], "ERR syntax error"),
    ];
    for (args, want) in cases {
        assert_eq!(
            error_of(&mut c, args),
            want,
            "{:?}",
            args.iter().map(|a| String::from_utf8_lossy(a)).collect::<Vec<_>>()
        );
    }
    assert_eq!(harness::snapshot(&mut c), before, "no error changed any key");
}

#[test]
fn other_types_and_corrupt_state_are_refused_untouched() {
    let server = Server::start();
    let mut c = server.client();
    let _: () = redis::cmd("LPUSH").arg("list").arg("a").query(&mut c).unwrap();
    let _: () = redis::cmd("HSET").arg("hash").arg("f").arg("v").query(&mut c).unwrap();
    for key in ["list", "hash"] {
        assert_eq!(
            error_of(&mut c, &[b"CL.THROTTLE", key.as_bytes(), b"1", b"1", b"1"]),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
    }
    for corrupt in [&b"hello"[..], b"1.5e18", b"", b"\x03\x01\x02"] {
        let _: () = redis::cmd("SET").arg("bad").arg(corrupt).query(&mut c).unwrap();
        assert_eq!(
            error_of(&mut c, &[b"CL.THROTTLE", b"bad", b"1", b"1", b"1"]),
            "ERR key does not hold valid CL.THROTTLE state"
        );
        let still: Vec<u8> = redis::cmd("GET").arg("bad").query(&mut c).unwrap();
        assert_eq!(still, corrupt, "the value is left untouched");
    }
}

#[test]
fn keys_are_binary_safe() {
    let server = Server::start();
    let mut c = server.client();
    let key: &[u8] = b"\x00rl:\xff\r\n key";
    let reply = call(&mut c, &[b"CL.THROTTLE", key, b"1", b"1", b"60"]).unwrap();
    let reply: Vec<i64> = redis::FromRedisValue::from_redis_value(reply).unwrap();
    assert_eq!(reply, vec![0, 2, 1, -1, 60]);
    let exists: bool = redis::cmd("EXISTS").arg(key).query(&mut c).unwrap();
    assert!(exists);
}

#[test]
fn denials_and_peeks_do_not_disturb_watchers() {
    let server = Server::start();
    let mut c = server.client();
    let mut other = server.client();
    throttle(&mut c, "CL.THROTTLE w 0 1 60");
    let _: () = redis::cmd("WATCH").arg("w").query(&mut c).unwrap();
    assert_eq!(throttle(&mut other, "CL.THROTTLE w 0 1 60")[0], 1);
    assert_eq!(throttle(&mut other, "CL.THROTTLE w 0 1 60 0")[..3], [0, 1, 0], "a peek of an empty limiter");
    let ok: Option<(String,)> = redis::pipe().atomic().cmd("SET").arg("x").arg("1").query(&mut c).unwrap();
    assert!(ok.is_some(), "a call that changed nothing must not abort a watcher's transaction");
    // A real change does.
    let _: () = redis::cmd("WATCH").arg("w").query(&mut c).unwrap();
    assert_eq!(throttle(&mut other, "CL.THROTTLE w 0 1 60 -1")[0], 0);
    let aborted: Option<(String,)> = redis::pipe().atomic().cmd("SET").arg("x").arg("2").query(&mut c).unwrap();
    assert!(aborted.is_none(), "a write must abort a watcher's transaction");
}

#[test]
fn clock_is_the_command_time_where_the_server_has_it_else_real_time() {
    // Redis 7.2+ and Valkey give modules the command time, frozen for a whole MULTI/EXEC; Redis
    // 7.0 lacks the API and the module degrades to the real-time clock, as the contract says.
    let server = Server::with(Options::default().arg("--enable-debug-command yes"));
    let mut c = server.client();
    let call: &[&[u8]] = &[b"CL.THROTTLE", b"t", b"9", b"1", b"1000", b"MS"];
    let (first, _, second): (Vec<i64>, String, Vec<i64>) = redis::pipe()
        .atomic()
        .add_command(harness::command(call))
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.2")
        .add_command(harness::command(call))
        .query(&mut c)
        .unwrap();
    assert_eq!(first, [0, 10, 9, -1, 1000]);
    if frozen_clock(&server) {
        assert_eq!(second, [0, 10, 8, -1, 2000], "one instant for the whole transaction");
    } else {
        // 200 ms of real time passed between the calls: the TAT is 2000 ms after the first.
        assert_eq!(second[..4], [0, 10, 8, -1]);
        assert!((1700..=1800).contains(&second[4]), "real-time clock: reset_after {} ms", second[4]);
    }
}
