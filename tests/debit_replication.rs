//! `DEBIT` (issue 41) and replication, on the module and on the Functions twin alike: a
//! module-less replica and an AOF reload hold the same values and expiries as the master after
//! a random mix of takes, debits and bounded refunds; `SHADOW` debits write and replicate
//! nothing. (The rest of DEBIT is in `debit.rs`.)
//!
//! skip containers: needs replicas and an AOF replay.

mod harness;

use std::time::Duration;

use harness::{Options, Server, pexpiretime, snapshot, throttle, wait_until};
use redis::Value;

fn module() -> bool {
    harness::twin::backend().is_none()
}

#[test]
fn debits_replicate_to_a_module_less_replica_and_replay_from_the_aof() {
    let master =
        Server::with(Options::default().arg("--appendonly yes --appendfsync always --enable-debug-command local"));
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    let mut seed = 41u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for i in 0..600 {
        let (k, q, debit) = (next(12), next(9), next(3) > 0);
        let tail = if debit { " DEBIT" } else { "" };
        // A single limiter's words before its quantity, and after it (CL.QUOTA's is an option).
        let single = match i % 7 {
            0 => Some((format!("CL.THROTTLE r:t:{k} 4 3 600"), "")),
            1 => Some((format!("CL.WINDOW r:w:{k} 6 600"), "")),
            2 => Some((format!("CL.WINDOW r:p:{k} 6 600"), " PRECISION 60")),
            3 => Some((format!("CL.BUCKET r:b:{k} 6 2 300"), "")),
            4 => Some((format!("CL.COUNTER r:c:{k} 6 600"), "")),
            5 => Some((format!("CL.QUOTA r:q:{k} 6 PER DAY QUANTITY"), "")),
            _ => None,
        };
        let words = match &single {
            Some((head, options)) => format!("{head} {q}{options}{tail}"),
            None => format!(
                "CL.ALL 3 r:t:{k} r:b:{k} r:c:{k} THROTTLE 4 3 600 QUANTITY {q} BUCKET 6 2 300 QUANTITY {} COUNTER 6 600 QUANTITY 1{tail}",
                next(4)
            ),
        };
        let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
        harness::call(&mut c, &args).unwrap_or_else(|e| panic!("{words}: {e}"));
        // Now and then a refund of what was just debited, bounded by the expiry it left.
        if let Some((head, options)) = single.filter(|_| debit && q > 0 && next(3) == 0) {
            let at = pexpiretime(&mut c, words.split_whitespace().nth(1).unwrap());
            throttle(&mut c, &format!("{head} -{q}{options} HELD {at}"));
        }
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    let on_master = snapshot(&mut c);
    assert!(on_master.len() > 40, "many limiters: {}", on_master.len());
    // Debits left debt: TATs past the tolerance, counts past the limit, buckets below empty.
    let over = on_master
        .iter()
        .filter(|(k, v, _)| k.starts_with(b"r:c:") && String::from_utf8_lossy(v).parse::<i64>().unwrap_or(0) > 6)
        .count();
    assert!(over > 0, "some counter was overdrawn");
    wait_until("the replica to hold what the master holds", Duration::from_secs(10), || {
        snapshot(&mut replica.client()) == on_master
    });
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut c).unwrap();
    assert_eq!(snapshot(&mut c), on_master, "AOF replay == master before");
}

#[test]
fn shadow_debits_write_and_replicate_nothing() {
    let master = Server::with(Options::default().arg("--repl-ping-replica-period 3600"));
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    throttle(&mut c, "CL.COUNTER warm 5 600");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    let offset = |s: &Server| -> String {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut s.client()).unwrap();
        info.lines().find_map(|l| l.strip_prefix("master_repl_offset:")).unwrap().trim().to_string()
    };
    let before = (offset(&master), snapshot(&mut c));
    for words in [
        "CL.THROTTLE s1 4 1 60 8 DEBIT SHADOW",
        "CL.WINDOW s2 5 60 SHADOW 8 DEBIT",
        "CL.WINDOW s3 5 60 8 DEBIT SHADOW PRECISION 6",
        "CL.BUCKET s4 5 1 60 8 DEBIT SHADOW",
        "CL.COUNTER s5 5 60 8 SHADOW DEBIT",
        "CL.COUNTER warm 5 600 7 DEBIT SHADOW",
        "CL.QUOTA s6 5 PER DAY QUANTITY 8 DEBIT SHADOW",
    ] {
        // An overdraw answered as an admission (limited 0, no retry time), nothing written.
        let r = throttle(&mut c, words);
        assert_eq!((r[0], r[1], r[2], r[3]), (0, 5, 0, -1), "{words}");
    }
    let args: Vec<&[u8]> = "CL.ALL 2 {a}1 {a}2 COUNTER 5 60 QUANTITY 8 THROTTLE 4 1 60 QUANTITY 2 DEBIT SHADOW DETAILS"
        .split_whitespace()
        .map(str::as_bytes)
        .collect();
    let Value::Array(items) = harness::call(&mut c, &args).unwrap() else { panic!() };
    let binding: Vec<i64> = items[..6].iter().map(|v| redis::from_redis_value(v.clone()).unwrap()).collect();
    assert_eq!((binding[0], binding[3], binding[5]), (0, -1, 1), "{binding:?}");
    assert_eq!((offset(&master), snapshot(&mut c)), before, "SHADOW debits write and replicate nothing");
    assert_eq!(snapshot(&mut replica.client()), before.1);
    if module() {
        let info: String = redis::cmd("INFO").arg("throttle").query(&mut c).unwrap();
        let field = |name: &str| -> i64 {
            info.lines().find_map(|l| l.strip_prefix(&format!("throttle_{name}:"))).unwrap().trim().parse().unwrap()
        };
        assert_eq!(field("cl_counter_shadow_denied"), 2, "an overdrawn SHADOW debit: a shadow denial");
        assert_eq!(field("cl_counter_debits"), 2);
        assert_eq!(field("cl_all_shadow_denied"), 1);
    }
}
