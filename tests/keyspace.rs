//! Keyspace events: each write announces what the equivalent Redis commands announce, so
//! subscribers see the same events on the master (from the module) as on a module-less replica
//! (from the replicated `SET … PXAT`, `SETRANGE`, `PEXPIREAT`, `DEL`); calls that change
//! nothing announce nothing.

mod harness;

use std::sync::mpsc::Receiver;

use harness::{Options, Server, drain, psubscribe, throttle};

/// Subscribes to every keyevent of db 0 on `server` (with every class of events on); events
/// arrive as `(event, key)`.
fn subscribe(server: &Server) -> Receiver<(String, String)> {
    let _: () = redis::cmd("CONFIG").arg(&["SET", "notify-keyspace-events", "KEA"]).query(&mut server.client()).unwrap();
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
    let all: Vec<i64> = redis::cmd("CL.ALL").arg(&["2", "a1", "a2", "COUNTER", "5", "60", "THROTTLE", "4", "1", "60"]).query(&mut c).unwrap();
    assert_eq!(all[0], 0);
    master.wait_replicated(&replica);
    let from_module = drain(&on_master);
    let from_commands = drain(&on_replica);
    assert!(from_module.iter().any(|(e, _)| e == "setrange"), "{from_module:?}");
    assert!(from_module.iter().any(|(e, _)| e == "expire"), "{from_module:?}");
    assert!(from_module.iter().any(|(e, _)| e == "del"), "{from_module:?}");
    assert_eq!(from_module, from_commands, "the master's events are the replica's");

    // Peeks announce nothing; a denial announces only `throttled` (a module event, which `A`
    // includes), never a write.
    for words in ["CL.COUNTER c 5 60 5", "CL.COUNTER c 5 60 0", "CL.THROTTLE zero 0 1 60 0"] {
        throttle(&mut c, words);
    }
    assert_eq!(drain(&on_master), vec![("throttled".to_string(), "c".to_string())], "calls that change nothing announce no write");
}
