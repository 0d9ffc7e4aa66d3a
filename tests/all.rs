//! CL.ALL against a real server: every reply field, the binding limiter, DETAILS, mixed
//! algorithms, refunds and peeks, all-or-nothing under denial, errors naming the limiter, and
//! many clients on overlapping limiter sets never exceeding any single limit.

mod harness;

use harness::{Server, call, error_of, snapshot, throttle};
use redis::Value;

/// Runs `CL.ALL …` given as words; the six integers (and DETAILS' arrays, if asked for).
fn all(c: &mut redis::Connection, words: &str) -> (Vec<i64>, Option<Vec<Vec<i64>>>) {
    let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
    let reply = call(c, &args).unwrap_or_else(|e| panic!("{words}: {e}"));
    let Value::Array(items) = reply else { panic!("{words}: {reply:?}") };
    let mut six = Vec::new();
    let mut details = None;
    for item in items {
        match item {
            Value::Int(v) => six.push(v),
            Value::Array(rows) => {
                details = Some(rows.into_iter().map(|r| redis::FromRedisValue::from_redis_value(r).unwrap()).collect());
            }
            other => panic!("{words}: unexpected {other:?}"),
        }
    }
    assert_eq!(six.len(), 6, "{words}: six integers");
    (six, details)
}

#[test]
fn three_limits_in_one_call_reply_for_the_one_that_matters() {
    let server = Server::start();
    let mut c = server.client();
    // 10 per minute AND 15 per hour per user AND 1000 per hour per tenant.
    let words = "CL.ALL 3 rl:{u42}:m rl:{u42}:h rl:{u42}:t THROTTLE 9 10 60 WINDOW 15 3600 COUNTER 1000 3600";
    let (first, _) = all(&mut c, words);
    assert_eq!(first, vec![0, 10, 9, -1, 6, 1], "admitted: the per-minute limit has the fewest left");
    for _ in 0..9 {
        assert_eq!(all(&mut c, words).0[0], 0);
    }
    // The per-minute limit is spent: it binds, with its own retry time.
    let (denied, details) = all(&mut c, &format!("{words} DETAILS"));
    assert_eq!(denied[..3], [1, 10, 0]);
    assert_eq!(denied[5], 1, "the per-minute limiter denies");
    assert!((5..=6).contains(&denied[3]), "one slot frees in 6 s: {denied:?}");
    let details = details.expect("DETAILS");
    assert_eq!(details.len(), 3);
    assert_eq!(details[0][..3], [1, 10, 0]);
    // Each limiter as its single command would have replied at that instant (which would have
    // admitted, and taken one unit)…
    assert_eq!(details[1], vec![0, 15, 4, -1, 3600], "the hourly window, as CL.WINDOW would reply");
    assert_eq!(details[2], vec![0, 1000, 989, -1, 3600], "the tenant counter, as CL.COUNTER would reply");
    // …but the call was denied, so nothing was taken; and each key holds exactly its single
    // command's state: the single commands read it.
    assert_eq!(throttle(&mut c, "CL.WINDOW rl:{u42}:h 15 3600 0"), [0, 15, 5, -1, 3600]);
    assert_eq!(throttle(&mut c, "CL.COUNTER rl:{u42}:t 1000 3600 0"), [0, 1000, 990, -1, 3600]);
}

#[test]
fn a_token_budget_and_a_request_rate_with_a_refund() {
    let server = Server::start();
    let mut c = server.client();
    let words = "CL.ALL 2 req:{t7} tok:{t7} THROTTLE 59 60 60 BUCKET 100000 100000 60 QUANTITY 750";
    let (reply, _) = all(&mut c, words);
    assert_eq!(reply[..3], [0, 60, 59], "the request limit has fewer units left than the token budget");
    assert_eq!(reply[5], 1);
    // The request used 500 tokens of the 750 reserved: give 250 back with the single command.
    assert_eq!(throttle(&mut c, "CL.BUCKET tok:{t7} 100000 100000 60 -250")[..3], [0, 100000, 99500]);
    // A request asking for more tokens than are left is denied by the budget, and charges neither.
    let before = snapshot(&mut c);
    let (denied, _) =
        all(&mut c, "CL.ALL 2 req:{t7} tok:{t7} THROTTLE 59 60 60 BUCKET 100000 100000 60 QUANTITY 99501");
    assert_eq!(denied[..3], [1, 100000, 99500], "the bucket binds");
    assert!((58..=60).contains(&denied[3]), "until its next refill, within 60 s: {denied:?}");
    assert_eq!(denied[5], 2);
    assert_eq!(snapshot(&mut c), before, "a denied CL.ALL changes no key");
}

#[test]
fn a_denial_leaves_every_key_byte_identical() {
    let server = Server::start();
    let mut c = server.client();
    let specs = "WINDOW 5 60 COUNTER 5 60 BUCKET 5 1 60 THROTTLE 4 1 60";
    let keys = "CL.ALL 4 {a}w {a}c {a}b {a}t";
    assert_eq!(all(&mut c, &format!("{keys} {specs}")).0[0], 0);
    // Use one limiter up on its own; then every CL.ALL over the four is denied by it.
    assert_eq!(throttle(&mut c, "CL.COUNTER {a}c 5 60 4")[0], 0);
    let before = snapshot(&mut c);
    assert_eq!(before.len(), 4);
    for _ in 0..20 {
        let (reply, _) = all(&mut c, &format!("{keys} {specs}"));
        assert_eq!((reply[0], reply[5]), (1, 2), "denied by the counter");
    }
    assert_eq!(snapshot(&mut c), before, "values and expiries unchanged");
    // A refund and a peek follow the single commands: the refund of the counter is applied
    // (refunds are never denied), the peeks change nothing.
    let (reply, _) = all(
        &mut c,
        &format!(
            "{keys} WINDOW 5 60 QUANTITY 0 COUNTER 5 60 QUANTITY -2 BUCKET 5 1 60 QUANTITY 0 THROTTLE 4 1 60 QUANTITY 0"
        ),
    );
    assert_eq!(reply[0], 0);
    assert_eq!(throttle(&mut c, "CL.COUNTER {a}c 5 60 0")[..3], [0, 5, 2]);
}

#[test]
fn milliseconds_apply_to_every_limiter() {
    let server = Server::start();
    let mut c = server.client();
    let (reply, details) = all(&mut c, "CL.ALL 2 {m}a {m}b COUNTER 3 1500 THROTTLE 0 1 250 MS DETAILS");
    assert_eq!(reply[..4], [0, 1, 0, -1]);
    assert_eq!(reply[5], 2);
    let details = details.unwrap();
    assert!((1499..=1500).contains(&details[0][4]), "{details:?}");
    assert_eq!(details[1], vec![0, 1, 0, -1, 250]);
}

/// A server holding two live limiters, `{e}t` (CL.THROTTLE 4 1 60) and `{e}c` (CL.COUNTER 4 60).
fn two_limiters() -> (Server, redis::Connection) {
    let server = Server::start();
    let mut c = server.client();
    throttle(&mut c, "CL.THROTTLE {e}t 4 1 60");
    throttle(&mut c, "CL.COUNTER {e}c 4 60");
    (server, c)
}

/// Each call (words) replies its error, and none writes anything.
fn assert_errors_write_nothing<S: AsRef<str>>(c: &mut redis::Connection, cases: &[(&str, S)]) {
    let before = snapshot(c);
    for (words, want) in cases {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        assert_eq!(error_of(c, &args), want.as_ref(), "{words}");
    }
    assert_eq!(snapshot(c), before, "no error wrote anything");
}

/// skip twin: a numkeys above the arguments, which FCALL refuses with its own error (tests/twin.rs tests it).
#[test]
fn errors_name_the_limiter_and_write_nothing() {
    let (_server, mut c) = two_limiters();
    let cases = [
        ("CL.ALL 0 {e}t THROTTLE 4 1 60", "ERR numkeys must be an integer from 1 to 16"),
        ("CL.ALL 17 {e}t THROTTLE 4 1 60", "ERR numkeys must be an integer from 1 to 16"),
        ("CL.ALL 2 {e}t {e}c THROTTLE 4 1 60", "ERR numkeys is 2 but 1 limiter specs follow the keys"),
        ("CL.ALL 2 {e}t {e}t THROTTLE 4 1 60 THROTTLE 4 1 60", "ERR limiters 1 and 2 name the same key"),
        (
            "CL.ALL 2 {e}t {e}c THROTTLE 4 1 60 COUNTER 0 60",
            "ERR limiter 2: limit must be an integer from 1 to 999999999999999999",
        ),
        (
            "CL.ALL 2 {e}t {e}c THROTTLE 4 1 60 SLIDING 4 60",
            "ERR limiter 2: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got 'SLIDING'",
        ),
        ("CL.ALL 1 {e}t THROTTLE 4 1 60 BOGUS", "ERR syntax error"),
        (
            "CL.ALL 2 {e}t {e}c THROTTLE 4 1 60 COUNTER 4 60 PRECISION 5",
            "ERR limiter 2: COUNTER does not take PRECISION",
        ),
        ("CL.ALL 2 {e}t {e}c THROTTLE 4 1 60 COUNTER 4 60 QUANTITY", "ERR limiter 2: syntax error"),
        // The second key is the first's: WRONGTYPE, and the first limiter, which admits, is not charged.
        (
            "CL.ALL 2 {e}x {e}t COUNTER 4 60 COUNTER 4 60",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ];
    assert_errors_write_nothing(&mut c, &cases);
    let wrong: Vec<&[u8]> = vec![b"CL.ALL", b"2", b"{e}t"];
    assert_eq!(error_of(&mut c, &wrong), "ERR wrong number of arguments for 'cl.all' command");
}

/// Every argument error inside a spec names its limiter: a non-integer (a number, a QUANTITY, a
/// PRECISION) and an option the spec does not take, right after it (between specs or after the
/// last). The limiters before the faulty one would admit, and one key is new: nothing is written.
#[test]
fn argument_errors_inside_a_spec_name_their_limiter_and_write_nothing() {
    let (_server, mut c) = two_limiters();
    let not_integer = |i: usize| format!("ERR limiter {i}: value is not an integer or out of range");
    let cases = [
        ("CL.ALL 2 {e}c {e}t COUNTER 1 60 THROTTLE 1 x 60", not_integer(2)),
        ("CL.ALL 3 {e}t {e}c {e}n THROTTLE 4 1 60 COUNTER 4 60 WINDOW 5 1.5", not_integer(3)),
        ("CL.ALL 2 {e}n {e}c COUNTER 4 60 QUANTITY 0x10 COUNTER 4 60", not_integer(1)),
        ("CL.ALL 2 {e}t {e}n THROTTLE 4 1 60 WINDOW 5 60 PRECISION ten", not_integer(2)),
        ("CL.ALL 2 {e}t {e}n THROTTLE 4 1 60 BUCKET 5 1 99999999999999999999", not_integer(2)),
        (
            "CL.ALL 2 {e}c {e}t COUNTER 4 60 PRECISION 5 THROTTLE 1 1 1",
            "ERR limiter 1: COUNTER does not take PRECISION".into(),
        ),
        (
            "CL.ALL 2 {e}t {e}n THROTTLE 4 1 60 QUANTITY 1 precision 5 WINDOW 5 60",
            "ERR limiter 1: THROTTLE does not take PRECISION".into(),
        ),
        (
            "CL.ALL 2 {e}n {e}t BUCKET 5 1 60 THROTTLE 4 1 60 PRECISION 5 DETAILS",
            "ERR limiter 2: THROTTLE does not take PRECISION".into(),
        ),
        // After a call option the spec has ended: the word is read as the next spec's.
        (
            "CL.ALL 2 {e}n {e}c WINDOW 5 60 MS PRECISION 5 COUNTER 4 60",
            "ERR limiter 2: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got 'PRECISION'".into(),
        ),
        ("CL.ALL 1 {e}n WINDOW 5 60 MS PRECISION 5", "ERR syntax error".into()),
        // A word no spec takes keeps its texts.
        (
            "CL.ALL 2 {e}c {e}t COUNTER 4 60 MAXWAIT 5 THROTTLE 1 1 1",
            "ERR limiter 2: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got 'MAXWAIT'".into(),
        ),
        ("CL.ALL 1 {e}c COUNTER 4 60 MAXWAIT 5", "ERR syntax error".into()),
    ];
    assert_errors_write_nothing(&mut c, &cases);
    // The same calls corrected are admitted and write (the errors above were the only reason).
    let before = snapshot(&mut c);
    let (reply, _) = all(&mut c, "CL.ALL 2 {e}c {e}n COUNTER 4 60 THROTTLE 1 1 1");
    assert_eq!(reply[0], 0);
    assert_ne!(snapshot(&mut c), before);
}

/// Eight clients call CL.ALL on overlapping sets of four limiters (each limit far below what
/// the clients ask for, and nothing refills during the test): no limiter ever admits more than
/// its limit, and every admitted call was charged to every limiter it named.
#[test]
fn concurrent_clients_never_exceed_any_single_limit() {
    let server = Server::start();
    let specs = ["COUNTER 60 600", "WINDOW 45 600", "THROTTLE 39 1 600", "BUCKET 50 1 600"];
    let limits = [60i64, 45, 40, 50];
    let sets: [&[usize]; 6] = [&[0, 1], &[1, 2, 3], &[0, 2], &[0, 1, 2, 3], &[3], &[2, 3]];
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let url = server.url();
            std::thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                let mut admitted = [0i64; 4];
                for n in 0..150 {
                    let set = sets[(t + n) % sets.len()];
                    let keys: Vec<String> = set.iter().map(|i| format!("{{c}}l{i}")).collect();
                    let spec: Vec<&str> = set.iter().map(|&i| specs[i]).collect();
                    let words = format!("CL.ALL {} {} {}", set.len(), keys.join(" "), spec.join(" "));
                    if all(&mut c, &words).0[0] == 0 {
                        for &i in set {
                            admitted[i] += 1;
                        }
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = [0i64; 4];
    for h in handles {
        for (total, n) in admitted.iter_mut().zip(h.join().unwrap()) {
            *total += n;
        }
    }
    let mut c = server.client();
    for (i, &limit) in limits.iter().enumerate() {
        assert!(admitted[i] <= limit, "limiter {i} admitted {} > {limit}", admitted[i]);
        let peek = throttle(
            &mut c,
            &format!(
                "CL.{} {{c}}l{i} {} 0",
                specs[i].split(' ').next().unwrap(),
                &specs[i][specs[i].find(' ').unwrap() + 1..]
            ),
        );
        assert_eq!(limit - peek[2], admitted[i], "limiter {i}: every admission was charged, and only those");
    }
    assert!(admitted.contains(&40), "the tightest limiter was used up: {admitted:?}");
}

#[test]
fn acl_key_patterns_apply_to_every_key() {
    let server = Server::start();
    let mut admin = server.client();
    let _: () =
        redis::cmd("ACL").arg(&["SETUSER", "limited", "on", ">pw", "~rl:*", "+@all"]).query(&mut admin).unwrap();
    let mut c = server.client();
    let _: () = redis::cmd("AUTH").arg("limited").arg("pw").query(&mut c).unwrap();
    assert_eq!(all(&mut c, "CL.ALL 2 rl:a rl:b COUNTER 5 60 COUNTER 5 60").0[0], 0);
    for words in ["CL.ALL 2 rl:a other:b COUNTER 5 60 COUNTER 5 60", "CL.ALL 2 other:a rl:b COUNTER 5 60 COUNTER 5 60"]
    {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        let denied = error_of(&mut c, &args);
        assert!(denied.starts_with("NOPERM"), "{words}: {denied}");
    }
    assert_eq!(throttle(&mut admin, "CL.COUNTER rl:a 5 60 0")[2], 4, "a refused call charged nothing");
}
