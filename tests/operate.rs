//! Operating the module on a live server (docs/src/guides/operating.md): `INFO throttle` counts every
//! call exactly, `CL.TOP` lists the most-denied keys within the Space-Saving bound, every denial
//! is announced as the keyspace event `throttled` when asked for (and nothing is sent when not),
//! shadow mode answers denials as admissions while storing exactly what enforcing stores, and
//! the configs (`throttle.mode`, `throttle.max-exact-limit`, `throttle.max-buckets`) behave as
//! the server's own. Restarts and load-time values: tests/operate_restart.rs.
//!
//! skip twin: INFO, CL.TOP, the throttled event and the configs are the module's only (SHADOW
//! is the twin's too, tested elsewhere).

mod harness;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use harness::{Server, call, drain, error_of, frozen_clock, in_multi_as, psubscribe, throttle, try_throttle};
use redis::{Connection, Value};

/// The `throttle_*` fields of `INFO throttle`, without the prefix.
fn info(c: &mut Connection) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO").arg("throttle").query(c).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("throttle_"))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn counter(info: &HashMap<String, String>, field: &str) -> i64 {
    info.get(field).unwrap_or_else(|| panic!("INFO throttle has no {field}: {info:?}")).parse().unwrap()
}

fn config_set(c: &mut Connection, name: &str, value: &str) -> redis::RedisResult<()> {
    redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query(c)
}

fn config_get(c: &mut Connection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(c).unwrap();
    assert_eq!(pair.len(), 2, "CONFIG GET {name}: {pair:?}");
    pair[1].clone()
}

/// `CL.TOP …` as `(key, count)` pairs.
fn top(c: &mut Connection, args: &str) -> Vec<(Vec<u8>, i64)> {
    let mut cmd = redis::cmd("CL.TOP");
    for a in args.split_whitespace() {
        cmd.arg(a);
    }
    let flat: Vec<Value> = cmd.query(c).unwrap();
    assert!(flat.len().is_multiple_of(2), "key, count pairs: {flat:?}");
    flat.chunks(2)
        .map(|pair| match pair {
            [Value::BulkString(key), Value::Int(count)] => (key.clone(), *count),
            other => panic!("expected a key and a count, got {other:?}"),
        })
        .collect()
}

/// What a call of the scripted mix is meant to be (the module's `operate::Class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Class {
    Admitted,
    Denied,
    ShadowDenied,
    Peek,
    Refund,
    Error,
}

const CLASSES: [(Class, &str); 6] = [
    (Class::Admitted, "admitted"),
    (Class::Denied, "denied"),
    (Class::ShadowDenied, "shadow_denied"),
    (Class::Peek, "peeks"),
    (Class::Refund, "refunds"),
    (Class::Error, "errors"),
];

const COMMANDS: [&str; 5] = ["cl.throttle", "cl.window", "cl.bucket", "cl.counter", "cl.all"];

/// A call of `command` that is `kind` by construction, on keys numbered `i` (each call its own
/// keys, so no call depends on another): a limit of 5 units per minute, a quantity above it
/// for a denial (never admittable: nothing is stored), an invalid parameter for an error.
fn scripted(command: &str, kind: Class, i: usize) -> String {
    let q = match kind {
        Class::Admitted => "1",
        Class::Denied => "6",
        Class::ShadowDenied => "6 SHADOW",
        Class::Peek => "0",
        Class::Refund => "-1",
        Class::Error => "",
    };
    let bad = kind == Class::Error;
    match command {
        "cl.throttle" => format!("CL.THROTTLE mix:t:{i} 4 {} 60 {q}", if bad { 0 } else { 1 }),
        "cl.window" => format!("CL.WINDOW mix:w:{i} {} 60 {q}", if bad { 0 } else { 5 }),
        "cl.bucket" => format!("CL.BUCKET mix:b:{i} {} 1 60 {q}", if bad { 0 } else { 5 }),
        "cl.counter" => format!("CL.COUNTER mix:c:{i} {} 60 {q}", if bad { 0 } else { 5 }),
        _ => {
            // The first limiter takes the class's quantity, the second one unit less at most.
            let (first, second, options) = match kind {
                Class::Admitted => ("1", "1", ""),
                Class::Denied => ("6", "1", ""),
                Class::ShadowDenied => ("6", "1", "SHADOW"),
                Class::Peek => ("0", "0", ""),
                Class::Refund => ("-1", "0", ""),
                Class::Error => ("1", "1", ""),
            };
            let numkeys = if bad { 17 } else { 2 };
            format!(
                "CL.ALL {numkeys} mix:a:{i}:1 mix:a:{i}:2 COUNTER 5 60 QUANTITY {first} THROTTLE 4 1 60 QUANTITY {second} {options}"
            )
        }
    }
}

#[test]
fn info_counts_a_scripted_mix_exactly() {
    let server = Server::start();
    let mut c = server.client();
    // A WRONGTYPE error too: a key of another type.
    let _: () = redis::cmd("RPUSH").arg("mix:list").arg("x").query(&mut c).unwrap();
    let mut expected: HashMap<(&str, Class), i64> = HashMap::new();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for i in 0..600 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let command = COMMANDS[(rng % 5) as usize];
        let kind = CLASSES[((rng >> 8) % 6) as usize].0;
        let words = if kind == Class::Error && i % 3 == 0 && command != "cl.all" {
            // A valid call on a key of another type: WRONGTYPE.
            let mut words: Vec<String> =
                scripted(command, Class::Admitted, i).split_whitespace().map(String::from).collect();
            words[1] = "mix:list".into();
            words.join(" ")
        } else {
            scripted(command, kind, i)
        };
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        match call(&mut c, &args) {
            Err(e) => assert_eq!(kind, Class::Error, "{words}: {e}"),
            Ok(Value::Array(reply)) => {
                let ints: Vec<i64> =
                    reply.iter().map(|v| redis::FromRedisValue::from_redis_value(v.clone()).unwrap()).collect();
                let (limited, retry) = (ints[0], ints[3]);
                match kind {
                    Class::Denied => assert_eq!(limited, 1, "{words}: {ints:?}"),
                    Class::ShadowDenied => assert_eq!((limited, retry), (0, -1), "{words}: {ints:?}"),
                    Class::Error => panic!("{words}: expected an error, got {ints:?}"),
                    _ => assert_eq!(limited, 0, "{words}: {ints:?}"),
                }
            }
            Ok(other) => panic!("{words}: {other:?}"),
        }
        *expected.entry((command, kind)).or_insert(0) += 1;
    }
    let info = info(&mut c);
    assert_eq!(info["mode"], "enforce");
    for command in COMMANDS {
        let prefix = command.replace('.', "_");
        let mut calls = 0;
        for (kind, field) in CLASSES {
            let want = expected.get(&(command, kind)).copied().unwrap_or(0);
            calls += want;
            assert_eq!(counter(&info, &format!("{prefix}_{field}")), want, "{command} {field}");
        }
        assert!(calls > 50, "the mix exercised {command}");
        assert_eq!(counter(&info, &format!("{prefix}_calls")), calls, "{command} calls");
    }
    // Only limiter commands have counters: CL.TOP is not one.
    assert!(!info.keys().any(|k| k.starts_with("cl_top")), "{info:?}");
}

/// Many clients at once, pipelined: the counters still add up to exactly the calls made.
#[test]
fn counters_are_exact_under_concurrent_load() {
    let server = Server::start();
    let (clients, rounds, per_round) = (6, 20, 50);
    std::thread::scope(|s| {
        for t in 0..clients {
            let server = &server;
            s.spawn(move || {
                let mut c = server.client();
                for r in 0..rounds {
                    let mut pipe = redis::pipe();
                    for j in 0..per_round {
                        // Per round and client: admitted, denied (never admittable) and a peek, in turn.
                        let q = ["1", "9", "0"][j % 3];
                        pipe.cmd("CL.COUNTER").arg(format!("load:{t}:{r}:{j}")).arg(5).arg(60).arg(q);
                    }
                    let replies: Vec<Vec<i64>> = pipe.query(&mut c).unwrap();
                    assert_eq!(replies.len(), per_round);
                }
            });
        }
    });
    let info = info(&mut server.client());
    let calls = (clients * rounds * per_round) as i64;
    let third = |k: usize| (0..per_round).filter(|j| j % 3 == k).count() as i64 * (clients * rounds) as i64;
    assert_eq!(counter(&info, "cl_counter_calls"), calls);
    assert_eq!(counter(&info, "cl_counter_admitted"), third(0));
    assert_eq!(counter(&info, "cl_counter_denied"), third(1));
    assert_eq!(counter(&info, "cl_counter_peeks"), third(2));
    assert_eq!(counter(&info, "top_denials"), third(1));
}

/// `SHADOW` is in every limiter command's table, so the server documents it; CL.TOP is a
/// keyless, read-only command.
#[test]
fn shadow_and_cl_top_are_documented() {
    let server = Server::start();
    let mut c = server.client();
    for name in ["cl.throttle", "cl.window", "cl.bucket", "cl.counter", "cl.all", "cl.top"] {
        let docs: Value = redis::cmd("COMMAND").arg("DOCS").arg(name).query(&mut c).unwrap();
        let text = format!("{docs:?}");
        let token = if name == "cl.top" { "RESET" } else { "SHADOW" };
        assert!(text.contains(token), "COMMAND DOCS {name} lacks {token}: {text}");
    }
    let info: Vec<Vec<Value>> = redis::cmd("COMMAND").arg("INFO").arg("cl.top").query(&mut c).unwrap();
    let text = format!("{:?}", info[0]);
    assert!(text.contains("readonly") && text.contains("admin") && !text.contains("write"), "{text}");
    assert_eq!(info[0][1], Value::Int(-1), "CL.TOP [count] [RESET]: any number of words");
    let keys: redis::RedisResult<Vec<String>> = redis::cmd("COMMAND").arg(&["GETKEYS", "CL.TOP", "5"]).query(&mut c);
    assert!(keys.is_err(), "no keys: {keys:?}");
}

#[test]
fn info_throttle_is_a_module_section() {
    let server = Server::start();
    let mut c = server.client();
    for section in ["throttle", "everything", "modules"] {
        let text: String = redis::cmd("INFO").arg(section).query(&mut c).unwrap();
        assert!(text.contains("# throttle\r\n"), "INFO {section}: {text}");
        assert!(text.contains("throttle_mode:enforce\r\n"), "INFO {section}");
        assert!(text.contains("throttle_cl_throttle_calls:0\r\n"), "INFO {section}");
    }
    let other: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
    assert!(!other.contains("throttle_"), "INFO memory");
}

/// The manual's `INFO throttle` example (docs/src/guides/operating.md) names every field the
/// server prints, in its order: the first command's eight written out, the `…` line naming the
/// commands that repeat them.
#[test]
fn the_manual_shows_every_info_field_in_order() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/src/guides/operating.md")).unwrap();
    let section = page.split("## INFO throttle").nth(1).expect("operating.md: ## INFO throttle");
    let block = section.split("```").nth(1).expect("operating.md: the INFO example");
    let block = block.split_once('\n').map_or("", |(_info, lines)| lines); // after ```text
    let mut shown = Vec::new();
    let mut first = Vec::new(); // the first command's fields, without their command
    for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(names) = line.split_once("(the same eight for ").map(|(_, rest)| rest.trim_end_matches(')')) {
            // The line continues the written-out fields: a command's first may be above it.
            for name in names
                .split(", ")
                .flat_map(|command| first.iter().map(move |field| format!("throttle_{command}_{field}")))
            {
                if !shown.contains(&name) {
                    shown.push(name);
                }
            }
        } else if let Some((name, _)) = line.split_once(':') {
            if let Some(field) = name.strip_prefix("throttle_cl_throttle_") {
                first.push(field.to_string());
            }
            shown.push(name.to_string());
        } else {
            shown.push(line.to_string());
        }
    }
    let server = Server::start();
    let mut c = server.client();
    let text: String = redis::cmd("INFO").arg("throttle").query(&mut c).unwrap();
    let printed: Vec<String> =
        text.lines().filter(|l| !l.is_empty()).map(|l| l.split(':').next().unwrap_or(l).to_string()).collect();
    assert_eq!(shown, printed, "the manual's INFO throttle example against the server's");
}

/// A Zipf stream of denials through a real server: CL.TOP's counts never fall below the exact
/// ones and exceed them by at most N / 1024, every key denied more often than that is listed,
/// and the heaviest keys come out first.
#[test]
fn cl_top_keeps_its_bound_against_exact_counts() {
    let server = Server::start();
    let mut c = server.client();
    let keys = 4000usize;
    let cumulative: Vec<f64> = {
        let weights: Vec<f64> = (1..=keys).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
        let total: f64 = weights.iter().sum();
        weights
            .iter()
            .scan(0.0, |acc, w| {
                *acc += w / total;
                Some(*acc)
            })
            .collect()
    };
    let mut exact: HashMap<Vec<u8>, i64> = HashMap::new();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let denials = 40_000;
    for batch in 0..denials / 1000 {
        let mut pipe = redis::pipe();
        for j in 0..1000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let u = (rng >> 11) as f64 / (1u64 << 53) as f64;
            let rank = cumulative.partition_point(|&x| x < u).min(keys - 1);
            // A binary key among them: any bytes are a key.
            let key = if rank == 3 { b"zipf:\x00\xff:3".to_vec() } else { format!("zipf:{rank}").into_bytes() };
            *exact.entry(key.clone()).or_insert(0) += 1;
            // Denied every time (2 units never fit a limit of 1), shadowed every 5th call: both count.
            let shadow = if j % 5 == 0 { "SHADOW" } else { "0" };
            pipe.cmd("CL.COUNTER").arg(key).arg(1).arg(60).arg(2);
            if shadow == "SHADOW" {
                pipe.arg("SHADOW");
            }
            // Admissions, peeks and refunds of other keys are not denials.
            if j % 10 == 0 {
                pipe.cmd("CL.COUNTER").arg(format!("ok:{batch}:{j}")).arg(5).arg(60);
                pipe.cmd("CL.COUNTER").arg(format!("ok:{batch}:{j}")).arg(5).arg(60).arg(0);
            }
        }
        let _: Vec<Value> = pipe.query(&mut c).unwrap();
    }
    let n = denials as i64;
    let info = info(&mut c);
    assert_eq!(counter(&info, "top_denials"), n);
    assert_eq!(counter(&info, "top_tracked_keys"), 1024);
    let bound = counter(&info, "top_error_bound");
    assert!(bound > 0 && bound <= n / 1024, "the bound {bound} is at most N/1024 = {}", n / 1024);

    let listed = top(&mut c, "1024");
    assert_eq!(listed.len(), 1024);
    assert_eq!(listed.iter().map(|(_, count)| count).sum::<i64>(), n, "every denial is in some count");
    for (key, count) in &listed {
        let truth = exact.get(key).copied().unwrap_or(0);
        assert!(
            truth <= *count && *count <= truth + bound,
            "{:?}: {count}, exactly {truth}, bound {bound}",
            String::from_utf8_lossy(key)
        );
    }
    for (key, &count) in &exact {
        if count > n / 1024 {
            assert!(
                listed.iter().any(|(k, _)| k == key),
                "{:?} denied {count} times is listed",
                String::from_utf8_lossy(key)
            );
        }
    }
    let mut truth: Vec<(&Vec<u8>, &i64)> = exact.iter().collect();
    truth.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let ten = top(&mut c, "10");
    assert_eq!(ten, listed[..10].to_vec(), "CL.TOP 10 is the head of the list");
    for (key, count) in &ten {
        assert!(
            exact[key] + bound >= *truth[9].1,
            "{:?} ({count}) belongs in the top ten",
            String::from_utf8_lossy(key)
        );
    }
    assert!(
        ten.iter().any(|(k, _)| k.as_slice() == b"zipf:\x00\xff:3"),
        "the binary key, fourth heaviest, comes back as it is"
    );
    assert_eq!(top(&mut c, "").len(), 10, "ten by default");

    // RESET answers the list, then starts afresh.
    let head = top(&mut c, "3");
    assert_eq!(top(&mut c, "3 RESET"), head);
    assert_eq!(top(&mut c, "RESET"), vec![]);
    assert_eq!(counter(&self::info(&mut c), "top_denials"), 0);
    throttle(&mut c, "CL.COUNTER again 1 60 2");
    assert_eq!(top(&mut c, ""), vec![(b"again".to_vec(), 1)]);

    for (words, error) in [
        ("CL.TOP 0", "ERR count must be an integer from 1 to 1024"),
        ("CL.TOP 1025", "ERR count must be an integer from 1 to 1024"),
        ("CL.TOP 1.5", "ERR value is not an integer or out of range"),
        ("CL.TOP LOTS", "ERR syntax error"),
        ("CL.TOP 1 RESET 2", "ERR wrong number of arguments for 'cl.top' command"),
    ] {
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        assert_eq!(error_of(&mut c, &args), error, "{words}");
    }
}

/// CL.ALL: a denial counts each limiter that denied on its own, not the ones that would have
/// admitted.
#[test]
fn a_cl_all_denial_counts_and_announces_the_denying_keys() {
    let server = Server::start();
    let mut c = server.client();
    let _: () = redis::cmd("CONFIG").arg(&["SET", "notify-keyspace-events", "Ed"]).query(&mut c).unwrap();
    let events = psubscribe(&server, "__keyevent@0__:throttled");
    let denied: Vec<Value> = redis::cmd("CL.ALL")
        .arg(&[
            "3", "{a}1", "{a}2", "{a}3", "COUNTER", "5", "60", "QUANTITY", "6", "COUNTER", "5", "60", "COUNTER", "1",
            "60", "QUANTITY", "2",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(denied[0], Value::Int(1));
    assert_eq!(top(&mut c, ""), vec![(b"{a}1".to_vec(), 1), (b"{a}3".to_vec(), 1)]);
    let keys: Vec<Vec<u8>> = drain(&events).into_iter().map(|(_, key)| key).collect();
    assert_eq!(keys, vec![b"{a}1".to_vec(), b"{a}3".to_vec()]);
    let info = info(&mut c);
    assert_eq!((counter(&info, "cl_all_calls"), counter(&info, "cl_all_denied")), (1, 1));
}

#[test]
fn every_denial_is_a_throttled_event_when_asked_for() {
    let server = Server::start();
    let mut c = server.client();
    let keyevents = psubscribe(&server, "__keyevent@0__:*");
    let keyspace = psubscribe(&server, "__keyspace@0__:*");
    let notify = |c: &mut Connection, classes: &str| config_set(c, "notify-keyspace-events", classes).unwrap();
    // A mix of every outcome; the denials are the calls of the keys named `no:*`.
    let mix = |c: &mut Connection| {
        for words in [
            "CL.THROTTLE yes:t 0 1 60",
            "CL.THROTTLE no:t 0 1 60 2",
            "CL.WINDOW no:w 1 60 2",
            "CL.BUCKET no:b 1 1 60 2 SHADOW",
            "CL.COUNTER yes:c 1 60 0",
            "CL.COUNTER yes:c 1 60 -1",
            "CL.COUNTER no:c 1 60 2",
        ] {
            throttle(c, words);
        }
    };
    let denied = ["no:t", "no:w", "no:b", "no:c"];

    // Off (the default), or on without module events: nothing at all.
    for classes in ["", "E$gx", "KE"] {
        notify(&mut c, classes);
        mix(&mut c);
        let _ =
            redis::cmd("DEL").arg(&["yes:t", "no:t", "no:w", "no:b", "no:c", "yes:c"]).query::<i64>(&mut c).unwrap();
        assert_eq!(drain(&keyevents).into_iter().filter(|(ch, _)| ch.ends_with("throttled")).count(), 0, "{classes:?}");
        drain(&keyspace);
    }
    // `Ed`: one keyevent per denial, naming the key, in order; nothing for the rest.
    notify(&mut c, "Ed");
    mix(&mut c);
    let got = drain(&keyevents);
    assert_eq!(
        got,
        denied.iter().map(|k| ("__keyevent@0__:throttled".to_string(), k.as_bytes().to_vec())).collect::<Vec<_>>()
    );
    assert_eq!(drain(&keyspace), vec![], "Ed publishes no keyspace channel");
    // `Kd`: the keyspace channel of each denied key, with the event as the message.
    let _ = redis::cmd("DEL").arg(&["yes:t", "no:t", "no:w", "no:b", "no:c", "yes:c"]).query::<i64>(&mut c).unwrap();
    notify(&mut c, "Kd");
    mix(&mut c);
    let got = drain(&keyspace);
    assert_eq!(got, denied.iter().map(|k| (format!("__keyspace@0__:{k}"), b"throttled".to_vec())).collect::<Vec<_>>());
    assert_eq!(drain(&keyevents), vec![]);
    // `KEA` (`A` includes module events): both channels, among the write events.
    let _ = redis::cmd("DEL").arg(&["yes:t", "no:t", "no:w", "no:b", "no:c", "yes:c"]).query::<i64>(&mut c).unwrap();
    notify(&mut c, "KEA");
    mix(&mut c);
    let throttled: Vec<Vec<u8>> =
        drain(&keyevents).into_iter().filter(|(ch, _)| ch.ends_with(":throttled")).map(|(_, k)| k).collect();
    assert_eq!(throttled, denied.iter().map(|k| k.as_bytes().to_vec()).collect::<Vec<_>>());
    assert_eq!(drain(&keyspace).into_iter().filter(|(_, m)| m == b"throttled").count(), denied.len());
}

/// The same sequence, enforced and shadowed: the replies differ only where a call was denied
/// (`limited` 0 and `retry_after` -1 instead), and the keys end up byte for byte the same.
/// Redis 7.2+ runs both in one MULTI/EXEC, at one frozen instant, and compares the keys; on
/// earlier servers (no frozen clock) each shadowed denial is shown to leave its key exactly as
/// it was, as an enforced one does.
#[test]
fn shadow_answers_denials_as_admissions_and_stores_what_enforce_stores() {
    let server = Server::start();
    let mut c = server.client();
    let frozen = frozen_clock(&server);
    let sequences: [(&str, &[i64]); 4] = [
        ("CL.THROTTLE {k}:t 2 1 60", &[1, 1, 1, 1, 1, -1, 1, 7, 0]),
        ("CL.WINDOW {k}:w 3 60", &[1, 2, 1, 1, -2, 2, 1, 4]),
        ("CL.BUCKET {k}:b 3 1 60", &[2, 2, 1, 1, -1, 1, 9]),
        ("CL.COUNTER {k}:c 3 60", &[1, 1, 1, 1, 0, -1, 1, 5]),
    ];
    let calls: Vec<(String, i64)> =
        sequences.iter().flat_map(|(base, qs)| qs.iter().map(move |q| (format!("{base} {q}"), *q))).collect();
    let state = |c: &mut Connection, key: &str| -> (Option<Vec<u8>>, i64) {
        (redis::cmd("GET").arg(key).query(c).unwrap(), redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap())
    };
    // Shadow by the call's option, then by the node's mode.
    for by_config in [false, true] {
        let _: i64 = redis::cmd("DEL")
            .arg(&["{k}:t", "{k}:w", "{k}:b", "{k}:c", "{s}:t", "{s}:w", "{s}:b", "{s}:c"])
            .query(&mut c)
            .unwrap();
        // A TAT an hour ahead (a debt, or a clock that stepped back): every take on it is
        // refused, in both modes, and refunds pull it back alike.
        let ahead = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            + 3_600_000_000_000)
            .to_string();
        for key in ["{k}:t", "{s}:t"] {
            let _: () = redis::cmd("SET").arg(key).arg(&ahead).arg("EX").arg(7200).query(&mut c).unwrap();
        }
        let shadow_words = |words: &str| match by_config {
            true => words.replace("{k}", "{s}"),
            false => format!("{} SHADOW", words.replace("{k}", "{s}")),
        };
        let before = info(&mut c);
        let (enforced, shadowed) = if frozen {
            // One transaction: every call at the same instant.
            let mut words: Vec<String> = calls.iter().map(|(w, _)| w.clone()).collect();
            if by_config {
                words.push("CONFIG SET throttle.mode shadow".into());
            }
            words.extend(calls.iter().map(|(w, _)| shadow_words(w)));
            let replies = in_multi_mixed(&mut c, &words.iter().map(String::as_str).collect::<Vec<_>>());
            let (e, s) = replies.split_at(calls.len());
            (e.to_vec(), s[usize::from(by_config)..].to_vec())
        } else {
            let e: Vec<[i64; 5]> = calls.iter().map(|(w, _)| throttle(&mut c, w)).collect();
            if by_config {
                config_set(&mut c, "throttle.mode", "shadow").unwrap();
            }
            let mut s = Vec::new();
            for ((words, q), enforced) in calls.iter().zip(&e) {
                let words = shadow_words(words);
                let key = words.split_whitespace().nth(1).unwrap().to_string();
                let was = state(&mut c, &key);
                s.push(throttle(&mut c, &words));
                let stepped = was.0.as_deref() == Some(ahead.as_bytes());
                if enforced[0] == 1 && *q >= 0 && !stepped {
                    assert_eq!(state(&mut c, &key), was, "{words}: a shadowed denial leaves its key as it was");
                }
            }
            (e, s)
        };
        let mut denials = 0;
        for (((words, q), e), s) in calls.iter().zip(&enforced).zip(&shadowed) {
            // A refused take or check is a denial (the throttle's last check, on a TAT an hour
            // ahead, is refused); a refund never is.
            if e[0] == 1 && *q >= 0 {
                denials += 1;
                assert_eq!(*s, [0, e[1], e[2], -1, e[4]], "{words}: shadowed {s:?}, enforced {e:?}");
            } else {
                assert_eq!(s, e, "{words}: not a denial, the same reply");
            }
        }
        assert!(denials >= 8, "the sequences deny often ({denials})");
        let after = info(&mut c);
        let delta = |class: &str| -> i64 {
            ["cl_throttle", "cl_window", "cl_bucket", "cl_counter"]
                .iter()
                .map(|p| counter(&after, &format!("{p}_{class}")) - counter(&before, &format!("{p}_{class}")))
                .sum()
        };
        assert_eq!(
            (delta("denied"), delta("shadow_denied")),
            (denials, denials),
            "enforced and shadowed denials, counted apart"
        );
        assert_eq!(after["mode"], if by_config { "shadow" } else { "enforce" });
        if frozen {
            for suffix in ["t", "w", "b", "c"] {
                let (e, s) = (format!("{{k}}:{suffix}"), format!("{{s}}:{suffix}"));
                assert_eq!(state(&mut c, &s), state(&mut c, &e), "{s} holds what {e} holds");
            }
        }
        config_set(&mut c, "throttle.mode", "enforce").unwrap();
    }

    // CL.ALL: the binding limiter's reply and DETAILS read as admitted, its index kept, and a
    // denial stores nothing.
    let all = |c: &mut Connection, extra: &str| -> Vec<Value> {
        let words = format!("CL.ALL 2 {{a}}1 {{a}}2 COUNTER 5 60 COUNTER 1 60 QUANTITY 2 DETAILS {extra}");
        match call(c, &words.split_whitespace().map(str::as_bytes).collect::<Vec<_>>()).unwrap() {
            Value::Array(items) => items,
            other => panic!("{other:?}"),
        }
    };
    let (enforced, shadowed) = (all(&mut c, ""), all(&mut c, "SHADOW"));
    let ints = |v: &[Value]| {
        v[..6].iter().map(|x| redis::FromRedisValue::from_redis_value(x.clone()).unwrap()).collect::<Vec<i64>>()
    };
    assert_eq!(ints(&enforced), vec![1, 1, 1, -1, 0, 2], "never admittable: no retry time");
    assert_eq!(ints(&shadowed), vec![0, 1, 1, -1, 0, 2]);
    let details = |v: &Value| -> Vec<Vec<i64>> { redis::FromRedisValue::from_redis_value(v.clone()).unwrap() };
    assert_eq!(details(&enforced[6]), vec![vec![0, 5, 4, -1, 60], vec![1, 1, 1, -1, 0]]);
    assert_eq!(details(&shadowed[6]), vec![vec![0, 5, 4, -1, 60], vec![0, 1, 1, -1, 0]]);
    let exists: i64 = redis::cmd("EXISTS").arg(&["{a}1", "{a}2"]).query(&mut c).unwrap();
    assert_eq!(exists, 0, "a shadowed denial writes nothing, as an enforced one");
    let info = info(&mut c);
    assert_eq!((counter(&info, "cl_all_denied"), counter(&info, "cl_all_shadow_denied")), (1, 1));
}

/// Runs commands in one MULTI/EXEC; a limiter's reply as its five integers, any other reply
/// (`CONFIG SET`) as zeros.
fn in_multi_mixed(c: &mut Connection, calls: &[&str]) -> Vec<[i64; 5]> {
    let replies: Vec<Value> = in_multi_as(c, calls);
    replies
        .into_iter()
        .map(|v| match v {
            Value::Array(_) => {
                let v: Vec<i64> = redis::FromRedisValue::from_redis_value(v).unwrap();
                v.try_into().unwrap()
            }
            _ => [0; 5],
        })
        .collect()
}

#[test]
fn configs_round_trip_and_the_server_refuses_bad_values() {
    let server = Server::start();
    let mut c = server.client();
    let all: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("throttle.*").query(&mut c).unwrap();
    let all: HashMap<&str, &str> = all.chunks(2).map(|p| (p[0].as_str(), p[1].as_str())).collect();
    assert_eq!(
        all,
        HashMap::from([
            ("throttle.mode", "enforce"),
            ("throttle.max-exact-limit", "100000"),
            ("throttle.max-buckets", "10000")
        ])
    );
    for (name, value) in [
        ("throttle.mode", "shadow"),
        ("throttle.mode", "enforce"),
        ("throttle.max-exact-limit", "200000"),
        ("throttle.max-exact-limit", "1"),
        ("throttle.max-buckets", "100000"),
        ("throttle.max-buckets", "7"),
    ] {
        config_set(&mut c, name, value).unwrap();
        assert_eq!(config_get(&mut c, name), value);
    }
    assert_eq!(info(&mut c)["mode"], "enforce");
    config_set(&mut c, "throttle.mode", "SHADOW").unwrap();
    assert_eq!(config_get(&mut c, "throttle.mode"), "shadow", "enum values in any case, as the server's own");

    // Bad values: the server's own errors, as for its own configs of the same kind, and the
    // value stays.
    let native_enum = error_of(&mut c, &[b"CONFIG", b"SET", b"appendfsync", b"bogus"]);
    let ours = error_of(&mut c, &[b"CONFIG", b"SET", b"throttle.mode", b"bogus"]);
    let (head, _) = native_enum.split_once("following: ").expect("the server lists the valid values");
    assert_eq!(ours, format!("{}following: enforce, shadow", head.replace("appendfsync", "throttle.mode")));
    assert_eq!(config_get(&mut c, "throttle.mode"), "shadow");
    let native_number = error_of(&mut c, &[b"CONFIG", b"SET", b"active-defrag-cycle-min", b"0"]);
    for (name, bad, most) in [
        ("throttle.max-exact-limit", "0", "200000"),
        ("throttle.max-exact-limit", "200001", "200000"),
        ("throttle.max-buckets", "100001", "100000"),
    ] {
        let ours = error_of(&mut c, &[b"CONFIG", b"SET", name.as_bytes(), bad.as_bytes()]);
        let like = native_number.replace("active-defrag-cycle-min", name).replace("and 99 ", &format!("and {most} "));
        assert_eq!(ours, like, "{name} {bad}");
    }
    let not_a_number = error_of(&mut c, &[b"CONFIG", b"SET", b"throttle.max-buckets", b"ten"]);
    assert!(
        not_a_number.starts_with("ERR CONFIG SET failed (possibly related to argument 'throttle.max-buckets')"),
        "{not_a_number}"
    );
    assert_eq!(config_get(&mut c, "throttle.max-exact-limit"), "1");
    assert_eq!(config_get(&mut c, "throttle.max-buckets"), "7");
}

/// The caps apply to the next call, and the messages state them.
#[test]
fn the_caps_bound_calls_and_the_messages_say_so() {
    let server = Server::start();
    let mut c = server.client();
    config_set(&mut c, "throttle.max-exact-limit", "50").unwrap();
    config_set(&mut c, "throttle.max-buckets", "100").unwrap();
    assert_eq!(throttle(&mut c, "CL.WINDOW w 50 60"), [0, 50, 49, -1, 60]);
    let e = error_of(&mut c, &[b"CL.WINDOW", b"w2", b"51", b"60"]);
    assert_eq!(e, "ERR limit must be an integer from 1 to 50 (use PRECISION for larger limits)");
    let e = error_of(&mut c, &[b"CL.WINDOW", b"w3", b"5", b"60000", b"MS", b"PRECISION", b"500"]);
    assert_eq!(e, "ERR precision must be an integer from 600 to 60000 (milliseconds)");
    assert_eq!(throttle(&mut c, "CL.WINDOW w3 5 60000 MS PRECISION 600")[0], 0);
    let e = error_of(&mut c, &[b"CL.ALL", b"1", b"w4", b"WINDOW", b"51", b"60"]);
    assert_eq!(e, "ERR limiter 1: limit must be an integer from 1 to 50 (use PRECISION for larger limits)");
    // A live key made under a larger cap stays readable when the cap is lowered.
    config_set(&mut c, "throttle.max-buckets", "100000").unwrap();
    assert_eq!(throttle(&mut c, "CL.WINDOW ring 5 100000 PRECISION 1")[0], 0);
    config_set(&mut c, "throttle.max-buckets", "10").unwrap();
    assert_eq!(
        throttle(&mut c, "CL.WINDOW ring 5 100 PRECISION 10")[..3],
        [0, 5, 3],
        "the ring regrouped, its unit kept"
    );
}

/// The ceilings of the caps bound the longest call: at both ceilings at once, the largest
/// single-limiter calls (a full exact log written at once, appended to, refunded; a whole ring
/// written and regrouped) take a few milliseconds, and the largest CL.ALL (16 such logs) a
/// small multiple of that, never long enough to stall the server. This is the measurement
/// behind the ceilings (docs/src/guides/operating.md, "Configs").
#[test]
fn the_largest_calls_the_ceilings_allow_stay_short() {
    let server = Server::start();
    let mut c = server.client();
    config_set(&mut c, "throttle.max-exact-limit", "200000").unwrap();
    config_set(&mut c, "throttle.max-buckets", "100000").unwrap();
    let sixteen_logs = {
        let keys: Vec<String> = (0..16).map(|i| format!("{{r}}{i}")).collect();
        format!("CL.ALL 16 {} {}", keys.join(" "), "WINDOW 200000 60 QUANTITY 200000 ".repeat(16))
    };
    let mut single = Vec::new();
    for words in [
        "CL.WINDOW big 200000 60 200000",
        "CL.WINDOW big 200000 60 1",
        "CL.WINDOW big 200000 60 -200000",
        "CL.WINDOW big2 200000 60000 MS 199999",
        "CL.WINDOW ring 1000 100000 PRECISION 1 1",
        "CL.WINDOW ring 1000 99999 PRECISION 1 1",
        "CL.WINDOW ring 1000 99999 PRECISION 1 1",
    ] {
        single.push((timed(&mut c, words), words));
    }
    let all = timed(&mut c, &sixteen_logs);
    let worst = single.iter().max().unwrap();
    eprintln!("largest calls at the ceilings (round trip): {single:?}; CL.ALL of 16 full logs: {all:?}");
    let big: i64 = redis::cmd("STRLEN").arg("big2").query(&mut c).unwrap();
    assert!(big <= 8 + 16 * 200_000, "{big}");
    assert!(worst.0 < Duration::from_millis(100), "{worst:?}");
    assert!(all < Duration::from_millis(1000), "{all:?}");
    assert!(try_throttle(&mut c, "CL.WINDOW small 5 60").is_ok(), "the server serves on");
}

/// How long a call takes, round trip included.
fn timed(c: &mut Connection, words: &str) -> Duration {
    let t = Instant::now();
    let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
    call(c, &args).unwrap_or_else(|e| panic!("{words}: {e}"));
    t.elapsed()
}

/// CL.PACE and CL.ACQUIRE follow shadow mode too (by the option and by the config): a refusal is
/// answered as an admission (a pacer's `wait` 0: act now; no lease taken), nothing is stored
/// that enforcing would not store, and it counts as a shadow denial.
#[test]
fn pacing_and_leases_follow_shadow_mode() {
    let server = Server::start();
    let mut c = server.client();
    let get = |c: &mut Connection, key: &str| -> Option<Vec<u8>> { redis::cmd("GET").arg(key).query(c).unwrap() };
    assert_eq!(throttle(&mut c, "CL.PACE p 1 60")[..2], [0, 0], "the first slot is now");
    assert_eq!(throttle(&mut c, "CL.ACQUIRE l 1 60 a")[0], 0);
    let tat = get(&mut c, "p");
    for shadow_by_config in [false, true] {
        let option = if shadow_by_config { "" } else { " SHADOW" };
        if shadow_by_config {
            config_set(&mut c, "throttle.mode", "shadow").unwrap();
        }
        let before = info(&mut c);
        // Enforced, this refusal's slot (a minute away) is beyond MAXWAIT 0.
        let pace = throttle(&mut c, &format!("CL.PACE p 1 60 MAXWAIT 0{option}"));
        assert_eq!(pace[..2], [0, 0], "answered as admitted, to act now: {pace:?}");
        assert_eq!(pace[3], -1);
        assert_eq!(get(&mut c, "p"), tat, "nothing reserved");
        let lease = throttle(&mut c, &format!("CL.ACQUIRE l 1 60 b{option}"));
        assert_eq!((lease[0], lease[3]), (0, -1), "answered as admitted: {lease:?}");
        let holders: i64 = redis::cmd("ZCARD").arg("l").query(&mut c).unwrap();
        assert_eq!(holders, 1, "no lease taken for b");
        let released: i64 = redis::cmd("CL.RELEASE").arg("l").arg("b").query(&mut c).unwrap();
        assert_eq!(released, 0, "b holds nothing to release");
        let after = info(&mut c);
        for command in ["cl_pace", "cl_acquire"] {
            let field = format!("{command}_shadow_denied");
            assert_eq!(counter(&after, &field) - counter(&before, &field), 1, "{field}");
        }
    }
    config_set(&mut c, "throttle.mode", "enforce").unwrap();
    assert_eq!(throttle(&mut c, "CL.PACE p 1 60 MAXWAIT 0")[..2], [1, -1], "enforced again");
    assert_eq!(throttle(&mut c, "CL.ACQUIRE l 1 60 b")[0], 1);
}

/// CL.PACE, CL.ACQUIRE and CL.RELEASE in INFO, CL.TOP and the `throttled` event: a scripted
/// sequence of every outcome each can have, counted exactly, by the option and by the config.
#[test]
fn pacing_and_leases_count_every_outcome_exactly() {
    let server = Server::start();
    let mut c = server.client();
    config_set(&mut c, "notify-keyspace-events", "Ed").unwrap();
    let events = psubscribe(&server, "__keyevent@0__:throttled");
    let release = |c: &mut Connection, key: &str, id: &str| -> redis::RedisResult<i64> {
        redis::cmd("CL.RELEASE").arg(key).arg(id).query(c)
    };
    // (call, limited as answered, what it counts as); the slots are a minute apart.
    let calls: [(&str, Option<i64>, &str); 13] = [
        ("CL.PACE p 1 60", Some(0), "admitted"),
        ("CL.PACE p 1 60 MAXWAIT 0", Some(1), "denied"),
        ("CL.PACE p 1 60 MAXWAIT 0 SHADOW", Some(0), "shadow_denied"),
        ("CL.PACE p 1 60 QUANTITY 0", Some(0), "peeks"),
        // A peek beyond MAXWAIT reads as refused, but it is no denial (no event, not in CL.TOP).
        ("CL.PACE p 1 60 QUANTITY 0 MAXWAIT 0", Some(1), "peeks"),
        ("CL.PACE p 1 60 QUANTITY -1", None, "errors"),
        ("CL.ACQUIRE l 1 60 a", Some(0), "admitted"),
        ("CL.ACQUIRE l 1 60 a", Some(0), "admitted"),
        ("CL.ACQUIRE l 1 60 b", Some(1), "denied"),
        ("CL.ACQUIRE l 1 60 b SHADOW", Some(0), "shadow_denied"),
        ("CL.ACQUIRE l 0 60 b", None, "errors"),
        ("CL.ACQUIRE p 1 60 b", None, "errors"),
        ("CL.PACE l 1 60", None, "errors"),
    ];
    let mut want: HashMap<String, i64> = HashMap::new();
    for (words, limited, class) in calls {
        let command = words.split_whitespace().next().unwrap().to_lowercase().replace('.', "_");
        match (try_throttle(&mut c, words), limited) {
            (Ok(reply), Some(limited)) => assert_eq!(reply[0], limited, "{words}: {reply:?}"),
            (Err(_), None) => {}
            (got, _) => panic!("{words}: {got:?}"),
        }
        *want.entry(format!("{command}_{class}")).or_default() += 1;
    }
    assert_eq!(release(&mut c, "l", "a").unwrap(), 1);
    assert_eq!(release(&mut c, "l", "a").unwrap(), 0);
    assert!(release(&mut c, "p", "a").is_err(), "WRONGTYPE");
    *want.entry("cl_release_refunds".into()).or_default() += 2;
    *want.entry("cl_release_errors".into()).or_default() += 1;
    // Shadow mode by the config: a refused pacer and a full lease set answer as admitted.
    config_set(&mut c, "throttle.mode", "shadow").unwrap();
    assert_eq!(throttle(&mut c, "CL.PACE p 1 60 MAXWAIT 0")[..2], [0, 0]);
    assert_eq!(throttle(&mut c, "CL.ACQUIRE l 1 60 c")[0], 0, "a free slot: admitted");
    assert_eq!(throttle(&mut c, "CL.ACQUIRE l 1 60 d")[..4], [0, 1, 0, -1], "full: answered as admitted");
    config_set(&mut c, "throttle.mode", "enforce").unwrap();
    for field in ["cl_pace_shadow_denied", "cl_acquire_admitted", "cl_acquire_shadow_denied"] {
        *want.entry(field.into()).or_default() += 1;
    }

    let info = info(&mut c);
    for command in ["cl_pace", "cl_acquire", "cl_release"] {
        let mut calls = 0;
        for class in ["admitted", "denied", "shadow_denied", "peeks", "refunds", "errors"] {
            let field = format!("{command}_{class}");
            let n = want.get(&field).copied().unwrap_or(0);
            calls += n;
            assert_eq!(counter(&info, &field), n, "{field}");
        }
        assert_eq!(counter(&info, &format!("{command}_calls")), calls, "{command}_calls");
    }
    // Every denial, enforced or shadowed, is in CL.TOP and announced; ties listed by key.
    assert_eq!(top(&mut c, ""), vec![(b"l".to_vec(), 3), (b"p".to_vec(), 3)]);
    assert_eq!(counter(&info, "top_denials"), 6);
    let keys: Vec<Vec<u8>> = drain(&events).into_iter().map(|(_, key)| key).collect();
    let order: [&[u8]; 6] = [b"p", b"p", b"l", b"l", b"p", b"l"];
    assert_eq!(keys, order.map(<[u8]>::to_vec));
}
