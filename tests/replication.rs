//! Effects replication: a replica without the module and an AOF replay end byte-identical
//! to the master (values and absolute expiry times), because the module propagates plain
//! commands with absolute times and nothing for calls that change nothing.
//!
//! skip containers: needs replicas and an AOF replay.

mod harness;

use harness::{Options, Server, Snapshot, snapshot, wait_until};
use rand::Rng;
use std::time::Duration;

/// Random calls over a small set of keys: allowed, denied, peeks, refunds, both units.
fn random_calls(c: &mut redis::Connection, n: usize, commands: &[&str]) {
    let mut rng = rand::rng();
    for _ in 0..n {
        let command = commands[rng.random_range(0..commands.len())];
        let key = format!("rl:{}:{}", command.to_lowercase(), rng.random_range(0..40));
        let quantity = rng.random_range(-3i64..6);
        let unit = if rng.random_bool(0.3) { " MS" } else { "" };
        // Long periods: nothing expires while the test compares copies. With MS every time
        // argument is in milliseconds, so it is scaled to the same durations.
        let t = |secs: i64| if unit.is_empty() { secs } else { secs * 1000 };
        let words = match command {
            "CL.THROTTLE" => format!("CL.THROTTLE {key} 5 3 {} {quantity}{unit}", t(600)),
            "CL.WINDOW" => format!("CL.WINDOW {key} 12 {} {quantity}{unit}", t(600)),
            "CL.WINDOW-P" => format!("CL.WINDOW {key} 12 {} {quantity} PRECISION {}{unit}", t(600), t(60)),
            "CL.BUCKET" => format!("CL.BUCKET {key} 8 2 {} {quantity}{unit}", t(300)),
            "CL.COUNTER" => format!("CL.COUNTER {key} 9 {} {quantity}{unit}", t(600)),
            // A pacer (one per 200 s) on its own keys (a form of its own: CL.THROTTLE's keys
            // are WRONGTYPE to it).
            "CL.PACE" => {
                format!("CL.PACE {key} 3 {} MAXWAIT {} QUANTITY {}{unit}", t(600), t(1200), quantity.clamp(0, 3))
            }
            // Leases of 1 s (they expire while the test runs: the calls prune them) or 600 s,
            // released at times; every lease key also holds a 600 s anchor (see below), so no
            // key expires while the copies are compared.
            "CL.ACQUIRE" => {
                let lease = if rng.random_bool(0.5) { t(1) } else { t(600) };
                format!("CL.ACQUIRE {key} 5 {lease} w{}{unit}", rng.random_range(0..8))
            }
            "CL.RELEASE" => {
                let words =
                    format!("CL.RELEASE {} w{}", key.replace("cl.release", "cl.acquire"), rng.random_range(0..8));
                let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
                harness::call(c, &args).unwrap_or_else(|e| panic!("{words}: {e}"));
                continue;
            }
            "CL.ALL" | "CL.EACH" => {
                // Two or three limiters of one user, of any algorithms, sharing their keys
                // with the single commands' (the same stored forms): all or nothing (CL.ALL),
                // or each on its own (CL.EACH).
                let user = rng.random_range(0..40);
                let n = rng.random_range(2..=3);
                let specs = [
                    (format!("rl:cl.throttle:{user}"), format!("THROTTLE 5 3 {}", t(600))),
                    (format!("rl:cl.window:{user}"), format!("WINDOW 12 {}", t(600))),
                    (format!("rl:cl.window-p:{user}"), format!("WINDOW 12 {} PRECISION {}", t(600), t(60))),
                    (format!("rl:cl.bucket:{user}"), format!("BUCKET 8 2 {}", t(300))),
                    (format!("rl:cl.counter:{user}"), format!("COUNTER 9 {}", t(600))),
                ];
                let first = rng.random_range(0..specs.len() - n + 1);
                let chosen = &specs[first..first + n];
                let keys: Vec<&str> = chosen.iter().map(|(k, _)| k.as_str()).collect();
                // A fifth of them charge with DEBIT (quantities of 0 or more, overdrawing at times).
                let debit = rng.random_bool(0.2);
                let specs: Vec<String> = chosen
                    .iter()
                    .map(|(_, s)| {
                        let q = if debit { rng.random_range(0i64..8) } else { rng.random_range(-2i64..4) };
                        format!("{s} QUANTITY {q}")
                    })
                    .collect();
                let debit = if debit { " DEBIT" } else { "" };
                let words = format!("{command} {n} {} {}{unit}{debit}", keys.join(" "), specs.join(" "));
                let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
                harness::call(c, &args).unwrap_or_else(|e| panic!("{words}: {e}"));
                continue;
            }
            other => panic!("unknown command {other}"),
        };
        // Half the refunds of the single limiters are bounded (`HELD t`, the key's expiry now:
        // what a client reads with its taking call), so their effects replicate too.
        let limiter = !matches!(command, "CL.PACE" | "CL.ACQUIRE");
        let held = (quantity < 0 && limiter && rng.random_bool(0.5))
            .then(|| harness::pexpiretime(c, &key))
            .filter(|&at| at > 0);
        let words = match held {
            Some(at) => format!("{words} HELD {at}"),
            None => words,
        };
        let _ = harness::try_throttle(c, &words).unwrap_or_else(|e| panic!("{words}: {e}"));
    }
}

fn wait_for_replica(master: &Server, replica: &Server) {
    let mut m = master.client();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut m).unwrap();
    assert_eq!(acked, 1, "the replica acknowledged the writes");
    wait_until("the replica's offset to reach the master's", Duration::from_secs(10), || {
        let offset = |s: &Server| {
            let info: String = redis::cmd("INFO").arg("replication").query(&mut s.client()).unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("master_repl_offset:"))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(-1)
        };
        offset(master) == offset(replica)
    });
}

#[test]
fn module_less_replica_and_aof_replay_are_byte_identical() {
    let master =
        Server::with(Options::default().arg("--appendonly yes --appendfsync always --enable-debug-command local"));
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();

    // CL.PACE and the leases are the module's only (the Functions twin has the other five).
    let module = harness::twin::backend().is_none();
    if module {
        for i in 0..40 {
            harness::throttle(&mut c, &format!("CL.ACQUIRE rl:cl.acquire:{i} 5 600 anchor"));
        }
    }
    let commands: &[&str] = match module {
        true => &[
            "CL.THROTTLE",
            "CL.WINDOW",
            "CL.WINDOW-P",
            "CL.BUCKET",
            "CL.COUNTER",
            "CL.ALL",
            "CL.EACH",
            "CL.PACE",
            "CL.ACQUIRE",
            "CL.ACQUIRE",
            "CL.RELEASE",
        ],
        false => &["CL.THROTTLE", "CL.WINDOW", "CL.WINDOW-P", "CL.BUCKET", "CL.COUNTER", "CL.ALL"],
    };
    random_calls(&mut c, 5000, commands);
    wait_for_replica(&master, &replica);

    let on_master = snapshot(&mut c);
    assert!(on_master.len() > 10, "the test exercised many limiters");
    assert!(on_master.iter().all(|(_, _, at)| *at > 0), "every limiter key has an expiry");
    assert_eq!(snapshot(&mut replica.client()), on_master, "replica == master");
    if module {
        let zsets = on_master.iter().filter(|(k, _, _)| k.starts_with(b"rl:cl.acquire:")).count();
        assert_eq!(zsets, 40, "every lease set is compared");
        // The replica applied plain sorted-set commands: leases taken, and released or pruned.
        for command in ["zadd", "zrem", "pexpireat"] {
            let stats = replica.info_field("commandstats", &format!("cmdstat_{command}"));
            assert!(
                stats.starts_with("calls=") && !stats.starts_with("calls=0,"),
                "{command} on the replica: {stats:?}"
            );
        }
    }

    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut c).unwrap();
    assert_eq!(snapshot(&mut c), on_master, "AOF replay == master before");
}

#[test]
fn calls_that_change_nothing_propagate_nothing() {
    // No periodic PINGs to the replica during the test: they would move the offset too.
    let master = Server::with(Options::default().arg("--repl-ping-replica-period 3600"));
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    let module = harness::twin::backend().is_none();
    harness::throttle(&mut c, "CL.THROTTLE k 0 1 600");
    if module {
        harness::throttle(&mut c, "CL.PACE p 1 600");
        harness::throttle(&mut c, "CL.ACQUIRE l 1 600 holder");
    }
    wait_for_replica(&master, &replica);
    let offset = || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut master.client()).unwrap();
        info.lines().find_map(|l| l.strip_prefix("master_repl_offset:")).unwrap().trim().to_string()
    };
    let before = offset();
    assert_eq!(harness::throttle(&mut c, "CL.THROTTLE k 0 1 600")[0], 1, "denied");
    harness::throttle(&mut c, "CL.THROTTLE k 0 1 600 0");
    harness::throttle(&mut c, "CL.THROTTLE other 0 1 600 0");
    // A CL.ALL denied by one limiter writes nothing for the others either.
    let denied: Vec<i64> =
        harness::command(&[b"CL.ALL", b"2", b"fresh", b"k", b"COUNTER", b"5", b"600", b"THROTTLE", b"0", b"1", b"600"])
            .query(&mut c)
            .unwrap();
    assert_eq!((denied[0], denied[5]), (1, 2));
    if module {
        // A pacer refusing (the slot is beyond MAXWAIT) or peeking; a full lease set refusing;
        // a release by an id that holds nothing.
        assert_eq!(harness::throttle(&mut c, "CL.PACE p 1 600 MAXWAIT 10")[0], 1);
        assert_eq!(harness::throttle(&mut c, "CL.PACE p 1 600 QUANTITY 0")[0], 0);
        assert_eq!(harness::throttle(&mut c, "CL.ACQUIRE l 1 600 other")[0], 1);
        let released: i64 = redis::cmd("CL.RELEASE").arg("l").arg("other").query(&mut c).unwrap();
        assert_eq!(released, 0);
    }
    assert_eq!(offset(), before, "denials and peeks add nothing to the replication stream");
    let exists: i64 = redis::cmd("EXISTS").arg("fresh").query(&mut c).unwrap();
    assert_eq!(exists, 0, "the admitting limiter of a denied CL.ALL created nothing");
}

/// A refund (or an admission) in a long exact window log replicates what it changes, not the
/// log: the replication stream grows by a few dozen bytes, whatever the log's size.
#[test]
fn a_refund_in_a_long_log_replicates_only_what_it_changes() {
    let master = Server::with(Options::default().arg("--repl-ping-replica-period 3600"));
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    // 20,000 actions in one window (a log of 160 KB).
    for _ in 0..20 {
        assert_eq!(harness::throttle(&mut c, "CL.WINDOW log 100000 600 1000")[0], 0);
    }
    let len: i64 = redis::cmd("STRLEN").arg("log").query(&mut c).unwrap();
    assert!(len > 160_000, "{len}");
    wait_for_replica(&master, &replica);
    let offset = || master.info_field("replication", "master_repl_offset").parse::<i64>().unwrap();
    for words in ["CL.WINDOW log 100000 600 -1", "CL.WINDOW log 100000 600 -500", "CL.WINDOW log 100000 600 1"] {
        let before = offset();
        harness::throttle(&mut c, words);
        let grew = offset() - before;
        assert!(grew < 300, "{words}: {grew} bytes replicated for a {len}-byte log");
    }
    wait_for_replica(&master, &replica);
    assert_eq!(snapshot(&mut replica.client()), snapshot(&mut c), "replica == master");
}

/// A lease set holding another application's members: the calls that read one refuse and add
/// nothing to the replication stream; a call that reads only leases removes only those, and
/// the replica holds what the master holds, the other members included.
///
/// skip twin: the leases are the module's only.
#[test]
fn lease_calls_on_sets_holding_other_data_replicate_only_what_they_read() {
    let master = Server::with(Options::default().arg("--repl-ping-replica-period 3600"));
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    let live = harness::server_ms(&mut c) + 600_000;
    let _: () = redis::cmd("ZADD").arg("mixed").arg("1000.5").arg("other").arg(2000).arg("x").query(&mut c).unwrap();
    let mut shared = redis::cmd("ZADD");
    shared.arg("shared");
    for i in 0..40 {
        shared.arg(1000 + i).arg(format!("w{i:02}"));
    }
    let _: () = shared.arg("5000.5").arg("foreign").arg(live).arg("holder").query(&mut c).unwrap();
    wait_for_replica(&master, &replica);
    let offset = || master.info_field("replication", "master_repl_offset");
    let before = offset();
    for args in [&[&b"CL.ACQUIRE"[..], b"mixed", b"5", b"60", b"job1"][..], &[b"CL.RELEASE", b"mixed", b"x"]] {
        assert_eq!(harness::error_of(&mut c, args), "ERR key does not hold valid CL.ACQUIRE state");
    }
    assert_eq!(offset(), before, "a refused call replicates nothing");
    assert_eq!(harness::throttle(&mut c, "CL.ACQUIRE shared 5 60 job1")[..3], [0, 5, 3]);
    wait_for_replica(&master, &replica);
    let on_master = snapshot(&mut c);
    assert_eq!(snapshot(&mut replica.client()), on_master, "replica == master");
    let shared: Vec<String> = redis::cmd("ZRANGE").arg("shared").arg(0).arg(-1).query(&mut c).unwrap();
    assert_eq!(shared.len(), 11, "32 leases removed, one added: {shared:?}");
    assert!(shared.contains(&"foreign".to_string()) && shared.contains(&"w39".to_string()));
}

/// The commands `random_calls` runs on `c`'s server: every limiter, and where the module is
/// loaded (not the twin) CL.PACE and the leases too, on lease sets each anchored by a 600 s
/// lease (so no key expires while copies are compared).
fn every_command(c: &mut redis::Connection) -> &'static [&'static str] {
    if harness::twin::backend().is_some() {
        return &["CL.THROTTLE", "CL.WINDOW", "CL.WINDOW-P", "CL.BUCKET", "CL.COUNTER", "CL.ALL"];
    }
    for i in 0..40 {
        harness::throttle(c, &format!("CL.ACQUIRE rl:cl.acquire:{i} 5 600 anchor"));
    }
    &[
        "CL.THROTTLE",
        "CL.WINDOW",
        "CL.WINDOW-P",
        "CL.BUCKET",
        "CL.COUNTER",
        "CL.ALL",
        "CL.EACH",
        "CL.PACE",
        "CL.ACQUIRE",
        "CL.RELEASE",
    ]
}

/// A server run as a cache (no AOF, no replica, no backlog; snapshots come and go) has nowhere
/// to send a replicated write, so the module builds none (`store/replication.rs`), until the
/// first replica: one attached to it then holds every write made before (its snapshot), while
/// it waited for the snapshot, and after. The writes count towards RDB save points all along.
#[test]
fn a_replica_attached_to_a_cache_holds_every_write_before_during_and_after_its_sync() {
    // The snapshot starts a second after the replica asks: writes land in between.
    let master = Server::with(Options::default().arg("--repl-diskless-sync-delay 1"));
    let mut c = master.client();
    // A snapshot's child comes and goes first: the server is a cache again once it has ended.
    let _: () = redis::cmd("BGSAVE").query(&mut c).unwrap();
    wait_until("the snapshot", Duration::from_secs(20), || {
        master.info_field("persistence", "rdb_bgsave_in_progress") == "0"
    });
    let commands = every_command(&mut c);
    let changes = || master.info_field("persistence", "rdb_changes_since_last_save").parse::<u64>().unwrap();
    random_calls(&mut c, 1500, commands);
    assert!(changes() > 300, "the writes count towards RDB save points: {}", changes());

    let stop = std::sync::atomic::AtomicBool::new(false);
    let replica = std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = master.client();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                random_calls(&mut c, 20, commands);
            }
        });
        let replica = master.replica(Options::default().without_module());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        replica
    });
    random_calls(&mut c, 1500, commands);
    wait_for_replica(&master, &replica);
    let on_master = snapshot(&mut c);
    assert!(on_master.len() > 100, "the test exercised many limiters");
    assert_eq!(snapshot(&mut replica.client()), on_master, "replica == master");
}

/// A server run as a cache that lets a test reload its AOF (`DEBUG LOADAOF`).
fn aof_server() -> Server {
    Server::with(Options::default().arg("--enable-debug-command local"))
}

/// Reloads the dataset from the AOF and asserts it is exactly the dataset before; returns that.
fn assert_aof_replays_the_dataset(c: &mut redis::Connection) -> Snapshot {
    let on_master = snapshot(c);
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(c).unwrap();
    assert_eq!(snapshot(c), on_master, "AOF replay == the dataset before");
    on_master
}

/// `CONFIG SET appendonly yes` on a server run as a cache: the file, once written, replays to
/// exactly the dataset, the writes made before it was turned on and after.
#[test]
fn an_aof_turned_on_at_run_time_replays_every_write() {
    let master = aof_server();
    let mut c = master.client();
    let commands = every_command(&mut c);
    random_calls(&mut c, 1500, commands);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("yes").query(&mut c).unwrap();
    random_calls(&mut c, 500, commands);
    master.wait_for_aof_rewrite();
    random_calls(&mut c, 1500, commands);
    assert_aof_replays_the_dataset(&mut c);
}

/// `CONFIG SET appendonly yes` inside a transaction, between limiter calls: the calls queued
/// before it ran while nothing could read the stream (only counted, not built), and those after
/// it are built in full. The server starts the file after the transaction, from a snapshot that
/// holds both, so the file replays to exactly the dataset, no call applied twice.
#[test]
fn an_aof_turned_on_inside_a_transaction_replays_every_write() {
    let master = aof_server();
    let mut c = master.client();
    let commands = every_command(&mut c);
    random_calls(&mut c, 300, commands);
    let calls = [
        "CL.THROTTLE rl:tx:g 5 3 600",
        "CL.COUNTER rl:tx:c 9 600",
        "CL.WINDOW rl:tx:w 12 600 2",
        "CL.THROTTLE rl:cl.throttle:1 5 3 600",
    ];
    let mut pipe = redis::pipe();
    pipe.atomic();
    let queue = |pipe: &mut redis::Pipeline| {
        for words in calls {
            let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
            let mut cmd = redis::Cmd::new();
            for arg in harness::twin::map(&args) {
                cmd.arg(arg);
            }
            pipe.add_command(cmd).ignore();
        }
    };
    queue(&mut pipe);
    pipe.cmd("CONFIG").arg("SET").arg("appendonly").arg("yes").ignore();
    queue(&mut pipe);
    let () = pipe.query(&mut c).unwrap();
    master.wait_for_aof_rewrite();
    random_calls(&mut c, 300, commands);
    let on_master = assert_aof_replays_the_dataset(&mut c);
    assert!(on_master.iter().any(|(key, _, _)| key == b"rl:tx:g"), "the transaction's calls wrote");
}

/// A primary restarted from its RDB keeps its replication history (a backlog from the load
/// on), so its replica resumes with a partial sync (no snapshot): the writes made while the
/// replica was away reach it from that backlog, the later ones through the stream.
#[test]
fn a_replica_resuming_after_its_primary_restarts_gets_every_later_write() {
    let mut master = Server::with(Options::default().arg("--repl-ping-replica-period 3600 --shutdown-timeout 0"));
    let replica = master.replica(Options::default().without_module().arg("--repl-timeout 60"));
    let mut c = master.client();
    let commands = every_command(&mut c);
    random_calls(&mut c, 500, commands);
    wait_for_replica(&master, &replica);
    // SHUTDOWN saves the dataset and the replication history in the RDB (after its last word
    // to the replica), read back on the restart. The replica is away meanwhile.
    let _: () = redis::cmd("CONFIG").arg("SET").arg("save").arg("3600 1").query(&mut c).unwrap();
    let paused = harness::Resume(replica.pid());
    harness::signal(paused.0, libc::SIGSTOP);
    master.restart("");
    let mut c = master.client();
    random_calls(&mut c, 1000, commands);
    drop(paused);
    let synced = || master.info_field("stats", "sync_partial_ok");
    wait_until("the replica's partial sync", Duration::from_secs(30), || synced() == "1");
    assert_eq!(master.info_field("stats", "sync_full"), "0", "no snapshot was sent after the restart");
    random_calls(&mut c, 1000, commands);
    wait_for_replica(&master, &replica);
    let on_master = snapshot(&mut c);
    assert_eq!(snapshot(&mut replica.client()), on_master, "replica == master");
}

/// A replica away for a while (its link cut, the primary with no replica left): the backlog
/// it left behind keeps every write for it, so it resumes with a partial sync and holds them.
#[test]
fn a_replica_back_from_a_cut_link_gets_every_write_made_while_it_was_away() {
    let master = Server::with(Options::default().arg("--repl-ping-replica-period 3600"));
    let replica = master.replica(Options::default().without_module().arg("--repl-timeout 60"));
    let mut c = master.client();
    let commands = every_command(&mut c);
    random_calls(&mut c, 300, commands);
    wait_for_replica(&master, &replica);
    let paused = harness::Resume(replica.pid());
    harness::signal(paused.0, libc::SIGSTOP);
    let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica").query(&mut c).unwrap();
    wait_until("the primary to drop its replica", Duration::from_secs(10), || {
        master.info_field("replication", "connected_slaves") == "0"
    });
    // Long enough for the module's once-a-second look at the server (it must see the backlog).
    for _ in 0..3 {
        random_calls(&mut c, 300, commands);
        std::thread::sleep(Duration::from_millis(600));
    }
    drop(paused);
    wait_until("the replica's partial sync", Duration::from_secs(30), || {
        master.info_field("stats", "sync_partial_ok") == "1"
    });
    random_calls(&mut c, 300, commands);
    wait_for_replica(&master, &replica);
    assert_eq!(snapshot(&mut replica.client()), snapshot(&mut c), "replica == master");
}
