//! Keyspace events: each write announces what the equivalent Redis commands announce, so
//! subscribers see the same events on the master (from the module) as on a module-less replica
//! (from the replicated `SET … PXAT`, `SETRANGE`, `PEXPIREAT`, `DEL`); calls that change
//! nothing announce nothing.

mod harness;

use std::time::{Duration, Instant};

use harness::{Options, Server, throttle};

/// Subscribes to every keyevent of db 0 on `server`; events arrive on the returned channel as
/// `(event, key)`.
fn subscribe(server: &Server) -> std::sync::mpsc::Receiver<(String, String)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut c = server.client();
    let _: () = redis::cmd("CONFIG").arg(&["SET", "notify-keyspace-events", "KEA"]).query(&mut c).unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut pubsub = c.as_pubsub();
        pubsub.psubscribe("__keyevent@0__:*").unwrap();
        ready_tx.send(()).unwrap();
        pubsub.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        loop {
            match pubsub.get_message() {
                Ok(msg) => {
                    let event = msg.get_channel_name().trim_start_matches("__keyevent@0__:").to_string();
                    let key: String = msg.get_payload().unwrap();
                    if tx.send((event, key)).is_err() {
                        return;
                    }
                }
                Err(e) if e.is_timeout() => continue,
                Err(_) => return,
            }
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).expect("subscribed");
    rx
}

/// The events received until none has come for a while.
fn drain(rx: &std::sync::mpsc::Receiver<(String, String)>) -> Vec<(String, String)> {
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(event) = rx.recv_timeout(Duration::from_millis(500)) {
        events.push(event);
        assert!(Instant::now() < deadline, "events keep coming: {events:?}");
    }
    events
}

#[test]
fn the_module_announces_what_its_replicated_commands_announce() {
    let master = Server::start();
    let replica = master.replica(Options::default().without_module());
    let on_master = subscribe(&master);
    let on_replica = subscribe(&replica);
    let mut c = master.client();
    let calls = [
        "CL.THROTTLE t 2 1 60",       // a new key
        "CL.THROTTLE t 2 1 60",       // rewritten in place
        "CL.THROTTLE t 2 1 60 -5",    // refunded to full: deleted
        "CL.WINDOW w 5 60",           // a new log
        "CL.WINDOW w 5 60 2",         // appended in place
        "CL.WINDOW w 5 60 -1",        // a refund
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
    let all: Vec<i64> = harness::command(&[b"CL.ALL", b"2", b"a1", b"a2", b"COUNTER", b"5", b"60", b"THROTTLE", b"4", b"1", b"60"]).query(&mut c).unwrap();
    assert_eq!(all[0], 0);
    master.wait_replicated(&replica);
    let from_module = drain(&on_master);
    let from_commands = drain(&on_replica);
    assert!(from_module.iter().any(|(e, _)| e == "setrange"), "{from_module:?}");
    assert!(from_module.iter().any(|(e, _)| e == "expire"), "{from_module:?}");
    assert!(from_module.iter().any(|(e, _)| e == "del"), "{from_module:?}");
    assert_eq!(from_module, from_commands, "the master's events are the replica's");

    // Denials and peeks announce nothing.
    for words in ["CL.COUNTER c 5 60 5", "CL.COUNTER c 5 60 0", "CL.THROTTLE zero 0 1 60 0"] {
        throttle(&mut c, words);
    }
    assert_eq!(drain(&on_master), vec![], "calls that change nothing are silent");
}

#[test]
fn pace_and_leases_announce_what_their_replicated_commands_announce() {
    let master = Server::start();
    let replica = master.replica(Options::default().without_module());
    let on_master = subscribe(&master);
    let on_replica = subscribe(&replica);
    let mut c = master.client();
    let release = |c: &mut redis::Connection, key: &str, id: &str| -> i64 { redis::cmd("CL.RELEASE").arg(key).arg(id).query(c).unwrap() };
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

    // Refusals, peeks and releases of nothing are silent.
    throttle(&mut c, "CL.ACQUIRE full 1 60 holder");
    drain(&on_master);
    throttle(&mut c, "CL.ACQUIRE full 1 60 other");
    throttle(&mut c, "CL.PACE pace 10 60 QUANTITY 0");
    throttle(&mut c, "CL.PACE pace 10 60 MAXWAIT 0");
    assert_eq!(release(&mut c, "full", "other"), 0);
    assert_eq!(drain(&on_master), vec![], "calls that change nothing are silent");
}
