//! CL.WINDOW, CL.BUCKET and CL.COUNTER against a real server: vectors for every reply field,
//! peek, refund, MS, the stored state, errors, and keys of one limiter used by another.

mod harness;

use harness::{Reply, Server, error_of, get_bytes, in_multi, pexpiretime, snapshot, throttle};

fn exists(c: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query(c).unwrap()
}

#[test]
fn window_exact_vectors_peek_refund() {
    let server = Server::start();
    let mut c = server.client();
    let r = in_multi(&mut c, &["CL.WINDOW w 3 10"; 4]);
    assert_eq!(r[..3], [[0, 3, 2, -1, 10], [0, 3, 1, -1, 10], [0, 3, 0, -1, 10]]);
    assert_eq!(r[3], [1, 3, 0, 10, 10], "denied until the oldest action leaves");
    assert_eq!(throttle(&mut c, "CL.WINDOW w 3 10 0"), [0, 3, 0, -1, 10], "peek");
    assert_eq!(throttle(&mut c, "CL.WINDOW w 3 10 -1"), [0, 3, 1, -1, 10], "a refund gives back the oldest action");
    assert_eq!(throttle(&mut c, "CL.WINDOW w 3 10 4"), [1, 3, 1, -1, 10], "more than the limit: never");
    assert_eq!(throttle(&mut c, "CL.WINDOW w 3 10 -5"), [0, 3, 3, -1, 0]);
    assert!(!exists(&mut c, "w"), "a refund to full removes the key");
    assert_eq!(throttle(&mut c, "CL.WINDOW fresh 3 10 0"), [0, 3, 3, -1, 0]);
    assert!(!exists(&mut c, "fresh"), "a peek creates nothing");
}

#[test]
fn window_in_milliseconds_and_its_documented_layout() {
    let server = Server::start();
    let mut c = server.client();
    let r = in_multi(&mut c, &["CL.WINDOW m 2 500 MS", "CL.WINDOW m 2 500 MS", "CL.WINDOW m 2 500 MS"]);
    assert_eq!(r[..2], [[0, 2, 1, -1, 500], [0, 2, 0, -1, 500]]);
    assert_eq!(r[2][..3], [1, 2, 0]);
    assert!((490..=500).contains(&r[2][3]), "{:?}", r[2]);
    // Exact log: an 8-byte header (version 1) and one little-endian i64 per action.
    let log = get_bytes(&mut c, "m");
    assert_eq!(log.len(), 8 + 2 * 8);
    assert_eq!(log[0], 1);
    let newest = i64::from_le_bytes(log[16..24].try_into().unwrap());
    assert_eq!(
        pexpiretime(&mut c, "m"),
        (newest + 500_000_000 + 999_999) / 1_000_000,
        "expires when the newest leaves"
    );
}

#[test]
fn window_costs_at_most_16_bytes_per_action() {
    let server = Server::start();
    let mut c = server.client();
    for _ in 0..100 {
        assert_eq!(throttle(&mut c, "CL.WINDOW big 100 60")[0], 0);
    }
    assert_eq!(throttle(&mut c, "CL.WINDOW big 100 60")[0], 1);
    let len: i64 = redis::cmd("STRLEN").arg("big").query(&mut c).unwrap();
    assert!(len <= 16 * 100 + 8, "{len} bytes for 100 actions");
}

/// A log grown one action at a time takes the memory of the same bytes written at once by
/// `SET` (a short one, up to 256 bytes, at most one allocator size class more, its room to
/// grow in place), give or take what a server that embeds a value in its object saves `SET`
/// (Valkey 9: 16 bytes), and a denial or a peek changes none of it.
///
/// skip twin: how the module allocates a growing log; the twin appends with APPEND, which
/// Redis grows to twice the length.
#[test]
fn a_log_grown_an_action_at_a_time_takes_what_its_bytes_take() {
    let server = Server::start();
    let mut c = server.client();
    let jemalloc = server.info_field("memory", "mem_allocator").starts_with("jemalloc");
    for n in [1, 2, 3, 7, 8, 15, 16, 31, 32, 33, 100, 300, 500] {
        let key = format!("log:{n}");
        for _ in 0..n {
            assert_eq!(throttle(&mut c, &format!("CL.WINDOW {key} {n} 600"))[0], 0);
        }
        let bytes = get_bytes(&mut c, &key);
        assert_eq!(bytes.len(), 8 + 8 * n);
        let _: () = redis::cmd("SET").arg(format!("copy:{n}")).arg(&bytes).query(&mut c).unwrap();
        let (_, log) = encoding_and_memory(&mut c, &key);
        let (_, copy) = encoding_and_memory(&mut c, &format!("copy:{n}"));
        // Another allocator rounds otherwise: only the room's share of it is bounded there.
        let slack = match (bytes.len() + 7 <= 256, jemalloc) {
            (true, true) => 64,
            (false, true) => 16,
            (_, false) => 64 + copy / 4,
        };
        assert!(log <= copy + slack, "{n} actions: {log} bytes, the same bytes set at once {copy}");
        assert_eq!(throttle(&mut c, &format!("CL.WINDOW {key} {n} 600"))[0], 1);
        assert_eq!(throttle(&mut c, &format!("CL.WINDOW {key} {n} 600 0"))[0], 0);
        assert_eq!(encoding_and_memory(&mut c, &key).1, log, "{n} actions: a denial and a peek keep the memory");
        assert_eq!(get_bytes(&mut c, &key), bytes);
    }
}

#[test]
fn window_with_precision_counts_per_bucket() {
    let server = Server::start();
    let mut c = server.client();
    let r = in_multi(&mut c, &["CL.WINDOW p 3 10 PRECISION 1"; 4]);
    for (i, reply) in r[..3].iter().enumerate() {
        assert_eq!(reply[..4], [0, 3, 2 - i as i64, -1]);
        assert!((10..=11).contains(&reply[4]), "a bucket leaves at most one precision late: {reply:?}");
    }
    assert_eq!(r[3][..3], [1, 3, 0]);
    assert_eq!(get_bytes(&mut c, "p")[0], 2, "bucketed layout is version 2");
    // A million per hour in one-minute buckets stays small.
    throttle(&mut c, "CL.WINDOW hour 1000000 3600 PRECISION 60");
    let len: i64 = redis::cmd("STRLEN").arg("hour").query(&mut c).unwrap();
    assert!(len < 1024, "{len} bytes");
}

#[test]
fn bucket_vectors_peek_refund_and_state() {
    let server = Server::start();
    let mut c = server.client();
    let r = in_multi(&mut c, &["CL.BUCKET b 5 2 10"; 6]);
    assert_eq!(
        r,
        vec![
            [0, 5, 4, -1, 10],
            [0, 5, 3, -1, 10],
            [0, 5, 2, -1, 20],
            [0, 5, 1, -1, 20],
            [0, 5, 0, -1, 30],
            [1, 5, 0, 10, 30]
        ]
    );
    let stored: i64 = redis::cmd("GET").arg("b").query(&mut c).unwrap();
    assert_eq!(stored, -5, "the key holds minus the tokens missing");
    assert_eq!(throttle(&mut c, "CL.BUCKET b 5 2 10 0")[..3], [0, 5, 0]);
    assert_eq!(throttle(&mut c, "CL.BUCKET b 5 2 10 6")[..4], [1, 5, 0, -1]);
    assert_eq!(throttle(&mut c, "CL.BUCKET b 5 2 10 -2")[..3], [0, 5, 2]);
    assert_eq!(throttle(&mut c, "CL.BUCKET b 5 2 10 -9"), [0, 5, 5, -1, 0]);
    assert!(!exists(&mut c, "b"));
    // Refill clocks start on the whole millisecond at or before the call: in MS the reset
    // never exceeds the refills it needs.
    let r = throttle(&mut c, "CL.BUCKET ms 3 1 250 3 MS");
    assert_eq!(r[..4], [0, 3, 0, -1]);
    assert!((740..=750).contains(&r[4]), "{r:?}");
}

#[test]
fn counter_vectors_peek_refund_and_state() {
    let server = Server::start();
    let mut c = server.client();
    let r = in_multi(&mut c, &["CL.COUNTER c 3 60"; 4]);
    assert_eq!(r, vec![[0, 3, 2, -1, 60], [0, 3, 1, -1, 60], [0, 3, 0, -1, 60], [1, 3, 0, 60, 60]]);
    let count: i64 = redis::cmd("GET").arg("c").query(&mut c).unwrap();
    assert_eq!(count, 3, "a plain integer string");
    let ttl: i64 = redis::cmd("PTTL").arg("c").query(&mut c).unwrap();
    assert!((59_000..=60_001).contains(&ttl), "expires when the window closes: {ttl}");
    assert_eq!(throttle(&mut c, "CL.COUNTER c 3 60 0")[..3], [0, 3, 0]);
    assert_eq!(throttle(&mut c, "CL.COUNTER c 3 60 -2")[..3], [0, 3, 2]);
    assert_eq!(throttle(&mut c, "CL.COUNTER c 3 60 -5"), [0, 3, 3, -1, 0]);
    assert!(!exists(&mut c, "c"));
    assert_eq!(throttle(&mut c, "CL.COUNTER c 3 60 4"), [1, 3, 3, -1, 0]);
    // Windows open on the whole millisecond at or before the call: in MS the reset never
    // exceeds the window.
    let r = throttle(&mut c, "CL.COUNTER m 10 1500 4 MS");
    assert_eq!(r[..4], [0, 10, 6, -1]);
    assert!((1490..=1500).contains(&r[4]), "{r:?}");
}

#[test]
fn errors_are_clear_and_change_nothing() {
    let server = Server::start();
    let mut c = server.client();
    throttle(&mut c, "CL.WINDOW w 3 10");
    throttle(&mut c, "CL.BUCKET b 3 1 10");
    throttle(&mut c, "CL.COUNTER c 3 10");
    let before = snapshot(&mut c);
    let cases: &[(&str, &str)] = &[
        ("CL.WINDOW w 3", "ERR wrong number of arguments for 'cl.window' command"),
        ("CL.BUCKET b 3 1", "ERR wrong number of arguments for 'cl.bucket' command"),
        ("CL.COUNTER c 3", "ERR wrong number of arguments for 'cl.counter' command"),
        ("CL.WINDOW w 0 10", "ERR limit must be an integer from 1 to 100000 (use PRECISION for larger limits)"),
        ("CL.WINDOW w 3 -1", "ERR window must be an integer from 1 to 1000000000 (seconds)"),
        ("CL.WINDOW w 3 10 PRECISION 11", "ERR precision must be an integer from 1 to 10 (seconds)"),
        ("CL.WINDOW w 3 60000 PRECISION 5 MS", "ERR precision must be an integer from 6 to 60000 (milliseconds)"),
        ("CL.WINDOW w 3 10 PRECISION", "ERR syntax error"),
        ("CL.BUCKET b 0 1 10", "ERR capacity must be an integer from 1 to 9223372036854775807"),
        ("CL.BUCKET b 3 0 10", "ERR tokens must be an integer from 1 to 9223372036854775807"),
        ("CL.BUCKET b 3 1 10 PRECISION 1", "ERR syntax error"),
        ("CL.COUNTER c 0 10", "ERR limit must be an integer from 1 to 999999999999999999"),
        ("CL.COUNTER c 3 1.5", "ERR value is not an integer or out of range"),
        ("CL.COUNTER c 3 10 BOGUS", "ERR syntax error"),
        ("CL.BUCKET b 3 1 9223372036854775807", "ERR interval must be an integer from 1 to 1000000000 (seconds)"),
        (
            "CL.BUCKET b 9223372036854775807 1 1",
            "ERR parameters are too large: interval * ceil(capacity / tokens) must be at most 1000000000 seconds (1000000000000 milliseconds)",
        ),
    ];
    for (words, want) in cases {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        assert_eq!(error_of(&mut c, &args), *want, "{words}");
    }
    assert_eq!(snapshot(&mut c), before, "no error changed any key");
}

#[test]
fn one_limiters_key_used_by_another_is_wrongtype_and_untouched() {
    let server = Server::start();
    let mut c = server.client();
    let calls = [
        ("t", "CL.THROTTLE t 5 1 60"),
        ("w", "CL.WINDOW w 5 60"),
        ("p", "CL.WINDOW p 5 60 PRECISION 10"),
        ("b", "CL.BUCKET b 5 1 60"),
        ("c", "CL.COUNTER c 5 60"),
    ];
    for (_, words) in calls {
        throttle(&mut c, words);
    }
    let before = snapshot(&mut c);
    for (key, owner) in calls {
        for (_, other) in calls {
            let other_command = other.split_whitespace().next().unwrap();
            if owner.starts_with(other_command) {
                continue;
            }
            let words = format!("{other_command} {key} 5 1 60");
            let words = if other_command == "CL.WINDOW" || other_command == "CL.COUNTER" {
                format!("{other_command} {key} 5 60")
            } else {
                words
            };
            let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
            assert_eq!(
                error_of(&mut c, &args),
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                "{words} on a key of `{owner}`"
            );
        }
    }
    assert_eq!(snapshot(&mut c), before, "nothing was overwritten");
    // Values that are no limiter's state at all are reported as such.
    let _: () = redis::cmd("SET").arg("junk").arg("hello").query(&mut c).unwrap();
    for command in ["CL.WINDOW junk 5 60", "CL.BUCKET junk 5 1 60", "CL.COUNTER junk 5 60"] {
        let args: Vec<&[u8]> = command.split_whitespace().map(str::as_bytes).collect();
        assert!(error_of(&mut c, &args).starts_with("ERR key does not hold valid CL."), "{command}");
    }
}

/// Every "must be an integer from A to B" an error states is the real range: on a fresh key,
/// B is accepted (no error of any kind: the call decides) and B+1 gets that same message.
///
/// skip twin: limits above 2^53 - 1, which the twin refuses (tests/twin.rs tests that refusal).
#[test]
fn error_messages_state_the_real_ranges() {
    let server = Server::start();
    let mut c = server.client();
    // A call with one argument set to a value out of range (`{}` marks it), others small.
    let templates = [
        "CL.THROTTLE {k} {} 1000000 1 MS",
        "CL.THROTTLE {k} 0 {} 1000000000",
        "CL.THROTTLE {k} 0 1 {}",
        "CL.THROTTLE {k} 0 1 {} MS",
        "CL.WINDOW {k} {} 1",
        "CL.WINDOW {k} {} 1 PRECISION 1",
        "CL.WINDOW {k} 1 {}",
        "CL.WINDOW {k} 1 {} MS",
        "CL.WINDOW {k} 1 60 PRECISION {}",
        "CL.WINDOW {k} 1 3600000 PRECISION {} MS",
        "CL.BUCKET {k} {} 1000000000000000000 1",
        "CL.BUCKET {k} 1 {} 1",
        "CL.BUCKET {k} 1 1 {}",
        "CL.COUNTER {k} {} 1",
        "CL.COUNTER {k} 1 {}",
        "CL.COUNTER {k} 1 {} MS",
    ];
    let run = |c: &mut redis::Connection, template: &str, value: &str, key: &str| -> Result<(), String> {
        let words = template.replace("{k}", key).replace("{}", value);
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        harness::call(c, &args)
            .map(|_| ())
            .map_err(|e| format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")).trim().to_string())
    };
    for (n, template) in templates.iter().enumerate() {
        let message = run(&mut c, template, "-1", &format!("r{n}a")).expect_err(template);
        let range = message.split(" from ").nth(1).unwrap_or_else(|| panic!("{template}: {message}"));
        let max: i128 =
            range.split(' ').nth(2).and_then(|m| m.parse().ok()).unwrap_or_else(|| panic!("{template}: {message}"));
        assert_eq!(
            run(&mut c, template, &max.to_string(), &format!("r{n}b")),
            Ok(()),
            "{template}: the stated maximum {max}"
        );
        if max < i128::from(i64::MAX) {
            let over = run(&mut c, template, &(max + 1).to_string(), &format!("r{n}c")).expect_err(template);
            assert_eq!(over, message, "{template}: one above the stated maximum");
        }
    }
}

fn encoding_and_memory(c: &mut redis::Connection, key: &str) -> (String, i64) {
    let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg(key).query(c).unwrap();
    let memory: i64 = redis::cmd("MEMORY").arg("USAGE").arg(key).query(c).unwrap();
    (encoding, memory)
}

/// Reading never re-encodes a value: a peek, a denial or an error leaves a value as Redis
/// stored it (`OBJECT ENCODING`, `MEMORY USAGE`), whether the module wrote it (a plain string
/// from the start), Redis stored it compactly (an integer written by SET, as redis-cell's
/// users, a replica or a restart leave a TAT) or another application owns it.
#[test]
fn reads_leave_the_value_as_it_was() {
    // (`yes`, not `local`: a container's client is not local to it.)
    let server = Server::with(harness::Options::default().arg("--enable-debug-command yes"));
    let mut c = server.client();
    for (key, create, deny, peek) in [
        ("t", "CL.THROTTLE t 0 1 60", "CL.THROTTLE t 0 1 60", "CL.THROTTLE t 0 1 60 0"),
        ("c", "CL.COUNTER c 1 60", "CL.COUNTER c 1 60", "CL.COUNTER c 1 60 0"),
        ("b", "CL.BUCKET b 1 1 60", "CL.BUCKET b 1 1 60", "CL.BUCKET b 1 1 60 0"),
        ("w", "CL.WINDOW w 1 60", "CL.WINDOW w 1 60", "CL.WINDOW w 1 60 0"),
        ("p", "CL.WINDOW p 1 60 PRECISION 10", "CL.WINDOW p 1 60 PRECISION 10", "CL.WINDOW p 1 60 PRECISION 10 0"),
    ] {
        assert_eq!(throttle(&mut c, create)[0], 0, "{create}");
        let written = encoding_and_memory(&mut c, key);
        assert_eq!(throttle(&mut c, deny)[0], 1, "{deny}");
        assert_eq!(encoding_and_memory(&mut c, key), written, "{deny}: a denial changes nothing");
        throttle(&mut c, peek);
        assert_eq!(encoding_and_memory(&mut c, key), written, "{peek}: a peek changes nothing");
    }
    // Integers written by SET, each an empty limiter (so the call is denied) stamped within
    // what its parameters allow (so nothing is pulled back and stored): a TAT, a count, a bucket.
    // `SET key value PXAT at`, then a denial `deny` and its peek leave the integer as it is.
    let integers_stay = |c: &mut redis::Connection, cases: &[(&str, String, i64, &str)]| {
        for (key, value, at, deny) in cases {
            let _: () = redis::cmd("SET").arg(key).arg(value).arg("PXAT").arg(at).query(c).unwrap();
            let compact = encoding_and_memory(c, key);
            assert_eq!(compact.0, "int", "{key}");
            assert_eq!(throttle(c, deny)[0], 1, "{deny}");
            assert_eq!(encoding_and_memory(c, key), compact, "{deny}: a denial leaves an integer an integer");
            throttle(c, &format!("{deny} 0"));
            assert_eq!(encoding_and_memory(c, key), compact, "{deny} 0: a peek leaves an integer an integer");
        }
    };
    let now = harness::server_ms(&mut c);
    let tat = (now + 30_000) * 1_000_000;
    integers_stay(
        &mut c,
        &[
            ("set:t", tat.to_string(), tat / 1_000_000, "CL.THROTTLE set:t 0 1 60"),
            ("set:c", "5".to_string(), now + 30_000, "CL.COUNTER set:c 5 60"),
            ("set:b", "-3".to_string(), now + 150_000, "CL.BUCKET set:b 3 1 60"),
        ],
    );
    // A reload stores every value compactly again: the module's own keys included.
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    let reloaded = encoding_and_memory(&mut c, "c");
    assert_eq!(reloaded.0, "int", "a reloaded count is an integer");
    assert_eq!(throttle(&mut c, "CL.COUNTER c 1 60")[0], 1);
    assert_eq!(encoding_and_memory(&mut c, "c"), reloaded, "a denial after a reload changes nothing");
    // Other applications' values, of any length: an error leaves them as they were.
    for (key, value, command) in [
        ("app:int", "12345", "CL.THROTTLE app:int 0 1 60"),
        ("app:int2", "12345", "CL.BUCKET app:int2 5 1 60"),
        ("app:text", "hello world", "CL.WINDOW app:text 5 60"),
        ("app:tat-like", "hello world, nineteen", "CL.COUNTER app:tat-like 5 60"),
        // Longer than any compact string: read in place (for writing, which must not copy it).
        ("app:long", "a value of sixty bytes, longer than Redis keeps compactly...", "CL.THROTTLE app:long 0 1 60"),
        ("app:long2", "a value of sixty bytes, longer than Redis keeps compactly...", "CL.WINDOW app:long2 5 60"),
    ] {
        let _: () = redis::cmd("SET").arg(key).arg(value).query(&mut c).unwrap();
        let before = encoding_and_memory(&mut c, key);
        let args: Vec<&[u8]> = command.split_whitespace().map(str::as_bytes).collect();
        let e = error_of(&mut c, &args);
        assert!(e.starts_with("WRONGTYPE") || e.starts_with("ERR key does not hold valid"), "{command}: {e}");
        assert_eq!(encoding_and_memory(&mut c, key), before, "{command}: an error leaves the value as it was");
    }
    // Names the module wrote, then another application's: after the limiter expired (a value
    // of the very same length), or after a DEL and a SET of another length, reads leave the
    // new, compact value as it is.
    assert_eq!(throttle(&mut c, "CL.THROTTLE reuse:expired 0 1 1 MS")[0], 0);
    assert_eq!(throttle(&mut c, "CL.COUNTER reuse:deleted 100 60 10")[0], 0);
    let _: () = redis::cmd("DEL").arg("reuse:deleted").query(&mut c).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let now = harness::server_ms(&mut c);
    let tat = (now + 30_000) * 1_000_000;
    integers_stay(
        &mut c,
        &[
            ("reuse:expired", tat.to_string(), tat / 1_000_000, "CL.THROTTLE reuse:expired 0 1 60"),
            ("reuse:deleted", "5".to_string(), now + 30_000, "CL.COUNTER reuse:deleted 5 60"),
        ],
    );
    // SWAPDB: the name the module wrote in database 0 now holds database 1's integer, of the
    // very same length (a TAT): a denial leaves it an integer.
    assert_eq!(throttle(&mut c, "CL.THROTTLE reuse:swapped 0 1 60")[0], 0);
    let _: () = redis::cmd("SELECT").arg(1).query(&mut c).unwrap();
    let _: () = redis::cmd("SET")
        .arg("reuse:swapped")
        .arg(tat.to_string())
        .arg("PXAT")
        .arg(tat / 1_000_000)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut c).unwrap();
    let compact = encoding_and_memory(&mut c, "reuse:swapped");
    assert_eq!(compact.0, "int");
    assert_eq!(throttle(&mut c, "CL.THROTTLE reuse:swapped 0 1 60")[0], 1);
    assert_eq!(
        encoding_and_memory(&mut c, "reuse:swapped"),
        compact,
        "after SWAPDB, a denial leaves the integer an integer"
    );
}

/// `SHADOW` (module and Functions twin alike): a denial is answered as an admission, `limited`
/// 0 and `retry_after` -1, the other fields as decided, and the key is left exactly as the
/// denial leaves it; admissions, peeks and refunds are answered as they are.
#[test]
fn shadow_answers_a_denial_as_an_admission_and_changes_nothing_else() {
    let server = Server::start();
    let mut c = server.client();
    let state = |c: &mut redis::Connection, key: &str| (get_bytes(c, key), pexpiretime(c, key));
    for (fill, call) in [
        ("CL.THROTTLE sh:t 1 1 60 2", "CL.THROTTLE sh:t 1 1 60"),
        ("CL.WINDOW sh:w 2 60 2", "CL.WINDOW sh:w 2 60"),
        ("CL.WINDOW sh:p 2 60 2 PRECISION 10", "CL.WINDOW sh:p 2 60 PRECISION 10"),
        ("CL.BUCKET sh:b 2 1 60 2", "CL.BUCKET sh:b 2 1 60"),
        ("CL.COUNTER sh:c 2 60 2", "CL.COUNTER sh:c 2 60"),
    ] {
        assert_eq!(throttle(&mut c, fill)[0], 0, "{fill}");
        let key = call.split_whitespace().nth(1).unwrap();
        let before = state(&mut c, key);
        let enforced = throttle(&mut c, call);
        let shadowed = throttle(&mut c, &format!("{call} SHADOW"));
        assert_eq!(enforced[0], 1, "{call}: denied");
        // Read as admitted, the other fields as decided. The calls are instants apart, so
        // `reset_after` (whole seconds, rounded up) may have ticked down by one in between.
        let as_admitted = |reply: Reply, what: &str| {
            assert_eq!(reply[..4], [0, enforced[1], enforced[2], -1], "{what}");
            assert!(
                (enforced[4] - 1..=enforced[4]).contains(&reply[4]),
                "{what}: reset_after {} after {}",
                reply[4],
                enforced[4]
            );
        };
        as_admitted(shadowed, &format!("{call} SHADOW"));
        assert_eq!(state(&mut c, key), before, "{call} SHADOW: the key as the denial left it");
        // Never admittable, a peek, a refund: as without SHADOW.
        as_admitted(throttle(&mut c, &format!("{call} 3 SHADOW")), &format!("{call} 3 SHADOW"));
        let (shadow_peek, peek) =
            (throttle(&mut c, &format!("{call} 0 SHADOW")), throttle(&mut c, &format!("{call} 0")));
        assert_eq!(shadow_peek[..4], peek[..4], "{call} 0 SHADOW");
        assert!(
            (peek[4]..=peek[4] + 1).contains(&shadow_peek[4]),
            "{call} 0 SHADOW: reset_after {} then {}",
            shadow_peek[4],
            peek[4]
        );
        assert_eq!(throttle(&mut c, &format!("{call} SHADOW -1"))[..3], [0, enforced[1], 1], "{call}: a refund");
        assert_eq!(throttle(&mut c, &format!("{call} SHADOW"))[..3], [0, enforced[1], 0], "{call}: then admitted");
    }
    // CL.ALL: the binding reply and DETAILS read as admitted, the index names the limiter that
    // would have denied, and nothing is written.
    let words = "CL.ALL 2 {sh}a {sh}b COUNTER 5 60 COUNTER 1 60 QUANTITY 2 DETAILS SHADOW";
    let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
    let reply = harness::call(&mut c, &args).unwrap();
    let redis::Value::Array(items) = reply else { panic!("{reply:?}") };
    let six: Vec<i64> =
        items[..6].iter().map(|v| redis::FromRedisValue::from_redis_value(v.clone()).unwrap()).collect();
    assert_eq!(six, vec![0, 1, 1, -1, 0, 2]);
    let details: Vec<Vec<i64>> = redis::FromRedisValue::from_redis_value(items[6].clone()).unwrap();
    assert_eq!(details, vec![vec![0, 5, 4, -1, 60], vec![0, 1, 1, -1, 0]]);
    assert!(!exists(&mut c, "{sh}a") && !exists(&mut c, "{sh}b"));
    assert_eq!(error_of(&mut c, &[b"CL.COUNTER", b"k", b"1", b"60", b"SHADOW", b"SHADOW"]), "ERR syntax error");
}
