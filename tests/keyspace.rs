//! Keyspace events: each write announces what the equivalent Redis commands announce, so
//! subscribers see the same events on the master (from the module) as on a module-less replica
//! (from the replicated `SET … PXAT`, `SETRANGE`, `PEXPIREAT`, `DEL`); calls that change
//! nothing announce nothing.
//!
//! skip containers: needs module-less replicas.

mod harness;

use std::sync::mpsc::Receiver;
use std::time::Duration;

use harness::{Options, Server, drain, psubscribe, throttle};

/// Subscribes to every keyevent of db 0 on `server` (with every class of events on); events
/// arrive as `(event, key)`.
fn subscribe(server: &Server) -> Receiver<(String, String)> {
    let _: () =
        redis::cmd("CONFIG").arg(&["SET", "notify-keyspace-events", "KEA"]).query(&mut server.client()).unwrap();
    let messages = psubscribe(server, "__keyevent@0__:*");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for (channel, key) in messages {
            let event = channel.trim_start_matches("__keyevent@0__:").to_string();
            if tx.send((event, String::from_utf8_lossy(&key).into_owned())).is_err() {
                return;
            }
        }
    });
    rx
}

#[test]
fn the_module_announces_what_its_replicated_commands_announce() {
    let master = Server::start();
    let replica = master.replica(Options::default().without_module());
    let on_master = subscribe(&master);
    let on_replica = subscribe(&replica);
    let mut c = master.client();
    let calls = [
        "CL.THROTTLE t 2 1 60",    // a new key
        "CL.THROTTLE t 2 1 60",    // rewritten in place
        "CL.THROTTLE t 2 1 60 -5", // refunded to full: deleted
        "CL.WINDOW w 5 60",        // a new log
        "CL.WINDOW w 5 60 2",      // appended in place
        "CL.WINDOW w 5 60 -1",     // a refund
        "CL.WINDOW p 5 60 PRECISION 10",
        "CL.WINDOW p 5 60 PRECISION 10 3",
        "CL.COUNTER c 5 60",
        "CL.COUNTER c 5 60 2",
        "CL.BUCKET b 5 1 60 2",
        "CL.BUCKET b 5 1 60",
    ];
    for words in calls {
        throttle(&mut c, words);
    }
    let all: Vec<i64> =
        harness::command(&[b"CL.ALL", b"2", b"a1", b"a2", b"COUNTER", b"5", b"60", b"THROTTLE", b"4", b"1", b"60"])
            .query(&mut c)
            .unwrap();
    assert_eq!(all[0], 0);
    master.wait_replicated(&replica);
    let from_module = drain(&on_master);
    let from_commands = drain(&on_replica);
    assert!(from_module.iter().any(|(e, _)| e == "setrange"), "{from_module:?}");
    assert!(from_module.iter().any(|(e, _)| e == "expire"), "{from_module:?}");
    assert!(from_module.iter().any(|(e, _)| e == "del"), "{from_module:?}");
    assert_eq!(from_module, from_commands, "the master's events are the replica's");

    // Peeks announce nothing; a denial announces no write, only (from the module, not the
    // Functions twin) `throttled`, a module event, which `A` includes.
    for words in ["CL.COUNTER c 5 60 5", "CL.COUNTER c 5 60 0", "CL.THROTTLE zero 0 1 60 0"] {
        throttle(&mut c, words);
    }
    let throttled = match harness::twin::backend() {
        None => vec![("throttled".to_string(), "c".to_string())],
        Some(_) => vec![],
    };
    assert_eq!(drain(&on_master), throttled, "calls that change nothing announce no write");
}

/// The module sends a write's events only for the classes `notify-keyspace-events` publishes
/// (it skips the rest, which costs nothing): a subscriber sees, class by class, exactly what the
/// replicated commands announce on a module-less replica with the same flags.
#[test]
fn each_class_is_announced_exactly_as_the_servers_flags_ask() {
    let master = Server::start();
    let replica = master.replica(Options::default().without_module());
    let on_master = subscribe(&master);
    let on_replica = subscribe(&replica);
    let mut c = master.client();
    // Per flags: the events that must be seen, and those that may be (the Functions twin lays a
    // new log out with `SET` then `APPEND`, also a string event).
    let classes = [
        ("E$", &["set", "setrange"][..], &["append"][..]), // strings only: no `expire`, no `del`
        ("Eg", &["del", "expire"][..], &[][..]),           // generic only: no `set`, no `setrange`
        ("Ed", &[][..], &[][..]),                          // module events only: no write announced
        ("", &[][..], &[][..]),                            // events off
    ];
    for (round, (flags, expected, also)) in classes.into_iter().enumerate() {
        for server in [&master, &replica] {
            let _: () = redis::cmd("CONFIG")
                .arg(&["SET", "notify-keyspace-events", flags])
                .query(&mut server.client())
                .unwrap();
        }
        let (t, w) = (format!("t{round}"), format!("w{round}"));
        for words in [
            format!("CL.THROTTLE {t} 2 1 60"),    // SET … PXAT
            format!("CL.THROTTLE {t} 2 1 60 -5"), // refunded to full: DEL
            format!("CL.WINDOW {w} 5 60"),        // a new log: SET … PXAT
            format!("CL.WINDOW {w} 5 60 2"),      // SETRANGE and PEXPIREAT
        ] {
            throttle(&mut c, &words);
        }
        master.wait_replicated(&replica);
        let from_module = drain(&on_master);
        let from_commands = drain(&on_replica);
        assert_eq!(from_module, from_commands, "with {flags:?}, the master's events are the replica's");
        let mut seen: Vec<&str> = from_module.iter().map(|(e, _)| e.as_str()).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.retain(|e| !also.contains(e));
        assert_eq!(seen, expected, "with {flags:?}: {from_module:?}");
    }
}

/// skip twin: CL.PACE and the leases are the module's only.
#[test]
fn pace_and_leases_announce_what_their_replicated_commands_announce() {
    let master = Server::start();
    let replica = master.replica(Options::default().without_module());
    let on_master = subscribe(&master);
    let on_replica = subscribe(&replica);
    let mut c = master.client();
    let release = |c: &mut redis::Connection, key: &str, id: &str| -> i64 {
        redis::cmd("CL.RELEASE").arg(key).arg(id).query(c).unwrap()
    };
    throttle(&mut c, "CL.PACE pace 10 60"); // SET … PXAT
    throttle(&mut c, "CL.PACE pace 10 60 QUANTITY 3");
    throttle(&mut c, "CL.ACQUIRE l 3 60 a"); // a new set: ZADD, PEXPIREAT
    throttle(&mut c, "CL.ACQUIRE l 3 60 b");
    throttle(&mut c, "CL.ACQUIRE l 3 60 a"); // a renewal (the same score: no zadd event)
    throttle(&mut c, "CL.ACQUIRE l 3 100 short MS");
    std::thread::sleep(Duration::from_millis(120));
    throttle(&mut c, "CL.ACQUIRE l 3 60 c"); // prunes `short` (ZREM), then ZADD
    assert_eq!(release(&mut c, "l", "a"), 1); // ZREM, PEXPIREAT
    assert_eq!(release(&mut c, "l", "b"), 1);
    assert_eq!(release(&mut c, "l", "c"), 1); // the last lease: DEL
    throttle(&mut c, "CL.ACQUIRE gone 3 100 x MS");
    throttle(&mut c, "CL.ACQUIRE gone 3 100 y MS");
    let _: () = redis::cmd("PERSIST").arg("gone").query(&mut c).unwrap(); // the key outlives its leases
    std::thread::sleep(Duration::from_millis(120));
    throttle(&mut c, "CL.ACQUIRE gone 3 60 z"); // every lease ended: DEL, ZADD, PEXPIREAT
    master.wait_replicated(&replica);
    let from_module = drain(&on_master);
    let from_commands = drain(&on_replica);
    for event in ["set", "zadd", "zrem", "expire", "del"] {
        assert!(from_module.iter().any(|(e, _)| e == event), "{event}: {from_module:?}");
    }
    assert_eq!(from_module, from_commands, "the master's events are the replica's");
    assert_eq!(harness::snapshot(&mut replica.client()), harness::snapshot(&mut c));

    // Refusals, peeks and releases of nothing announce no write; a refusal announces
    // `throttled` (a module event, which `A` includes), as every denial does.
    throttle(&mut c, "CL.ACQUIRE full 1 60 holder");
    drain(&on_master);
    throttle(&mut c, "CL.ACQUIRE full 1 60 other");
    throttle(&mut c, "CL.PACE pace 10 60 QUANTITY 0");
    throttle(&mut c, "CL.PACE pace 10 60 MAXWAIT 0");
    assert_eq!(release(&mut c, "full", "other"), 0);
    let throttled = |key: &str| ("throttled".to_string(), key.to_string());
    assert_eq!(
        drain(&on_master),
        vec![throttled("full"), throttled("pace")],
        "calls that change nothing announce no write"
    );
}

/// Which reads convert a compact value, exactly as the docs list them ("Encodings"): the module
/// reads a short value in place (which converts an integer to a plain string) only under a
/// name whose value it wrote itself, with the length it wrote. Its own delete (a refund to
/// full) forgets the name; a removal by another client (DEL, UNLINK, GETDEL, RENAME, MOVE)
/// does not, so a value of the very same length written there next is converted by the next
/// call, even a peek (the value itself never changes). Each case: CL.THROTTLE writes a TAT
/// (19 digits), the key goes, `SET` writes another 19-digit TAT, a peek reads it.
///
/// skip twin: CL.PACE and the leases are the module's only.
#[test]
fn reads_convert_a_reused_name_only_in_the_cases_the_docs_list() {
    let server = Server::start();
    let mut c = server.client();
    let encoding = |c: &mut redis::Connection, key: &str| -> String {
        redis::cmd("OBJECT").arg("ENCODING").arg(key).query(c).unwrap()
    };
    let cases: [(&str, &[&str], &str); 6] = [
        ("own-delete", &["CL.THROTTLE own-delete 5 1 60 -10"], "int"),
        ("del", &["DEL del"], "raw"),
        ("unlink", &["UNLINK unlink"], "raw"),
        ("getdel", &["GETDEL getdel"], "raw"),
        ("rename", &["RENAME rename rename:elsewhere"], "raw"),
        ("move", &["MOVE move 1"], "raw"),
    ];
    for (key, remove, after_peek) in cases {
        assert_eq!(throttle(&mut c, &format!("CL.THROTTLE {key} 5 1 60"))[0], 0, "{key}");
        for words in remove {
            let args: Vec<&str> = words.split_whitespace().collect();
            let _: redis::Value = redis::cmd(args[0]).arg(&args[1..]).query(&mut c).unwrap();
        }
        let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut c).unwrap();
        assert_eq!(exists, 0, "{key}: removed");
        let now = harness::server_ms(&mut c);
        let tat = (now + 30_000) * 1_000_000;
        let _: () =
            redis::cmd("SET").arg(key).arg(tat.to_string()).arg("PXAT").arg(now + 30_000).query(&mut c).unwrap();
        assert_eq!(encoding(&mut c, key), "int", "{key}");
        let peek = throttle(&mut c, &format!("CL.THROTTLE {key} 5 1 60 0"));
        assert_eq!(peek[0], 0, "{key}");
        assert_eq!(encoding(&mut c, key), after_peek, "{key}: the encoding after a peek, as the docs say");
        assert_eq!(harness::get_bytes(&mut c, key), tat.to_string().into_bytes(), "{key}: the value never changes");
    }
}
