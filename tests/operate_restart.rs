//! The configs across restarts and at load (native servers only: these tests restart servers,
//! write config files and start replicas): module arguments, `throttle.*` lines in redis.conf,
//! `MODULE LOADEX … CONFIG`, `CONFIG REWRITE` then a restart from the rewritten file, refusals of
//! bad values at load, and each node keeping its own counters, sketch and configs.
//!
//! skip twin: the module's configs across restarts.
//! skip containers: restarts servers and writes config files.

mod harness;

use harness::{Options, Server, throttle};
use redis::Connection;

fn config_get(c: &mut Connection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(c).unwrap();
    assert_eq!(pair.len(), 2, "CONFIG GET {name}: {pair:?}");
    pair[1].clone()
}

fn config_set(c: &mut Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query(c).unwrap();
}

/// A denial answered as such (enforce) or as an admission (shadow).
fn answers_denials(c: &mut Connection) -> bool {
    throttle(c, "CL.COUNTER probe 1 60 2")[0] == 1
}

#[test]
fn module_arguments_set_the_defaults() {
    let server =
        Server::with(Options::default().module_args("mode shadow throttle.max-exact-limit 500 MAX-BUCKETS 20"));
    let mut c = server.client();
    assert_eq!(config_get(&mut c, "throttle.mode"), "shadow");
    assert_eq!(config_get(&mut c, "throttle.max-exact-limit"), "500");
    assert_eq!(config_get(&mut c, "throttle.max-buckets"), "20");
    assert!(!answers_denials(&mut c), "shadow from the start");
    let e = harness::error_of(&mut c, &[b"CL.WINDOW", b"w", b"501", b"60"]);
    assert_eq!(e, "ERR limit must be an integer from 1 to 500 (use PRECISION for larger limits)");
    config_set(&mut c, "throttle.mode", "enforce");
    assert!(answers_denials(&mut c));
}

#[test]
fn config_file_lines_and_loadex_set_the_values() {
    let server = Server::with(Options::default().config_file("throttle.mode shadow\nthrottle.max-buckets 123\n"));
    let mut c = server.client();
    assert_eq!(
        (config_get(&mut c, "throttle.mode"), config_get(&mut c, "throttle.max-buckets")),
        ("shadow".into(), "123".into())
    );
    assert!(!answers_denials(&mut c));

    // A config line wins over a module argument (the argument is only the default).
    let server = Server::with(Options::default().module_args("mode shadow").config_file("throttle.mode enforce\n"));
    assert!(answers_denials(&mut server.client()));

    let server = Server::with(Options::default().without_module().arg("--enable-module-command yes"));
    let mut c = server.client();
    let module = harness::module_path();
    let _: () = redis::cmd("MODULE")
        .arg("LOADEX")
        .arg(module.to_str().expect("a UTF-8 path"))
        .arg(&["CONFIG", "throttle.mode", "shadow", "CONFIG", "throttle.max-exact-limit", "42"])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        (config_get(&mut c, "throttle.mode"), config_get(&mut c, "throttle.max-exact-limit")),
        ("shadow".into(), "42".into())
    );
    assert!(!answers_denials(&mut c));
}

#[test]
fn config_rewrite_keeps_the_values_across_a_restart() {
    let mut server = Server::with(Options::default().config_file("# written by the test\n"));
    let mut c = server.client();
    config_set(&mut c, "throttle.mode", "shadow");
    config_set(&mut c, "throttle.max-exact-limit", "777");
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut c).unwrap();
    let file = std::fs::read_to_string(server.dir.join("redis.conf")).unwrap();
    assert!(file.contains("throttle.mode shadow"), "{file}");
    assert!(file.contains("throttle.max-exact-limit 777"), "{file}");
    assert!(!file.contains("throttle.max-buckets"), "a default is not written: {file}");
    drop(c);
    server.restart_from_config();
    let mut c = server.client();
    assert_eq!(config_get(&mut c, "throttle.mode"), "shadow");
    assert_eq!(config_get(&mut c, "throttle.max-exact-limit"), "777");
    assert_eq!(config_get(&mut c, "throttle.max-buckets"), "10000");
    assert!(!answers_denials(&mut c));

    // Loaded with `mode shadow` as its argument, set back to enforce and rewritten: the
    // rewritten value (not the argument's default) holds after a restart.
    let mut server = Server::with(Options::default().module_args("mode shadow").config_file(""));
    let mut c = server.client();
    config_set(&mut c, "throttle.mode", "enforce");
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut c).unwrap();
    let file = std::fs::read_to_string(server.dir.join("redis.conf")).unwrap();
    assert!(file.contains("throttle.mode enforce") && file.contains("mode shadow"), "{file}");
    drop(c);
    server.restart_from_config();
    let mut c = server.client();
    assert_eq!(config_get(&mut c, "throttle.mode"), "enforce");
    assert!(answers_denials(&mut c));
}

#[test]
fn bad_values_at_load_stop_the_load() {
    for (options, says) in [
        (Options::default().module_args("mode bogus"), "module argument mode must be enforce or shadow"),
        (
            Options::default().module_args("max-exact-limit 0"),
            "module argument max-exact-limit must be an integer from 1 to 200000",
        ),
        (Options::default().module_args("max-buckets"), "has no value"),
        (Options::default().module_args("colour blue"), "unknown module argument 'colour'"),
        (Options::default().config_file("throttle.mode bogus\n"), "throttle.mode"),
        (Options::default().config_file("throttle.max-buckets 100001\n"), "throttle.max-buckets"),
    ] {
        match Server::try_with(options) {
            Ok(_) => panic!("the server loaded the module despite a bad value ({says})"),
            Err(log) => assert!(log.contains(says), "the log says {says:?}: {log}"),
        }
    }
}

/// Counters, the sketch and the configs are each node's own: a replica (which runs no limiter
/// commands) reports none of its master's denials, and a config set on the master stays there.
#[test]
fn each_node_reports_its_own() {
    let master = Server::start();
    let replica = master.replica(Options::default());
    let mut m = master.client();
    config_set(&mut m, "throttle.mode", "shadow");
    for _ in 0..3 {
        throttle(&mut m, "CL.COUNTER denied 1 60 2");
    }
    throttle(&mut m, "CL.COUNTER admitted 1 60");
    master.wait_replicated(&replica);
    let mut r = replica.client();
    assert_eq!(master.info_field("throttle", "throttle_cl_counter_shadow_denied"), "3");
    assert_eq!(replica.info_field("throttle", "throttle_cl_counter_calls"), "0");
    let on_master: Vec<redis::Value> = redis::cmd("CL.TOP").query(&mut m).unwrap();
    let on_replica: Vec<redis::Value> = redis::cmd("CL.TOP").query(&mut r).unwrap();
    assert_eq!((on_master.len(), on_replica.len()), (2, 0), "a readonly command, answered by the replica for itself");
    let _: Vec<redis::Value> = redis::cmd("CL.TOP").arg("RESET").query(&mut r).unwrap();
    assert_eq!(config_get(&mut r, "throttle.mode"), "enforce");
    let got: Option<String> = redis::cmd("GET").arg("admitted").query(&mut r).unwrap();
    assert_eq!(got.as_deref(), Some("1"), "the admitted call replicated as usual");
}
