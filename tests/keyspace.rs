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

/// Reads never convert a value ("Encodings"): a denial or a peek leaves a compact value (an
/// integer, a short string embedded in its object) stored as it is, however it got there: a
/// name the module wrote, removed by another client (DEL, UNLINK, GETDEL, RENAME, MOVE) or by
/// the module's own delete (a refund to full), then given a value of the very same length by
/// `SET`; a live limiter overwritten (`SET`, `INCRBY`, `COPY … REPLACE`, `RESTORE … REPLACE`);
/// every limiter after `DEBUG RELOAD` (a window's short log and a pace's tagged state are
/// embedded strings then). The value itself never changes.
///
/// skip twin: CL.PACE is the module's only.
#[test]
fn reads_never_convert_a_value() {
    let server = Server::with(Options::default().arg("--enable-debug-command yes"));
    let mut c = server.client();
    let encoding = |c: &mut redis::Connection, key: &str| -> String {
        redis::cmd("OBJECT").arg("ENCODING").arg(key).query(c).unwrap()
    };
    let run = |c: &mut redis::Connection, words: &str| {
        let args: Vec<&str> = words.split_whitespace().collect();
        let _: redis::Value = redis::cmd(args[0]).arg(&args[1..]).query(c).unwrap();
    };
    // Removed, then a same-length integer SET under the name.
    let removals: [(&str, &str); 6] = [
        ("own-delete", "CL.THROTTLE own-delete 5 1 60 -10"),
        ("del", "DEL del"),
        ("unlink", "UNLINK unlink"),
        ("getdel", "GETDEL getdel"),
        ("rename", "RENAME rename rename:elsewhere"),
        ("move", "MOVE move 1"),
    ];
    for (key, remove) in removals {
        assert_eq!(throttle(&mut c, &format!("CL.THROTTLE {key} 5 1 60"))[0], 0, "{key}");
        run(&mut c, remove);
        let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut c).unwrap();
        assert_eq!(exists, 0, "{key}: removed");
        let now = harness::server_ms(&mut c);
        let tat = (now + 30_000) * 1_000_000;
        let _: () =
            redis::cmd("SET").arg(key).arg(tat.to_string()).arg("PXAT").arg(now + 30_000).query(&mut c).unwrap();
        assert_eq!(encoding(&mut c, key), "int", "{key}");
        let peek = throttle(&mut c, &format!("CL.THROTTLE {key} 5 1 60 0"));
        assert_eq!(peek[0], 0, "{key}");
        assert_eq!(encoding(&mut c, key), "int", "{key}: a peek leaves the integer an integer");
        assert_eq!(harness::get_bytes(&mut c, key), tat.to_string().into_bytes(), "{key}: the value never changes");
    }
    // A live limiter (a plain string the module wrote) overwritten with an empty limiter's
    // integer of the very same length: a denial and a peek leave it an integer.
    let now = harness::server_ms(&mut c);
    let tat = (now + 30_000) * 1_000_000;
    let _: () =
        redis::cmd("SET").arg("source").arg(tat.to_string()).arg("PXAT").arg(now + 30_000).query(&mut c).unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg("source").query(&mut c).unwrap();
    let overwrites = [
        ("set", format!("SET set {tat} KEEPTTL")),
        ("incrby", "INCRBY incrby 1".to_string()),
        ("copy", "COPY source copy REPLACE".to_string()),
    ];
    for (key, overwrite) in overwrites.iter().map(|(k, o)| (*k, o.as_str())).chain([("restore", "")]) {
        assert_eq!(throttle(&mut c, &format!("CL.THROTTLE {key} 0 1 60"))[0], 0, "{key}");
        assert_eq!(encoding(&mut c, key), "raw", "{key}: the module writes a plain string");
        match key {
            "restore" => {
                let _: () = redis::cmd("RESTORE").arg(key).arg(0).arg(&dump).arg("REPLACE").query(&mut c).unwrap();
            }
            _ => run(&mut c, overwrite),
        }
        let _: () = redis::cmd("PEXPIREAT").arg(key).arg(now + 60_000).query(&mut c).unwrap();
        assert_eq!(encoding(&mut c, key), "int", "{key}: overwritten");
        let before = harness::get_bytes(&mut c, key);
        assert_eq!(throttle(&mut c, &format!("CL.THROTTLE {key} 0 1 60"))[0], 1, "{key}: denied");
        throttle(&mut c, &format!("CL.THROTTLE {key} 0 1 60 0"));
        assert_eq!(encoding(&mut c, key), "int", "{key}: a denial and a peek leave the integer an integer");
        assert_eq!(harness::get_bytes(&mut c, key), before, "{key}: the value never changes");
    }
    // After a reload every value is compact: an integer, or an embedded string (a window's short
    // log, a pace's tagged state). Denials and peeks leave each as it is; an admission writes a
    // plain string again.
    for create in ["CL.THROTTLE r:t 0 1 60", "CL.COUNTER r:c 1 60", "CL.WINDOW r:w 1 60", "CL.BUCKET r:b 1 1 60"] {
        assert_eq!(throttle(&mut c, create)[0], 0, "{create}");
    }
    let _: redis::Value = redis::cmd("CL.PACE").arg("r:p").arg(1).arg(60).query(&mut c).unwrap();
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    for (key, deny) in [
        ("r:t", "CL.THROTTLE r:t 0 1 60"),
        ("r:c", "CL.COUNTER r:c 1 60"),
        ("r:w", "CL.WINDOW r:w 1 60"),
        ("r:b", "CL.BUCKET r:b 1 1 60"),
    ] {
        let compact = encoding(&mut c, key);
        assert!(compact == "int" || compact == "embstr", "{key}: {compact} after a reload");
        let before = harness::get_bytes(&mut c, key);
        assert_eq!(throttle(&mut c, deny)[0], 1, "{deny}");
        throttle(&mut c, &format!("{deny} 0"));
        assert_eq!(encoding(&mut c, key), compact, "{key}: a denial and a peek after a reload");
        assert_eq!(harness::get_bytes(&mut c, key), before, "{key}: the value never changes");
    }
    assert_eq!(encoding(&mut c, "r:p"), "embstr", "a pace's tagged state after a reload");
    assert_eq!(encoding(&mut c, "r:w"), "embstr", "a window's one-action log after a reload");
    // An admission after the reload decides on the value read in place and writes it again.
    let reply = throttle(&mut c, "CL.COUNTER r:c2 5 60");
    assert_eq!(reply[0], 0);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_eq!(throttle(&mut c, "CL.COUNTER r:c2 5 60")[2], 3, "the count read after a reload");
    assert_eq!(encoding(&mut c, "r:c2"), "raw", "written again by the admission");
    let _: redis::Value = redis::cmd("CL.PACE").arg("r:p").arg(1).arg(60).query(&mut c).unwrap();
    assert_eq!(encoding(&mut c, "r:p"), "raw", "a pace written again after a reload");
}

/// The cost side of the same promise: the module reads a value where Redis keeps it, not
/// through a nested `GET` (about a fifth of a call), whoever wrote it and however it is stored,
/// plain or an integer (after a reload, or written by `SET` as the twin does): `INFO
/// commandstats` counts no `GET`, whatever the number of keys.
/// skip twin: how the module reads a value (the twin reads through `GET`, which this counts).
#[test]
fn values_are_read_where_redis_keeps_them() {
    let server = Server::with(Options::default().arg("--enable-debug-command yes"));
    let mut c = server.client();
    let names: Vec<String> = (0..300).map(|i| format!("inplace:{i}")).collect();
    for name in &names {
        assert_eq!(throttle(&mut c, &format!("CL.THROTTLE {name} 9 1 3600"))[0], 0);
        assert_eq!(throttle(&mut c, &format!("CL.COUNTER {name}:c 10 3600"))[0], 0);
    }
    let gets = |c: &mut redis::Connection| -> String {
        let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
        info.lines().filter(|l| l.starts_with("cmdstat_get:")).collect()
    };
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    // Plain strings the module wrote, then integers after a reload, then integers `SET` wrote.
    for round in ["warm", "reloaded", "set"] {
        if round == "reloaded" {
            let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
        }
        if round == "set" {
            let now = harness::server_ms(&mut c);
            for name in &names {
                let _: () = redis::cmd("SET")
                    .arg(name)
                    .arg(((now + 1_000) * 1_000_000).to_string())
                    .arg("PXAT")
                    .arg(now + 1_000)
                    .query(&mut c)
                    .unwrap();
            }
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
        }
        for name in &names {
            assert_eq!(throttle(&mut c, &format!("CL.THROTTLE {name} 9 1 3600"))[0], 0, "{round} {name}");
            assert_eq!(throttle(&mut c, &format!("CL.COUNTER {name}:c 10 3600"))[0], 0, "{round} {name}");
        }
        assert_eq!(gets(&mut c), "", "{round}: no value read through GET");
    }
}
