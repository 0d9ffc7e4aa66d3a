//! Loading the module on a live server, and every way that load can fail (native servers only:
//! each test starts servers of its own, loads modules with `MODULE LOAD`, and builds a second,
//! tiny C module). A failed load must leave nothing of the module behind: no command, no config,
//! and above all no keyspace or server-event subscription, whose callback would jump into the
//! unloaded library at the next expiry, eviction, `FLUSHALL`, `SWAPDB` or load. After every failure
//! the server lives through all of those, and a correct load then works.
//!
//! skip twin: loads the module itself, and every way that fails.
//! skip containers: starts servers of its own and builds a second module.

mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use harness::{Options, Server, throttle};
use redis::{Connection, RedisResult};

/// A stand-in for redis-cell: a module named `redis-cell` that owns `CL.THROTTLE` (and replies
/// `cell` to it, so a test can tell which module answers).
const CELL: &str = r#"
#include "redismodule.h"
static int Throttle(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc;
    return RedisModule_ReplyWithSimpleString(ctx, "cell");
}
int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc;
    if (RedisModule_Init(ctx, "redis-cell", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    return RedisModule_CreateCommand(ctx, "cl.throttle", Throttle, "write deny-oom", 1, 1, 1);
}
"#;

/// The stand-in, built once per test binary against the redis-module crate's `redismodule.h`.
fn cell_module() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1"])
            .current_dir(root)
            .output()
            .expect("run cargo metadata");
        assert!(out.status.success(), "cargo metadata failed");
        let json = String::from_utf8_lossy(&out.stdout);
        // Every package's manifest; the redis-module crate's folder holds the header.
        let include = json
            .split("\"manifest_path\":\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .filter_map(|manifest| Path::new(manifest).parent().map(|dir| dir.join("src/include")))
            .find(|dir| dir.join("redismodule.h").is_file())
            .expect("redismodule.h in the redis-module crate's sources");
        let dir = std::env::temp_dir().join(format!("throttle-load-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (source, module) = (dir.join("cell.c"), dir.join("cell.so"));
        std::fs::write(&source, CELL).unwrap();
        let status = Command::new("cc")
            .args(["-O1", "-fPIC", "-shared", "-I"])
            .arg(&include)
            .arg(&source)
            .arg("-o")
            .arg(&module)
            .status()
            .expect("run cc (a C compiler builds the stand-in module)");
        assert!(status.success(), "building the stand-in module failed");
        module
    })
    .clone()
}

/// A server with no module loaded, which allows `MODULE LOAD` and `DEBUG RELOAD`.
fn bare_server() -> Server {
    Server::with(Options::default().without_module().arg("--enable-module-command yes --enable-debug-command yes"))
}

fn module() -> String {
    harness::module_path().to_str().expect("a UTF-8 path").to_string()
}

/// `MODULE <words…>`, as the server answers it.
fn module_command(c: &mut Connection, words: &[&str]) -> RedisResult<()> {
    redis::cmd("MODULE").arg(words).query(c)
}

fn info_field(c: &mut Connection, section: &str, field: &str) -> RedisResult<i64> {
    let info: String = redis::cmd("INFO").arg(section).query(c)?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in INFO {section}")))
}

/// Every event the module subscribes to, once: keys that expire (lazily and actively), keys
/// evicted under `maxmemory`, `FLUSHALL`, `FLUSHDB`, `SWAPDB`, and a reload (the loading
/// event). The first error (a dead server) is returned.
fn every_event(c: &mut Connection) -> RedisResult<()> {
    for i in 0..20 {
        let _: () = redis::cmd("SET").arg(format!("short:{i}")).arg("v").arg("PX").arg(1).query(c)?;
    }
    std::thread::sleep(Duration::from_millis(150)); // the active cycle expires some
    for i in 0..20 {
        let _: Option<String> = redis::cmd("GET").arg(format!("short:{i}")).query(c)?; // and reads the rest
    }
    assert!(info_field(c, "stats", "expired_keys")? >= 20, "the keys expired");

    let used = info_field(c, "memory", "used_memory")?;
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query(c)?;
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(used + 2_000_000).query(c)?;
    let value = "x".repeat(10_000);
    for i in 0..1_000 {
        let _: () = redis::cmd("SET").arg(format!("big:{i}")).arg(&value).query(c)?;
        if i % 50 == 49 && info_field(c, "stats", "evicted_keys")? > 0 {
            break;
        }
    }
    assert!(info_field(c, "stats", "evicted_keys")? > 0, "keys were evicted");
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(c)?;

    let _: () = redis::cmd("SET").arg("a").arg("1").query(c)?;
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(c)?;
    let _: () = redis::cmd("FLUSHDB").query(c)?;
    let _: () = redis::cmd("FLUSHALL").query(c)?;
    let _: () = redis::cmd("SET").arg("b").arg("1").query(c)?;
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(c)?;
    let _: String = redis::cmd("PING").query(c)?;
    Ok(())
}

/// After a failed load: the server lives through every event, nothing of the module is left,
/// and a correct load then works (and the server lives through every event again).
fn survives(server: &mut Server, c: &mut Connection, failure: &str) {
    if let Err(e) = every_event(c) {
        panic!("after {failure}, the server died ({e}): {}", server.log());
    }
    assert!(server.is_alive(), "after {failure}, the server died: {}", server.log());
    let mut c = server.client();
    let configs: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("throttle.*").query(&mut c).unwrap();
    assert!(configs.is_empty(), "after {failure}, configs are left: {configs:?}");
    let info: Vec<redis::Value> =
        redis::cmd("COMMAND").arg("INFO").arg("cl.acquire").arg("cl.window").query(&mut c).unwrap();
    assert!(info.iter().all(|v| *v == redis::Value::Nil), "after {failure}, commands are left: {info:?}");
    let modules: Vec<redis::Value> = redis::cmd("MODULE").arg("LIST").query(&mut c).unwrap();
    assert!(modules.len() <= 1, "after {failure}: {modules:?}"); // the stand-in at most

    module_command(&mut c, &["LOAD", &module()]).unwrap_or_else(|e| panic!("a correct load after {failure}: {e}"));
    assert_eq!(throttle(&mut c, "CL.WINDOW w 2 60"), [0, 2, 1, -1, 60]);
    let _: () = redis::cmd("SET").arg("w").arg("other").arg("PX").arg(1).query(&mut c).unwrap();
    if let Err(e) = every_event(&mut c) {
        panic!("after {failure} and a correct load, the server died ({e}): {}", server.log());
    }
    assert_eq!(throttle(&mut c, "CL.WINDOW w 2 60"), [0, 2, 1, -1, 60], "a fresh limiter");
    assert!(server.is_alive());
}

/// `MODULE <first> <the module> <rest…>` on a server of its own, refused; then `survives`.
/// Returns the server, for its log.
fn refused(first: &str, rest: &[&str]) -> Server {
    let mut server = bare_server();
    let mut c = server.client();
    let module = module();
    let mut words = vec![first, module.as_str()];
    words.extend(rest);
    let failed = module_command(&mut c, &words).expect_err("the load is refused");
    assert!(failed.to_string().contains("Error loading the extension"), "{failed}");
    survives(&mut server, &mut c, &format!("MODULE {first} … {}", rest.join(" ")));
    server
}

#[test]
fn a_bad_config_at_load_leaves_nothing_behind() {
    for config in [["throttle.max-buckets", "0"], ["throttle.mode", "bogus"], ["throttle.max-exact-limit", "200001"]] {
        let server = refused("LOADEX", &["CONFIG", config[0], config[1]]);
        assert!(server.log().contains(config[0]), "the log names the config: {}", server.log());
    }
}

#[test]
fn a_config_of_no_module_leaves_nothing_behind() {
    // The load itself succeeds; the server then unloads the module for the config it did not
    // take.
    refused("LOADEX", &["CONFIG", "throttle.colour", "blue"]);
}

#[test]
fn a_bad_module_argument_leaves_nothing_behind() {
    for args in [["colour", "blue"], ["max-buckets", "0"], ["mode", "bogus"]] {
        let server = refused("LOAD", &args);
        assert!(server.log().contains("throttle: "), "the log says why: {}", server.log());
    }
}

/// The redis-cell migration: with redis-cell loaded, loading this module fails (CL.THROTTLE is
/// taken) and leaves nothing behind; redis-cell keeps answering. Unloading redis-cell first, then
/// loading this module, moves CL.THROTTLE over (in one MULTI/EXEC, with no moment without it),
/// and the live keys carry over.
#[test]
fn a_command_name_already_taken_leaves_nothing_behind() {
    let cell = cell_module();
    let mut server = bare_server();
    let mut c = server.client();
    module_command(&mut c, &["LOAD", cell.to_str().unwrap()]).unwrap();
    let failed = module_command(&mut c, &["LOAD", &module()]).expect_err("CL.THROTTLE is taken");
    assert!(failed.to_string().contains("Error loading the extension"), "{failed}");
    assert!(server.log().contains("cannot register cl.throttle"), "the log says why: {}", server.log());
    let answer: String = redis::cmd("CL.THROTTLE").arg("k").arg(1).arg(1).arg(1).query(&mut c).unwrap();
    assert_eq!(answer, "cell", "redis-cell still owns CL.THROTTLE");
    if let Err(e) = every_event(&mut c) {
        panic!("after a load refused for a taken name, the server died ({e}): {}", server.log());
    }
    assert!(server.is_alive(), "{}", server.log());
    let mut c = server.client();

    // The migration: a TAT written by redis-cell (the same format), then the swap in one
    // transaction.
    let now_ms = harness::server_ms(&mut c);
    let tat_ns = (now_ms + 50_000) * 1_000_000; // burst 4 at 1 per 10 s, used up
    let _: () =
        redis::cmd("SET").arg("user").arg(tat_ns.to_string()).arg("PXAT").arg(now_ms + 50_000).query(&mut c).unwrap();
    let swapped: Vec<redis::Value> = redis::pipe()
        .atomic()
        .cmd("MODULE")
        .arg("UNLOAD")
        .arg("redis-cell")
        .cmd("MODULE")
        .arg("LOAD")
        .arg(module())
        .query(&mut c)
        .unwrap();
    assert_eq!(swapped, [redis::Value::Okay, redis::Value::Okay]);
    assert_eq!(
        throttle(&mut c, "CL.THROTTLE user 4 1 10")[..4],
        [1, 5, 0, 10],
        "redis-cell's key, read by this module"
    );
    if let Err(e) = every_event(&mut c) {
        panic!("after the swap, the server died ({e}): {}", server.log());
    }
    assert!(server.is_alive());
}

/// `MODULE LOAD` into a primary that already has a replica: the module sees it when it loads
/// and replicates its very first write (it never takes the server for a cache: see
/// `store/replication.rs`); the module-less replica holds what the primary holds.
#[test]
fn a_module_loaded_into_a_primary_with_a_replica_replicates_its_first_write() {
    let master = bare_server();
    let replica = master.replica(Options::default().without_module());
    let mut c = master.client();
    module_command(&mut c, &["LOAD", &module()]).expect("MODULE LOAD");
    for words in
        ["CL.COUNTER first 5 600", "CL.THROTTLE gcra 5 3 600", "CL.WINDOW log 10 600 2", "CL.ACQUIRE leases 5 600 job"]
    {
        throttle(&mut c, words);
    }
    master.wait_replicated(&replica);
    assert_eq!(harness::snapshot(&mut replica.client()), harness::snapshot(&mut c), "replica == master");
}
