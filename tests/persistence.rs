//! Restarts: with RDB snapshots and with AOF, every limiter's value and expiry survive a
//! restart unchanged, and so does a module unloaded and loaded again on a live server.
//!
//! skip containers: restarts servers and unloads the module.

mod harness;

use harness::{Options, Server, snapshot, throttle};

/// Every kind, one limiter used up (5 of 5) and one part-used (2 of 5), long periods.
const KINDS: &[&str] = &[
    "CL.THROTTLE {key} 4 1 600",
    "CL.WINDOW {key} 5 600",
    "CL.WINDOW {key} 5 600 PRECISION 60",
    "CL.BUCKET {key} 5 1 600",
    "CL.COUNTER {key} 5 600",
];

fn call(c: &mut redis::Connection, i: usize, state: &str, quantity: i64) -> [i64; 5] {
    throttle(c, &format!("{} {quantity}", KINDS[i].replace("{key}", &format!("rl:{i}:{state}"))))
}

fn fill(c: &mut redis::Connection) {
    for i in 0..KINDS.len() {
        assert_eq!(call(c, i, "full", 5)[..3], [0, 5, 0]);
        assert_eq!(call(c, i, "part", 2)[..3], [0, 5, 3]);
    }
}

/// The limiters continue where they were: a used-up one is denied, a part-used one admits
/// its remaining 3 and no more.
fn continues(c: &mut redis::Connection) {
    for (i, kind) in KINDS.iter().enumerate() {
        assert_eq!(call(c, i, "full", 1)[..3], [1, 5, 0], "{kind}");
        assert_eq!(call(c, i, "part", 0)[..3], [0, 5, 3], "{kind}");
    }
}

/// Fills a server started with `options`, restarts it, and checks that every limiter
/// survived byte for byte; returns the server and the snapshot from before the restart.
fn survives_restart(options: Options, label: &str) -> (Server, harness::Snapshot) {
    let mut server = Server::with(options);
    let mut c = server.client();
    fill(&mut c);
    let before = snapshot(&mut c);
    assert_eq!(before.len(), 2 * KINDS.len());
    server.restart("");
    let mut c = server.client();
    assert_eq!(snapshot(&mut c), before, "{label}: every value and expiry survived the restart");
    (server, before)
}

#[test]
fn rdb_restart_keeps_every_limiter() {
    let (server, _) = survives_restart(Options::default().arg("--save 3600 1"), "RDB");
    continues(&mut server.client());
}

#[test]
fn aof_restart_keeps_every_limiter_also_after_a_rewrite() {
    let (mut server, before) = survives_restart(Options::default().arg("--appendonly yes --appendfsync always"), "AOF");
    // After a rewrite the AOF holds the keys themselves, not the commands: same again.
    let _: () = redis::cmd("BGREWRITEAOF").query(&mut server.client()).unwrap();
    server.wait_for_aof_rewrite();
    server.restart("");
    let mut c = server.client();
    assert_eq!(snapshot(&mut c), before, "AOF after rewrite");
    continues(&mut c);
}

/// skip twin: unloads and loads the module.
#[test]
fn module_unload_and_load_on_a_live_server_keeps_every_limiter() {
    let server = Server::with(Options::default().arg("--enable-module-command yes"));
    let mut c = server.client();
    fill(&mut c);
    let before = snapshot(&mut c);
    let _: () = redis::cmd("MODULE").arg("UNLOAD").arg("throttle").query(&mut c).unwrap();
    let e = harness::error_of(&mut c, &[b"CL.THROTTLE", b"k", b"1", b"1", b"1"]);
    assert!(e.contains("unknown command"), "{e}");
    assert_eq!(snapshot(&mut c), before, "the keys are plain strings: unloading touches none");
    // State written while no module is loaded (as a replica or an older server would hold it:
    // a redis-cell TAT written with SET … PXAT) works once the module is back.
    let now_ms: i64 = redis::cmd("TIME").query::<Vec<i64>>(&mut c).map(|t| t[0] * 1000 + t[1] / 1000).unwrap();
    let tat_ns = (now_ms + 50_000) * 1_000_000; // 50 s ahead: burst 4 at 1 per 10 s, used up
    let _: () =
        redis::cmd("SET").arg("cell").arg(tat_ns.to_string()).arg("PXAT").arg(now_ms + 50_000).query(&mut c).unwrap();
    let _: () = redis::cmd("MODULE").arg("LOAD").arg(harness::module_path().to_str().unwrap()).query(&mut c).unwrap();
    continues(&mut c);
    assert_eq!(throttle(&mut c, "CL.THROTTLE cell 4 1 10")[..4], [1, 5, 0, 10], "a limiter written without the module");
}
