//! `DEBIT` (issue 41) against a real server, on the module and on the Functions twin alike
//! (`make test-twin` runs this file too; what only the module has, INFO and CL.TOP, is checked
//! on the module only): per algorithm, a check, a debit past the limit, a check refused, takes
//! refused until time has repaid the overdraft and admitted right after; the same inside
//! CL.ALL; bounded refunds of debited units; errors leaving every key as it was. (Replicas,
//! the AOF and SHADOW writing nothing: `debit_replication.rs`, which needs native servers.)
//!
//! Times are bounds, not instants: the instant an overdraft is repaid is predicted from the
//! debit's own instant (the server's `TIME` in the same MULTI), and every refused take's
//! `retry_after` must name that instant; the take that polls past it must be admitted.

mod harness;

use std::time::{Duration, Instant};

use harness::{Options, Server, pexpiretime, snapshot, throttle};
use redis::{Connection, Value};

fn module() -> bool {
    harness::twin::backend().is_none()
}

/// A call and the server's clock (ms) just before it, in one transaction.
fn timed(c: &mut Connection, words: &str) -> (i64, Vec<i64>) {
    let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("TIME").add_command(harness::command(&args));
    let (time, reply): (Vec<i64>, Vec<i64>) = pipe.query(c).unwrap_or_else(|e| panic!("{words}: {e}"));
    (time[0] * 1000 + time[1] / 1000, reply)
}

/// Polls a take of `take` until it is admitted; every refusal's `retry_after` (ms, read at
/// the instant of its call) must name an instant within `repaid` (ms, inclusive); the
/// admission must come at or after the earliest of them. Returns the admitting reply.
fn refused_until(c: &mut Connection, take: &str, repaid: (i64, i64)) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut refusals = 0;
    loop {
        let (now, r) = timed(c, take);
        if r[0] == 0 {
            assert!(now >= repaid.0 - 1, "{take}: admitted at {now}, before the debt is repaid at {repaid:?}");
            assert!(refusals > 0, "{take}: never refused");
            return r;
        }
        let at = now + r[3];
        assert!(
            (repaid.0 - 1..=repaid.1 + 1).contains(&at),
            "{take}: refused at {now} with retry_after {} (at {at}), the debt is repaid within {repaid:?}",
            r[3]
        );
        refusals += 1;
        assert!(Instant::now() < deadline, "{take}: still refused after 30 s");
        std::thread::sleep(Duration::from_millis(((at - now) / 2).clamp(5, 200) as u64));
    }
}

/// One algorithm's overdraft: the words (key and parameters, `MS`), how much the debit charges,
/// and when the debt is repaid for a take of one, from the debit's instant (ms, a range:
/// buckets and windows open on their own grid).
struct Case {
    words: &'static str,
    quantity: &'static str,
    debit: i64,
    repaid: (i64, i64),
}

fn cases() -> Vec<(Case, bool)> {
    vec![
        // Burst 4 (5 at once), one per 200 ms: 8 debited leave the TAT 1600 ms ahead; a take of
        // one fits once its TAT (1800 ms) is within the 1000 ms tolerance.
        (Case { words: "CL.THROTTLE dt 4 1 200 MS", quantity: "", debit: 8, repaid: (800, 800) }, false),
        // 8 logged at once: all leave one window later.
        (Case { words: "CL.WINDOW dw 5 600 MS", quantity: "", debit: 8, repaid: (600, 600) }, false),
        // Their bucket of 100 ms counts until its end plus the window.
        (Case { words: "CL.WINDOW dp 5 600 MS PRECISION 100", quantity: "", debit: 8, repaid: (600, 700) }, false),
        // A debt of 3 below empty: a take of one waits for 4 refills of 100 ms (on the grid
        // started at the whole millisecond of the debit).
        (Case { words: "CL.BUCKET db 5 1 100 MS", quantity: "", debit: 8, repaid: (399, 400) }, false),
        // The window closes 500 ms after it opened (on the debit's whole millisecond).
        (Case { words: "CL.COUNTER dc 5 500 MS", quantity: "", debit: 8, repaid: (499, 500) }, false),
        // The minute anchored 2 s from now ends (computed below from the reply).
        (Case { words: "", quantity: "QUANTITY ", debit: 8, repaid: (0, 0) }, true),
    ]
}

#[test]
fn each_algorithm_refuses_until_a_debit_is_repaid() {
    let server = Server::start();
    let mut c = server.client();
    for (case, quota) in cases() {
        let anchor = harness::server_ms(&mut c) + 2_000;
        let words = match quota {
            true => format!("CL.QUOTA dq 5 PER MINUTE ANCHOR {anchor} MS"),
            false => case.words.to_string(),
        };
        let key = words.split_whitespace().nth(1).unwrap().to_string();
        let q = |n: i64| format!("{}{n}", case.quantity);
        let (_, check) = timed(&mut c, &format!("{words} {} DEBIT", q(0)));
        assert_eq!(check[..4], [0, 5, 5, -1], "{words}: a check of a full limiter");
        assert_eq!(pexpiretime(&mut c, &key), -2, "{words}: a check writes nothing");

        let (at, debited) = timed(&mut c, &format!("{words} {} DEBIT", q(case.debit)));
        assert_eq!(debited[..4], [1, 5, 0, -1], "{words}: 8 of 5 overdraw (never admittable: no retry)");
        // The key lives until the limiter is full again, no longer.
        let expiry = pexpiretime(&mut c, &key);
        assert!(expiry > at && expiry <= at + debited[4] + 2, "{words}: expires at {expiry}, debit at {at}");
        let repaid = match case.repaid {
            (0, 0) => {
                // The quota's period ends where the debit's reset says (the anchored minute).
                let end = at + debited[4];
                assert!((anchor - 1_000..=anchor + 60_000).contains(&end), "{words}: period ends at {end}");
                (end - 1, end)
            }
            (from, to) => (at + from, at + to),
        };

        let (now, refused) = timed(&mut c, &format!("{words} {}", q(0)));
        assert_eq!(refused[..3], [1, 5, 0], "{words}: a check over the limit is refused");
        // A check waits for the debt to be repaid down to the limit: no later than a take.
        assert!(now + refused[3] <= repaid.1 + 1, "{words}: check retry {refused:?}");
        let before = harness::get_bytes(&mut c, &key);
        let admitted = refused_until(&mut c, &format!("{words} {}", q(1)), repaid);
        assert_eq!(admitted[..2], [0, 5], "{words}: admitted once repaid");
        assert_ne!(harness::get_bytes(&mut c, &key), before, "{words}: the admitted take counted");
    }
}

#[test]
fn a_debit_that_fits_is_an_admission_and_one_past_it_overdraws() {
    let server = Server::start();
    let mut c = server.client();
    let frozen = harness::frozen_clock(&server);
    // Units that fit: the same reply and bytes as a take.
    for (take, debit) in [
        ("CL.THROTTLE a1 9 10 60 4", "CL.THROTTLE b1 9 10 60 4 DEBIT"),
        ("CL.WINDOW a2 10 60 4", "CL.WINDOW b2 10 60 DEBIT 4"),
        ("CL.WINDOW a3 10 60 4 PRECISION 6", "CL.WINDOW b3 10 60 4 PRECISION 6 debit"),
        ("CL.BUCKET a4 10 2 6 4", "CL.BUCKET b4 10 2 6 4 DEBIT"),
        ("CL.COUNTER a5 10 60 4", "CL.COUNTER b5 10 60 4 DEBIT"),
        ("CL.QUOTA a6 10 PER DAY QUANTITY 4", "CL.QUOTA b6 10 PER DAY DEBIT QUANTITY 4"),
    ] {
        let replies: Vec<Vec<i64>> = harness::in_multi_as(&mut c, &[take, debit]);
        assert_eq!(replies[0], replies[1], "{debit}");
        // One instant for both (Redis 7.2+ freezes the clock in MULTI): the same bytes too.
        if frozen {
            let (a, b) = (take.split_whitespace().nth(1).unwrap(), debit.split_whitespace().nth(1).unwrap());
            assert_eq!(harness::get_bytes(&mut c, a), harness::get_bytes(&mut c, b), "{debit}: the same bytes");
            assert_eq!(pexpiretime(&mut c, a), pexpiretime(&mut c, b), "{debit}: the same expiry");
        }
    }
    // Six more overdraw: counted, refused, remaining 0; a take of 6 would wait.
    let r = throttle(&mut c, "CL.COUNTER b5 10 60 7 DEBIT");
    assert_eq!(r[..3], [1, 10, 0]);
    assert!((59..=60).contains(&r[3]) && r[3] == r[4], "{r:?}");
    assert_eq!(harness::get_bytes(&mut c, "b5"), b"11");
    let r = throttle(&mut c, "CL.THROTTLE b1 9 10 60 7 DEBIT");
    // TAT 24 s + 42 s = 66 s ahead, past the 60 s tolerance: a take of 7 fits at 66 + 42 − 60.
    assert_eq!(r[..3], [1, 10, 0]);
    assert!((47..=48).contains(&r[3]) && (65..=66).contains(&r[4]), "{r:?}");
}

#[test]
fn inside_cl_all_every_limiter_counts_and_takes_wait_for_the_debt() {
    let server = Server::start();
    let mut c = server.client();
    let all = |c: &mut Connection, rest: &str| -> Vec<i64> {
        let words = format!("CL.ALL 3 {{u}}t {{u}}c {{u}}b {rest}");
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        match harness::call(c, &args).unwrap_or_else(|e| panic!("{words}: {e}")) {
            Value::Array(items) => items[..6].iter().map(|v| redis::from_redis_value(v.clone()).unwrap()).collect(),
            other => panic!("{words}: {other:?}"),
        }
    };
    let specs = |t: i64, c: i64, b: i64| {
        format!("THROTTLE 4 1 200 QUANTITY {t} COUNTER 10 5000 QUANTITY {c} BUCKET 50 10 100 QUANTITY {b} MS")
    };
    // A check of all three: admitted, nothing written.
    assert_eq!(all(&mut c, &format!("{} DEBIT", specs(0, 0, 0)))[..4], [0, 5, 5, -1]);
    assert_eq!(harness::snapshot(&mut c), vec![]);
    // The debit: the throttle overdraws (8 of 5) and binds; the counter and the bucket count
    // their units all the same.
    let at = harness::server_ms(&mut c);
    let r = all(&mut c, &format!("{} DEBIT", specs(8, 1, 20)));
    assert_eq!((r[0], r[1], r[2], r[3], r[5]), (1, 5, 0, -1, 1), "{r:?}");
    assert_eq!(harness::get_bytes(&mut c, "{u}c"), b"1");
    assert_eq!(harness::get_bytes(&mut c, "{u}b"), b"-20");
    // A check refuses (the throttle is over its limit); takes wait for the throttle's debt
    // (800 ms after the debit), and the refused ones write nothing.
    let r = all(&mut c, &specs(0, 0, 0));
    assert_eq!((r[0], r[5]), (1, 1), "{r:?}");
    let before = snapshot(&mut c);
    let r = all(&mut c, &specs(1, 1, 1));
    assert_eq!((r[0], r[5]), (1, 1), "{r:?}");
    let after = snapshot(&mut c);
    assert_eq!(
        before.iter().map(|(k, v, _)| (k, v)).collect::<Vec<_>>(),
        after.iter().map(|(k, v, _)| (k, v)).collect::<Vec<_>>(),
        "a refused CL.ALL writes nothing"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (now, r) = timed(&mut c, &format!("CL.ALL 3 {{u}}t {{u}}c {{u}}b {}", specs(1, 1, 1)));
        if r[0] == 0 {
            assert!(now >= at + 800 - 5, "admitted at {now}, debit about {at}");
            break;
        }
        assert_eq!(r[5], 1, "the throttle binds");
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(harness::get_bytes(&mut c, "{u}c"), b"2", "the admitted take counted once more");
}

#[test]
fn a_bounded_refund_gives_debited_units_back() {
    let server = Server::start();
    let mut c = server.client();
    for words in [
        "CL.THROTTLE h1 4 1 60000 MS",
        "CL.WINDOW h2 5 60000 MS",
        "CL.WINDOW h3 5 60000 MS PRECISION 1000",
        "CL.BUCKET h4 5 1 60000 MS",
        "CL.COUNTER h5 5 60000 MS",
    ] {
        let key = words.split_whitespace().nth(1).unwrap();
        let args = format!("{words} 8 DEBIT");
        let args: Vec<&[u8]> = args.split_whitespace().map(str::as_bytes).collect();
        let mut pipe = redis::pipe();
        pipe.atomic().add_command(harness::command(&args)).cmd("PEXPIRETIME").arg(key);
        let (debited, held): (Vec<i64>, i64) = pipe.query(&mut c).unwrap();
        assert_eq!(debited[0], 1, "{words}: overdrawn");
        // At once: every debited unit is still held, and comes back (CL.THROTTLE's up to the
        // millisecond `HELD` rounds away: its TAT back within 1 ms of now).
        let r = throttle(&mut c, &format!("{words} -8 HELD {held}"));
        assert!(r[..2] == [0, 5] && r[2] >= 4 && r[4] <= 1, "{words}: the debit given back: {r:?}");
        if !words.starts_with("CL.THROTTLE") {
            assert_eq!(pexpiretime(&mut c, key), -2, "{words}: full again, the key goes");
        }
        // A HELD naming no debit of this key's (an instant long past) gives nothing back.
        throttle(&mut c, &format!("{words} 8 DEBIT"));
        let r = throttle(&mut c, &format!("{words} -8 HELD 1000"));
        assert_eq!(r[..3], [0, 5, 0], "{words}: nothing given back for another instant");
    }
}

#[test]
fn errors_leave_every_key_as_it_was() {
    let server = Server::start();
    let mut c = server.client();
    throttle(&mut c, "CL.COUNTER e 10 60 3");
    throttle(&mut c, "CL.WINDOW w 10 60 3");
    throttle(&mut c, "CL.THROTTLE t 0 1 1000000000 1 DEBIT");
    throttle(&mut c, "CL.BUCKET b 10 1 100000000 10 DEBIT");
    let before = snapshot(&mut c);
    let refund = "ERR DEBIT takes a quantity of 0 or more (a refund is a negative quantity without DEBIT)";
    let span = |what: &str| {
        format!("ERR parameters are too large: {what} must be at most 1000000000 seconds (1000000000000 milliseconds)")
    };
    for (words, want) in [
        ("CL.COUNTER e 10 60 -1 DEBIT", refund.to_string()),
        ("CL.THROTTLE t 0 1 1000000000 -2 DEBIT", refund.to_string()),
        ("CL.QUOTA e 10 PER DAY QUANTITY -1 DEBIT", refund.to_string()),
        ("CL.COUNTER e 10 60 3 HELD 5 DEBIT", "ERR HELD is valid only with a negative quantity (a refund)".into()),
        ("CL.COUNTER e 10 60 DEBIT 3 DEBIT", "ERR syntax error".into()),
        (
            "CL.COUNTER e 10 60 999999999999999997 DEBIT",
            "ERR DEBIT is too large: a count must stay at most 999999999999999999".into(),
        ),
        (
            "CL.WINDOW w 10 60 100001 DEBIT",
            "ERR DEBIT is too large: an exact window logs at most 100000 units a call (use PRECISION for larger budgets)"
                .into(),
        ),
        ("CL.THROTTLE t 0 1 1000000000 2 DEBIT", span("quantity * period / count")),
        ("CL.BUCKET b 10 1 100000000 1 DEBIT", span("interval * ceil(deficit / tokens)")),
        (
            "CL.ALL 2 {e}1 {e}2 COUNTER 5 60 COUNTER 5 60 QUANTITY -1 DEBIT",
            "ERR limiter 2: DEBIT takes a quantity of 0 or more (a refund is a negative quantity without DEBIT)".into(),
        ),
    ] {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        assert_eq!(harness::error_of(&mut c, &args), want, "{words}");
        assert_eq!(snapshot(&mut c), before, "{words}: every key as it was");
    }
}

/// What only the module has: INFO's debits, an overdraw as a denial for CL.TOP and the
/// `throttled` event, and `throttle.mode shadow` storing a debit as enforce does.
#[test]
fn an_overdraw_is_a_denial_for_the_operator() {
    if !module() {
        return; // INFO throttle, CL.TOP, the keyspace event and the mode are the module's
    }
    let server = Server::start();
    let mut c = server.client();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("Ed").query(&mut c).unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut sub = client.get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe("__keyevent@0__:throttled").unwrap();
    pubsub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(throttle(&mut c, "CL.COUNTER fits 5 60 5 DEBIT")[0], 0);
    assert_eq!(throttle(&mut c, "CL.COUNTER over 5 60 6 DEBIT")[0], 1);
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_payload_bytes(), b"over", "the overdraw announced, the fitting debit not");
    let top: Value = redis::cmd("CL.TOP").query(&mut c).unwrap();
    assert!(format!("{top:?}").contains("over") && !format!("{top:?}").contains("fits"), "{top:?}");
    let info: String = redis::cmd("INFO").arg("throttle").query(&mut c).unwrap();
    let field = |name: &str| -> i64 {
        info.lines().find_map(|l| l.strip_prefix(&format!("throttle_{name}:"))).unwrap().trim().parse().unwrap()
    };
    assert_eq!(
        (
            field("cl_counter_calls"),
            field("cl_counter_admitted"),
            field("cl_counter_denied"),
            field("cl_counter_debits")
        ),
        (2, 1, 1, 2)
    );
    // Global shadow mode: the debit is stored as in enforce, only the reply is shadowed.
    let _: () = redis::cmd("CONFIG").arg("SET").arg("throttle.mode").arg("shadow").query(&mut c).unwrap();
    let r = throttle(&mut c, "CL.COUNTER mode 5 60 8 DEBIT");
    assert_eq!((r[0], r[3]), (0, -1));
    assert_eq!(harness::get_bytes(&mut c, "mode"), b"8", "stored as enforce stores it");
    let _: () = redis::cmd("CONFIG").arg("SET").arg("throttle.mode").arg("enforce").query(&mut c).unwrap();
}

/// The module on a server against the reference models (`core/src/reference`, the contract's
/// plain arithmetic), call for call, with debits among takes, checks and refunds: the server's
/// clock pinned to each call's microsecond (`CL.DEBUG CLOCK`, a day ahead so that no key
/// expires by the real clock meanwhile), every reply equal to the model's.
#[test]
fn the_module_matches_the_reference_models_with_debits() {
    use redis_throttle_core::reference::{bucket, counter, throttle as gcra, window};
    if !module() {
        return; // the clock is pinned through the module's CL.DEBUG
    }
    let server = Server::with(Options::default().debug_commands());
    let mut c = server.client();
    let ms = |ns: i128| if ns < 0 { -1 } else { ((ns + 999_999) / 1_000_000) as i64 };
    let as_ms = |r: [i128; 5]| [r[0] as i64, r[1] as i64, r[2] as i64, ms(r[3]), ms(r[4])];
    let mut now_us = (harness::server_ms(&mut c) + 86_400_000) * 1000 + 123;
    let mut tat: Option<i64> = None;
    let mut counter_model = counter::Model::default();
    let mut bucket_model = bucket::Model::new(6, 2, 300_000_000);
    let (mut exact, mut buckets) = (window::Model::default(), window::Model::default());
    let mut seed = 45u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for i in 0..1500 {
        now_us += next(400_000) as i64;
        let now = now_us as i128 * 1000;
        let debit = next(3) == 0;
        let q = next(12) as i64 - if debit { 0 } else { 3 };
        let tail = if debit { " DEBIT" } else { "" };
        let (words, want) = match i % 5 {
            0 => {
                let (reply, write) = gcra::call(tat, now as i64, 4, 3, 600_000_000, q, debit).unwrap();
                if let Some(w) = write {
                    tat = w.map(|t| t as i64);
                }
                (format!("CL.THROTTLE m:t 4 3 600 {q} MS{tail}"), reply)
            }
            1 => {
                (format!("CL.COUNTER m:c 6 700 {q} MS{tail}"), counter_model.call(now, 6, 700_000_000, q.into(), debit))
            }
            2 => (format!("CL.BUCKET m:b 6 2 300 {q} MS{tail}"), bucket_model.call(now, q.into(), debit)),
            3 => (format!("CL.WINDOW m:w 6 900 {q} MS{tail}"), exact.call(now, 6, 900_000_000, None, q.into(), debit)),
            _ => (
                format!("CL.WINDOW m:p 6 900 {q} MS PRECISION 100{tail}"),
                buckets.call(now, 6, 900_000_000, Some(100_000_000), q.into(), debit),
            ),
        };
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        let mut pipe = redis::pipe();
        pipe.cmd("CL.DEBUG").arg("CLOCK").arg(now_us).ignore().add_command(harness::command(&args));
        let (got,): (Vec<i64>,) = pipe.query(&mut c).unwrap_or_else(|e| panic!("{words}: {e}"));
        assert_eq!(got, as_ms(want), "call {i} at +{} µs: {words}", now_us % 1_000_000_000);
    }
}

/// A call's reply as integers, and nested arrays (CL.EACH's) as their integers in order.
fn integers(c: &mut Connection, words: &str) -> Vec<i64> {
    fn flat(v: Value, out: &mut Vec<i64>) {
        match v {
            Value::Array(items) => items.into_iter().for_each(|i| flat(i, out)),
            v => out.push(redis::from_redis_value(v).unwrap()),
        }
    }
    let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
    let mut out = Vec::new();
    flat(harness::call(c, &args).unwrap_or_else(|e| panic!("{words}: {e}")), &mut out);
    out
}

/// Check-then-debit: a check refused because the limiter is over its limit is the decision the
/// caller acts on, so `SHADOW` answers it as admitted (limited 0, no retry time) in the single
/// commands (each twice: the twin's hot path takes the second), CL.ALL and CL.EACH alike; a
/// refund is never shadowed; without SHADOW the check is refused.
#[test]
fn shadow_answers_a_refused_check_as_admitted() {
    let server = Server::start();
    let mut c = server.client();
    for (debit, check) in [
        ("CL.COUNTER k1 5 60 9 DEBIT", "CL.COUNTER k1 5 60 0"),
        ("CL.THROTTLE k2 4 1 60 9 DEBIT", "CL.THROTTLE k2 4 1 60 0"),
        ("CL.WINDOW k3 5 60 9 DEBIT", "CL.WINDOW k3 5 60 0"),
        ("CL.WINDOW k4 5 60 9 DEBIT PRECISION 6", "CL.WINDOW k4 5 60 0 PRECISION 6"),
        ("CL.BUCKET k5 5 1 60 9 DEBIT", "CL.BUCKET k5 5 1 60 0"),
        ("CL.QUOTA k6 5 PER DAY QUANTITY 9 DEBIT", "CL.QUOTA k6 5 PER DAY QUANTITY 0"),
    ] {
        assert_eq!(throttle(&mut c, debit)[..4], [1, 5, 0, -1], "{debit}");
        let refused = throttle(&mut c, check);
        assert_eq!((refused[0], refused[2]), (1, 0), "{check}: refused");
        assert!(refused[3] > 0, "{check}: {refused:?}");
        for _ in 0..2 {
            let shadowed = throttle(&mut c, &format!("{check} SHADOW"));
            assert_eq!(shadowed[..4], [0, 5, 0, -1], "{check} SHADOW: answered as admitted");
            // (reset_after as decided: the same, but for a second passed meanwhile)
            assert!((refused[4] - shadowed[4]).abs() <= 1, "{check} SHADOW: {shadowed:?} {refused:?}");
            let shadowed = throttle(&mut c, &format!("{check} DEBIT SHADOW"));
            assert_eq!(shadowed[..4], [0, 5, 0, -1], "{check} DEBIT SHADOW");
        }
        // A refund with SHADOW is answered as it is.
        assert_eq!(throttle(&mut c, &format!("{} SHADOW", check.replace(" 0", " -1")))[0], 0);
    }
    // CL.ALL of checks only, one limiter over its limit: the call reads as admitted, its index
    // still naming that limiter; CL.EACH: that limiter's reply reads as admitted.
    throttle(&mut c, "CL.COUNTER {a}1 5 60 9 DEBIT");
    let all = "CL.ALL 2 {a}1 {a}2 COUNTER 5 60 QUANTITY 0 COUNTER 5 60 QUANTITY 0";
    let refused = integers(&mut c, all);
    assert_eq!((refused[0], refused[5]), (1, 1), "{refused:?}");
    let shadowed = integers(&mut c, &format!("{all} SHADOW DETAILS"));
    assert_eq!((shadowed[0], shadowed[3], shadowed[5]), (0, -1, 1), "{shadowed:?}");
    assert_eq!((&shadowed[6..10], &shadowed[11..]), (&[0, 5, 0, -1][..], &[0, 5, 5, -1, 0][..]), "DETAILS");
    let each = "CL.EACH 2 {a}1 {a}2 COUNTER 5 60 QUANTITY 0 COUNTER 5 60 QUANTITY 0";
    let refused = integers(&mut c, each);
    assert_eq!((&refused[..3], &refused[5..]), (&[1, 5, 0][..], &[0, 5, 5, -1, 0][..]), "{refused:?}");
    for words in [format!("{each} SHADOW"), format!("{each} DEBIT SHADOW")] {
        let shadowed = integers(&mut c, &words);
        assert_eq!((&shadowed[..4], &shadowed[5..]), (&[0, 5, 0, -1][..], &[0, 5, 5, -1, 0][..]), "{words}");
    }
}

/// What only the module has: under `throttle.mode shadow` a refused check reads as admitted
/// and counts as a shadow denial; under enforce it counts as denied (an admitted check stays a
/// peek), is recorded for CL.TOP and announces `throttled`, in the single commands, CL.ALL and
/// CL.EACH alike; a refund is never a denial.
#[test]
fn a_refused_check_is_a_denial_for_the_operator() {
    if !module() {
        return; // the mode, INFO throttle, CL.TOP and the keyspace event are the module's
    }
    let server = Server::start();
    let mut c = server.client();
    let set = |c: &mut Connection, name: &str, value: &str| {
        let _: () = redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query(c).unwrap();
    };
    let field = |c: &mut Connection, name: &str| -> i64 {
        let info: String = redis::cmd("INFO").arg("throttle").query(c).unwrap();
        info.lines().find_map(|l| l.strip_prefix(&format!("throttle_{name}:"))).unwrap().trim().parse().unwrap()
    };
    // The repro.
    set(&mut c, "throttle.mode", "shadow");
    assert_eq!(throttle(&mut c, "CL.COUNTER k 5 60 9 DEBIT")[..4], [0, 5, 0, -1]);
    assert_eq!(throttle(&mut c, "CL.COUNTER k 5 60 0")[..4], [0, 5, 0, -1], "a refused check, shadowed");
    assert_eq!(throttle(&mut c, "CL.COUNTER k 5 60 -1")[..4], [0, 5, 0, -1]);
    let each = "CL.EACH 1 k COUNTER 5 60 QUANTITY 0";
    assert_eq!(integers(&mut c, each)[..4], [0, 5, 0, -1]);
    let all = "CL.ALL 2 {b}1 {b}2 COUNTER 5 60 QUANTITY 0 COUNTER 5 60 QUANTITY 0";
    throttle(&mut c, "CL.COUNTER {b}1 5 60 6 DEBIT");
    assert_eq!(integers(&mut c, all)[..4], [0, 5, 0, -1]);
    assert_eq!(
        ["shadow_denied", "peeks", "refunds", "denied"].map(|f| field(&mut c, &format!("cl_counter_{f}"))),
        [3, 0, 1, 0],
        "the debit, the check, the debit of {{b}}1: shadow denials; the refund a refund"
    );
    assert_eq!(field(&mut c, "cl_each_shadow_denied"), 1);
    assert_eq!(field(&mut c, "cl_all_shadow_denied"), 1);

    set(&mut c, "throttle.mode", "enforce");
    let _: () = redis::cmd("CL.TOP").arg("RESET").query(&mut c).unwrap();
    set(&mut c, "notify-keyspace-events", "Ed");
    let client = redis::Client::open(server.url()).unwrap();
    let mut sub = client.get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe("__keyevent@0__:throttled").unwrap();
    pubsub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(throttle(&mut c, "CL.COUNTER fits 5 60 0")[0], 0, "an admitted check");
    assert_eq!(throttle(&mut c, "CL.COUNTER k 5 60 0")[0], 1, "a refused check");
    assert_eq!(integers(&mut c, each)[0], 1);
    assert_eq!(integers(&mut c, all)[0], 1);
    assert_eq!(integers(&mut c, "CL.ALL 2 {b}1 {b}2 COUNTER 5 60 QUANTITY 0 COUNTER 5 60 QUANTITY -1")[0], 1);
    for _ in 0..2 {
        assert_eq!(pubsub.get_message().unwrap().get_payload_bytes(), b"k", "the refused checks of k announced");
    }
    for _ in 0..2 {
        assert_eq!(pubsub.get_message().unwrap().get_payload_bytes(), b"{b}1");
    }
    assert_eq!(
        ["denied", "peeks", "shadow_denied"].map(|f| field(&mut c, &format!("cl_counter_{f}"))),
        [1, 1, 3],
        "a refused check denied, an admitted one a peek"
    );
    assert_eq!((field(&mut c, "cl_each_denied"), field(&mut c, "cl_all_denied")), (1, 2));
    let top: Vec<Value> = redis::cmd("CL.TOP").arg(10).query(&mut c).unwrap();
    let top: Vec<(String, i64)> = top
        .chunks(2)
        .map(|pair| {
            (redis::from_redis_value(pair[0].clone()).unwrap(), redis::from_redis_value(pair[1].clone()).unwrap())
        })
        .collect();
    assert_eq!(top, [("k".to_string(), 2), ("{b}1".to_string(), 2)], "recorded for CL.TOP");
}

/// A refund on a ring read without PRECISION gives back out of every unit the ring counts,
/// never out of the `limit + 1` a log keeps (the repro: 97 of 100 units still count);
/// and the reverse, a log read with PRECISION, likewise.
#[test]
fn a_refund_across_precision_never_forgives_the_rest_of_a_debt() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(throttle(&mut c, "CL.WINDOW k 5 60 PRECISION 6 100 DEBIT")[..4], [1, 5, 0, -1]);
    assert_eq!(throttle(&mut c, "CL.WINDOW k 5 60 -3")[..4], [0, 5, 0, -1], "97 still count");
    assert_eq!(harness::get_bytes(&mut c, "k")[0], 2, "the ring stays");
    assert_eq!(throttle(&mut c, "CL.WINDOW k 5 60 0")[..3], [1, 5, 0], "a check refused");
    assert_eq!(throttle(&mut c, "CL.WINDOW k 5 60 0 PRECISION 6")[..3], [1, 5, 0]);
    assert_eq!(throttle(&mut c, "CL.WINDOW k 5 60 -92")[..3], [0, 5, 0]);
    assert_eq!(throttle(&mut c, "CL.WINDOW k 5 60 -1")[..3], [0, 5, 1], "down to the limit, then below");
    assert_eq!(throttle(&mut c, "CL.WINDOW k 5 60")[..3], [0, 5, 0], "a take converts");
    assert_eq!(harness::get_bytes(&mut c, "k")[0], 1);

    assert_eq!(throttle(&mut c, "CL.WINDOW j 5 60 100 DEBIT")[..4], [1, 5, 0, -1]);
    assert_eq!(throttle(&mut c, "CL.WINDOW j 5 60 -3 PRECISION 6")[..4], [0, 5, 0, -1]);
    assert_eq!(throttle(&mut c, "CL.WINDOW j 5 60 0")[..3], [1, 5, 0]);
    assert_eq!(throttle(&mut c, "CL.WINDOW j 5 60 -94 PRECISION 6")[..3], [0, 5, 2]);
}

/// Debits never pile an exact log past twice `throttle.max-exact-limit` live units: the one
/// that would is an error naming PRECISION, and nothing is written.
#[test]
fn debits_never_pile_an_exact_log_past_its_bound() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(throttle(&mut c, "CL.WINDOW d 5 60 100000 DEBIT")[..3], [1, 5, 0]);
    assert_eq!(throttle(&mut c, "CL.WINDOW d 5 60 99999 DEBIT")[..3], [1, 5, 0]);
    let state =
        |c: &mut Connection| -> (i64, i64) { (redis::cmd("STRLEN").arg("d").query(c).unwrap(), pexpiretime(c, "d")) };
    let before = state(&mut c);
    assert_eq!(before.0, 8 + 8 * 199_999);
    let deep = "ERR DEBIT is too large: an exact window holds at most 200000 units (use PRECISION for larger budgets)";
    assert_eq!(harness::error_of(&mut c, &[b"CL.WINDOW", b"d", b"5", b"60", b"2", b"DEBIT"]), deep);
    assert_eq!(state(&mut c), before, "nothing written");
    assert_eq!(throttle(&mut c, "CL.WINDOW d 5 60 1 DEBIT")[0], 1, "up to the bound");
    assert_eq!(harness::error_of(&mut c, &[b"CL.WINDOW", b"d", b"5", b"60", b"1", b"DEBIT"]), deep);
    assert_eq!(throttle(&mut c, "CL.WINDOW d 5 60 0")[0], 1, "a check is no debit");
    assert_eq!(throttle(&mut c, "CL.WINDOW d 5 60 5 DEBIT PRECISION 1")[0], 1, "PRECISION takes any budget");
}
