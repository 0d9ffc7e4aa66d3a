//! The Functions twin backend of the harness (`THROTTLE_BACKEND=twin` or `twin-eval`): servers
//! start without the module and with the twin loaded instead (`functions/throttle.lua` through
//! `FUNCTION LOAD`, or its EVAL form, `scripts/twin.sh eval`, through `SCRIPT LOAD`), and
//! every limiter command a test sends through the harness (`call`, `throttle`, `error_of`,
//! `in_multi`, `command`) is rewritten to its twin:
//!
//! | test sends | twin | twin-eval |
//! |---|---|---|
//! | `CL.X key args…` | `FCALL cl_x 1 key args…` | `EVALSHA <sha> 1 key cl_x args…` |
//! | `CL.ALL n k1…kn specs…` | `FCALL cl_all n k1…kn specs…` | `EVALSHA <sha> n k1…kn cl_all specs…` |
//!
//! Tests that need the module itself (registration, COMMAND DOCS, panics, the module inside
//! scripts, ACL rules naming the commands) say so beside themselves: `//! skip twin: why` in a
//! file's header, `/// skip twin: why` in a test's doc comment, which `scripts/twin-tests.sh`
//! skips (`scripts/skips.sh twin` lists them), as `skip containers` does for containers.
//!
//! Also the sources of the twin's forms for tests that load them themselves (the differential
//! test loads the module and the twin's test build into one server), and the library as
//! assembled from functions/src (tests/twin.rs compares it with the committed file).

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use redis::Connection;

/// Which form of the twin serves the limiter commands, if any.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Form {
    /// `FUNCTION LOAD` + `FCALL` (the product).
    Library,
    /// One script, `SCRIPT LOAD` + `EVALSHA` (for clients or services without FCALL).
    Eval,
}

/// The twin backend chosen by `THROTTLE_BACKEND`, if any.
pub fn backend() -> Option<Form> {
    match std::env::var("THROTTLE_BACKEND").as_deref() {
        Ok("twin") => Some(Form::Library),
        Ok("twin-eval") => Some(Form::Eval),
        _ => None,
    }
}

fn root() -> &'static Path {
    super::workspace_root()
}

/// A form of the twin as `scripts/twin.sh` generates it from the library; `test` gives the
/// test build (a pinnable clock, see `CLOCK_KEY`).
pub fn source(form: Form, test: bool) -> String {
    let mut cmd = Command::new(root().join("scripts/twin.sh"));
    cmd.arg(match form {
        Form::Library => "library",
        Form::Eval => "eval",
    });
    if test {
        cmd.arg("test");
    }
    let out = cmd.output().expect("run scripts/twin.sh");
    assert!(out.status.success(), "scripts/twin.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("the twin's source is UTF-8")
}

/// The library as `make twin` assembles it from functions/src (`scripts/twin.sh assemble`).
pub fn assembled() -> String {
    let out =
        Command::new(root().join("scripts/twin.sh")).arg("assemble").output().expect("run scripts/twin.sh assemble");
    assert!(out.status.success(), "scripts/twin.sh assemble failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("the twin's sources are UTF-8")
}

/// The twin as a user loads it: the library file itself, or the EVAL form generated from it.
pub fn shipped(form: Form) -> String {
    match form {
        Form::Library => {
            std::fs::read_to_string(root().join("functions/throttle.lua")).expect("read functions/throttle.lua")
        }
        Form::Eval => source(Form::Eval, false),
    }
}

/// The key the test build's clock reads (Unix µs), when it exists.
pub const CLOCK_KEY: &str = "throttle-twin-test:clock";

/// Loads a form of the twin into a server; returns the script's SHA for the EVAL form.
pub fn load(c: &mut Connection, form: Form, code: &str) -> Option<String> {
    match form {
        Form::Library => {
            let name: String =
                redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(code).query(c).expect("FUNCTION LOAD the twin");
            assert_eq!(name, "throttle");
            None
        }
        Form::Eval => Some(redis::cmd("SCRIPT").arg("LOAD").arg(code).query(c).expect("SCRIPT LOAD the twin")),
    }
}

static EVAL_SHA: OnceLock<String> = OnceLock::new();

/// Called when a server of the twin backend has started: loads the shipped twin. A replica
/// gets the library from its master (FUNCTION LOAD is refused on a read-only replica); the EVAL
/// form's script cache is per server, so every server loads it.
pub fn after_launch(c: &mut Connection) {
    match backend() {
        None => {}
        Some(Form::Library) => {
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(c).expect("ROLE");
            if matches!(role.first(), Some(redis::Value::BulkString(b)) if b.as_slice() == b"master") {
                load(c, Form::Library, &shipped(Form::Library));
            }
        }
        Some(Form::Eval) => {
            let sha = load(c, Form::Eval, &shipped(Form::Eval)).expect("a SHA");
            assert_eq!(EVAL_SHA.get_or_init(|| sha.clone()), &sha);
        }
    }
}

const SINGLE: &[(&[u8], &str)] = &[
    (b"CL.THROTTLE", "cl_throttle"),
    (b"CL.WINDOW", "cl_window"),
    (b"CL.BUCKET", "cl_bucket"),
    (b"CL.COUNTER", "cl_counter"),
    (b"CL.QUOTA", "cl_quota"),
];

/// A command as the twin backend sends it (unchanged without it, or for other commands).
pub fn map(args: &[&[u8]]) -> Vec<Vec<u8>> {
    let owned = || args.iter().map(|a| a.to_vec()).collect();
    let Some(form) = backend() else { return owned() };
    let Some((&name, rest)) = args.split_first() else { return owned() };
    let multi = [(b"CL.ALL".as_slice(), "cl_all"), (b"CL.EACH".as_slice(), "cl_each")];
    let (function, numkeys, rest): (&str, Vec<u8>, &[&[u8]]) =
        if let Some((_, f)) = multi.iter().find(|(cmd, _)| name.eq_ignore_ascii_case(cmd)) {
            match rest.split_first() {
                Some((&n, rest)) => (*f, n.to_vec(), rest),
                None => (*f, b"0".to_vec(), rest),
            }
        } else if let Some((_, f)) = SINGLE.iter().find(|(cmd, _)| name.eq_ignore_ascii_case(cmd)) {
            let keys = if rest.is_empty() { b"0".to_vec() } else { b"1".to_vec() };
            (*f, keys, rest)
        } else {
            return owned();
        };
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(args.len() + 3);
    match form {
        Form::Library => {
            out.extend([b"FCALL".to_vec(), function.as_bytes().to_vec(), numkeys]);
            out.extend(rest.iter().map(|a| a.to_vec()));
        }
        Form::Eval => {
            let sha = EVAL_SHA.get().expect("the EVAL form is loaded when a server starts");
            let keys =
                std::str::from_utf8(&numkeys).ok().and_then(|n| n.parse::<usize>().ok()).unwrap_or(0).min(rest.len());
            out.extend([b"EVALSHA".to_vec(), sha.as_bytes().to_vec(), numkeys]);
            out.extend(rest[..keys].iter().map(|a| a.to_vec()));
            out.push(function.as_bytes().to_vec());
            out.extend(rest[keys..].iter().map(|a| a.to_vec()));
        }
    }
    out
}
