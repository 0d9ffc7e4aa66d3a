//! The README's example cannot rot: `cargo run -p redis-throttle-client --example quickstart`
//! against a server with the module (as against `make run`'s), its output checked.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::process::Command;

use harness::Server;

#[test]
fn the_quickstart_example_runs_against_a_server() {
    let server = Server::start();
    let out = Command::new(env!("CARGO"))
        .args(["run", "--quiet", "-p", "redis-throttle-client", "--example", "quickstart"])
        .current_dir(harness::workspace_root())
        .env("REDIS_URL", server.url())
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the example failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "connected: Module",
        "call 5: Allowed, remaining 0",
        "call 6: Denied",
        "check_all: Allowed, binding policy #0, remaining 4",
        "monthly quota: Allowed, remaining 99500",
        "test kit: Denied",
        "test kit, a minute later: Allowed",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from the example's output:\n{stdout}");
    }
}
