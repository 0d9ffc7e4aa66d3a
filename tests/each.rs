//! CL.EACH against a real server: each limiter admitted or denied on its own at one instant, a
//! denied one left byte for byte, the admitted ones' writes replicated in one MULTI/EXEC to a
//! module-less replica and the AOF (both end identical), errors write nothing, the counters and
//! the `throttled` event per limiter (the module's). (The cluster: `tests/cluster.rs`.)
//!
//! skip containers: needs module-less replicas and an AOF replay.

mod harness;

use std::time::Duration;

use harness::{Options, Server, snapshot, wait_until};

type Replies = Vec<Vec<i64>>;

/// Whether the module answers (else the Functions twin: INFO throttle is the module's).
fn module() -> bool {
    harness::twin::backend().is_none()
}

fn each(c: &mut redis::Connection, words: &str) -> Replies {
    let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
    harness::command(&args).query(c).unwrap_or_else(|e| panic!("{words}: {e}"))
}

fn commandstat(c: &mut redis::Connection, command: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn each_limiter_is_decided_on_its_own_and_replicated_as_one_transaction() {
    let master =
        Server::with(Options::default().arg("--appendonly yes --appendfsync always --enable-debug-command local"));
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    let mut r = replica.client();

    // A counter of 1 a minute is used up; a throttle and a window still admit.
    assert_eq!(harness::throttle(&mut c, "CL.COUNTER u:{7}:d 1 60")[0], 0);
    let denied_before = (harness::get_bytes(&mut c, "u:{7}:d"), harness::pexpiretime(&mut c, "u:{7}:d"));
    let (multi, exec) = (commandstat(&mut r, "multi"), commandstat(&mut r, "exec"));
    let replies =
        each(&mut c, "CL.EACH 3 u:{7}:s u:{7}:d u:{7}:w THROTTLE 9 10 60 COUNTER 1 60 WINDOW 5 60 QUANTITY 2");
    assert_eq!(replies.len(), 3);
    assert_eq!(replies[0], [0, 10, 9, -1, 6], "the throttle admits");
    assert_eq!(replies[1][..4], [1, 1, 0, replies[1][3]], "the counter denies");
    assert!(replies[1][3] > 0 && replies[1][3] <= 60, "{:?}", replies[1]);
    assert_eq!(replies[2][..4], [0, 5, 3, -1], "the window admits two");
    assert_eq!(
        (harness::get_bytes(&mut c, "u:{7}:d"), harness::pexpiretime(&mut c, "u:{7}:d")),
        denied_before,
        "the denied limiter's key is left byte for byte"
    );
    // Two writes: one MULTI/EXEC on the replica.
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    wait_until("the transaction on the replica", Duration::from_secs(10), || commandstat(&mut r, "exec") == exec + 1);
    assert_eq!(commandstat(&mut r, "multi"), multi + 1, "the admitted writes replicate in one MULTI/EXEC");

    // Every call of the grammar, many times: the replica and the AOF hold what the master holds.
    for i in 0..300 {
        let q = i % 5 - 1;
        let words = format!(
            "CL.EACH 4 v:{{{u}}}:t v:{{{u}}}:c v:{{{u}}}:b v:{{{u}}}:q THROTTLE 3 5 600 QUANTITY {q} COUNTER 4 600 BUCKET 5 1 300 QUANTITY {q} QUOTA 6 PER DAY{ms}",
            u = i % 7,
            ms = if i % 3 == 0 { " MS" } else { "" },
        );
        let words = if i % 3 == 0 { words.replace(" 600", " 600000").replace(" 300", " 300000") } else { words };
        each(&mut c, &words);
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    let on_master = snapshot(&mut c);
    wait_until("the replica to hold the master's keys", Duration::from_secs(10), || snapshot(&mut r) == on_master);
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut c).unwrap();
    assert_eq!(snapshot(&mut c), on_master, "an AOF replay holds the same values and expiries");
}

#[test]
fn errors_write_nothing_and_each_limiter_counts() {
    let server = Server::start();
    let mut c = server.client();
    let _: () = redis::cmd("HSET").arg("e:{1}:hash").arg("f").arg("v").query(&mut c).unwrap();
    let before = snapshot(&mut c);
    for (words, error) in [
        ("CL.EACH 2 e:{1}:a e:{1}:hash COUNTER 5 60 COUNTER 5 60", "WRONGTYPE"),
        ("CL.EACH 2 e:{1}:a e:{1}:b COUNTER 5 60 WINDOW 0 60", "ERR limiter 2: limit must be"),
        ("CL.EACH 1 e:{1}:a COUNTER 5 60 DETAILS", "ERR syntax error"),
        ("CL.EACH 2 e:{1}:a e:{1}:a COUNTER 5 60 COUNTER 5 60", "ERR limiters 1 and 2 name the same key"),
        ("CL.EACH 0 e:{1}:a COUNTER 5 60", "ERR numkeys must be"),
        ("CL.EACH 1", "ERR wrong number of arguments"),
    ] {
        if !module() && words == "CL.EACH 1" {
            continue; // (FCALL checks numkeys before the function runs: its own error, tests/twin.rs)
        }
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        let e = harness::error_of(&mut c, &args);
        assert!(e.starts_with(error), "{words}: {e}");
        assert_eq!(snapshot(&mut c), before, "{words}: nothing written");
    }
    // An invalid state on one key: the call's error, and the valid one is not written either.
    let _: () = redis::cmd("SET").arg("e:{1}:bad").arg("not a count").query(&mut c).unwrap();
    let e = harness::error_of(
        &mut c,
        &[b"CL.EACH", b"2", b"e:{1}:a", b"e:{1}:bad", b"COUNTER", b"5", b"60", b"COUNTER", b"5", b"60"],
    );
    assert!(e.starts_with("ERR limiter 2: "), "{e}");
    let exists: i64 = redis::cmd("EXISTS").arg("e:{1}:a").query(&mut c).unwrap();
    assert_eq!(exists, 0, "an error of one limiter writes nothing for the others");

    // Each limiter counts as a call of its own (INFO throttle), a denial as a single command's;
    // an error once per call (six above: the wrong arity is the server's own).
    let replies =
        each(&mut c, "CL.EACH 3 n:{1}:a n:{1}:b n:{1}:c COUNTER 1 60 COUNTER 1 60 QUANTITY 0 COUNTER 1 60 QUANTITY 2");
    assert_eq!(replies.iter().map(|r| r[0]).collect::<Vec<_>>(), [0, 0, 1]);
    let shadowed = each(&mut c, "CL.EACH 2 n:{1}:a n:{1}:d COUNTER 1 60 COUNTER 1 60 SHADOW");
    assert_eq!(shadowed[0][..4], [0, 1, 0, -1], "SHADOW answers a denial as an admission");
    assert_eq!(shadowed[1][..4], [0, 1, 0, -1]);
    if !module() {
        return; // (INFO throttle is the module's)
    }
    let info: String = redis::cmd("INFO").arg("throttle").query(&mut c).unwrap();
    let field = |name: &str| -> String {
        info.lines().find_map(|l| l.strip_prefix(&format!("throttle_cl_each_{name}:"))).unwrap_or("").trim().to_string()
    };
    assert_eq!(
        ["calls", "admitted", "denied", "shadow_denied", "peeks", "errors"].map(field),
        ["11", "2", "1", "1", "1", "6"].map(String::from)
    );
}

/// `DEBIT` (DEBIT.md): every limiter of the call counts its quantity, the ones that overdraw too
/// (`limited` 1, later takes refused until repaid), each written and replicated; with `SHADOW`
/// nothing is written; `debits` counts each charged limiter.
#[test]
fn a_debit_charges_every_limiter_and_shadow_writes_nothing() {
    let master = Server::with(Options::default().arg("--appendonly yes --enable-debug-command local"));
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    let tokens = "CL.EACH 2 llm:{t}:day llm:{t}:min COUNTER 1000 86400 QUANTITY 600 COUNTER 500 60 QUANTITY 600 DEBIT";
    let replies = each(&mut c, tokens);
    assert_eq!(replies[0][..4], [0, 1000, 400, -1], "the units fitted the day");
    assert_eq!(replies[1][..3], [1, 500, 0], "they overdrew the minute");
    let counted: i64 = redis::cmd("GET").arg("llm:{t}:min").query(&mut c).unwrap();
    assert_eq!(counted, 600, "an overdraw is counted whatever the limit says");
    let next = each(&mut c, "CL.EACH 2 llm:{t}:day llm:{t}:min COUNTER 1000 86400 COUNTER 500 60");
    assert_eq!((next[0][0], next[1][0]), (0, 1), "a take is refused until the minute repays the overdraft");
    // SHADOW with DEBIT: answered as admitted, nothing written.
    let before = snapshot(&mut c);
    let shadowed = each(
        &mut c,
        "CL.EACH 2 llm:{t}:day llm:{t}:min COUNTER 1000 86400 QUANTITY 5 COUNTER 500 60 QUANTITY 5 DEBIT SHADOW",
    );
    assert!(shadowed.iter().all(|r| r[0] == 0 && r[3] == -1), "{shadowed:?}");
    assert_eq!(snapshot(&mut c), before, "a shadow debit writes nothing");
    let e = harness::error_of(&mut c, &[b"CL.EACH", b"1", b"x", b"COUNTER", b"5", b"60", b"QUANTITY", b"-1", b"DEBIT"]);
    assert_eq!(e, "ERR limiter 1: DEBIT takes a quantity of 0 or more (a refund is a negative quantity without DEBIT)");
    if module() {
        let info: String = redis::cmd("INFO").arg("throttle").query(&mut c).unwrap();
        let debits = info.lines().find_map(|l| l.strip_prefix("throttle_cl_each_debits:")).map(str::trim);
        assert_eq!(debits, Some("4"), "two debits of units, then two shadowed ones");
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    let on_master = snapshot(&mut c);
    let mut r = replica.client();
    wait_until("the replica to hold the debits", Duration::from_secs(10), || snapshot(&mut r) == on_master);
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut c).unwrap();
    assert_eq!(snapshot(&mut c), on_master, "an AOF replay holds the debits");
}

/// A denied limiter writes what its single command's denial writes: nothing, but for a key
/// stamped further ahead than its algorithm leaves (a count that lost its expiry), which both
/// store as they read it, so that it recovers from that call on.
#[test]
fn a_denied_limiter_writes_what_its_single_commands_denial_writes() {
    let server = Server::start();
    let mut c = server.client();
    let full = harness::throttle(&mut c, "CL.COUNTER r:{1}:full 5 60 5");
    assert_eq!(full[0], 0, "admitted");
    let before = snapshot(&mut c);
    let denied = each(&mut c, "CL.EACH 1 r:{1}:full COUNTER 5 60");
    assert_eq!(denied[0][0], 1, "denied");
    assert_eq!(snapshot(&mut c), before, "a denial of a well-stamped key writes nothing");

    for key in ["r:{1}:single", "r:{1}:each"] {
        let _: () = redis::cmd("SET").arg(key).arg("5").query(&mut c).unwrap();
    }
    let single = harness::throttle(&mut c, "CL.COUNTER r:{1}:single 5 60");
    let each = each(&mut c, "CL.EACH 1 r:{1}:each COUNTER 5 60");
    assert_eq!(each[0][..4], single[..4], "the same denial");
    assert_eq!(harness::get_bytes(&mut c, "r:{1}:each"), harness::get_bytes(&mut c, "r:{1}:single"));
    let (single_at, each_at) =
        (harness::pexpiretime(&mut c, "r:{1}:single"), harness::pexpiretime(&mut c, "r:{1}:each"));
    assert!(single_at > 0 && each_at > 0, "both stored the close they read: {single_at} {each_at}");
    assert!((each_at - single_at).abs() <= 1_000, "one window from each call: {single_at} {each_at}");
}
