//! The manual against a real server: every `redis-cli` example in README.md and docs/src runs,
//! and its replies are the ones shown; every command the module registers has a page and every
//! page a registered command, showing the server's arity and COMMAND DOCS's syntax, summary,
//! complexity and since.
//!
//! The convention (docs/src/testing.md, "Examples"): a fenced block whose info string starts with
//! `redis-cli` holds lines `> COMMAND args…` (typed at redis-cli's prompt), each followed by the
//! reply as redis-cli prints it in a terminal. Each block runs in one redis-cli on a server with
//! the module and the Functions library loaded, emptied first (`FLUSHALL`, `CL.TOP RESET`,
//! `throttle.mode enforce`, keyspace events off) unless its info string says `continue` (then it
//! goes on from the previous block of the page). The fields of a reply that time lowers
//! (`retry_after`, `reset_after`, CL.PACE's `wait` and `queued`) may be lower than shown, as the
//! block takes time to run: by at most 1, or N when the info string says `tolerance=N`. Every other line must be
//! equal. Every fenced block has an info string, so a command example cannot hide in a bare block.
//!
//! skip twin: the manual's examples and pages against the module's commands.
//! skip containers: starts servers of its own.

mod harness;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use harness::Server;

struct Block {
    file: PathBuf,
    line: usize,
    info: String,
    body: Vec<String>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs/src"), &mut out);
    out
}

/// Every fenced block of a page, with its info string and its lines.
fn blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    // (indent, fence, line of the opening fence, info string, body)
    let mut open: Option<(String, String, usize, String, Vec<String>)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence: String = trimmed.chars().take_while(|&c| c == '`').collect();
        match &mut open {
            None => {
                if fence.len() >= 3 {
                    let indent = line.len() - trimmed.len();
                    open = Some((
                        " ".repeat(indent),
                        fence.clone(),
                        n + 1,
                        trimmed[fence.len()..].trim().to_string(),
                        Vec::new(),
                    ));
                }
            }
            Some((indent, opening, start, info, body)) => {
                // CommonMark: closed by a fence at least as long, with nothing after it.
                if fence.len() >= opening.len() && trimmed.trim_end() == fence {
                    out.push(Block {
                        file: file.to_path_buf(),
                        line: *start,
                        info: info.clone(),
                        body: std::mem::take(body),
                    });
                    open = None;
                } else {
                    body.push(line.strip_prefix(indent.as_str()).unwrap_or(line).to_string());
                }
            }
        }
    }
    assert!(open.is_none(), "{}: a fenced block is never closed", file.display());
    out
}

/// The positions (1-based, innermost) of the fields of a command's reply that time lowers: the
/// time fields, and CL.PACE's `queued` (a slot that ends leaves the queue).
fn time_fields(command: &str) -> &'static [usize] {
    match command.split_whitespace().next().unwrap_or("").to_ascii_uppercase().as_str() {
        "CL.THROTTLE" | "CL.WINDOW" | "CL.BUCKET" | "CL.COUNTER" | "CL.QUOTA" | "CL.ACQUIRE" | "CL.ALL" | "CL.EACH" => {
            &[4, 5]
        }
        "CL.PACE" => &[2, 3, 4, 5],
        "FCALL" | "EVALSHA" => &[4, 5],
        _ => &[],
    }
}

/// A reply line's innermost position and integer: `7) 2) 4) (integer) 10` → (4, 10).
fn positioned_integer(line: &str) -> Option<(usize, i64)> {
    let (head, value) = line.rsplit_once("(integer) ")?;
    let position = head.trim_end().strip_suffix(')')?.rsplit(' ').next()?.parse().ok()?;
    Some((position, value.trim().parse().ok()?))
}

fn same(shown: &str, got: &str, command: &str, tolerance: i64) -> bool {
    if shown.trim_end() == got.trim_end() {
        return true;
    }
    let (Some((ps, vs)), Some((pg, vg))) = (positioned_integer(shown), positioned_integer(got)) else {
        return false;
    };
    let prefix = |l: &str| l.rsplit_once("(integer) ").map(|(h, _)| h.trim_end().to_string());
    ps == pg
        && prefix(shown) == prefix(got)
        && time_fields(command).contains(&ps)
        && vs >= 0
        && (vs - tolerance.min(vs)..=vs).contains(&vg)
}

fn option(info: &str, name: &str) -> Option<String> {
    info.split_whitespace().skip(1).find_map(|w| w.strip_prefix(&format!("{name}=")).map(String::from))
}

/// A line redis-cli prints between two replies (the reply to `ECHO` of it), so each command's
/// reply is known whatever its length.
const MARK: &str = "--docs-next--";

/// Runs a block; `Err` with the block's body as it replied (for `DOCS_GEN=1`) and what differs.
fn run(server: &Server, block: &Block, fresh: bool) -> Result<(), (Vec<String>, String)> {
    let tolerance: i64 = option(&block.info, "tolerance").map_or(1, |t| t.parse().expect("tolerance=N"));
    // Commands and the reply lines shown after each.
    let mut calls: Vec<(String, Vec<String>)> = Vec::new();
    for line in &block.body {
        if let Some(command) = line.strip_prefix("> ") {
            calls.push((command.to_string(), Vec::new()));
        } else if let Some((_, reply)) = calls.last_mut() {
            reply.push(line.clone());
        } else {
            return Err((block.body.clone(), format!("a line before the first `> ` command: {line:?}")));
        }
    }
    if calls.is_empty() {
        return Err((block.body.clone(), "no `> ` command".into()));
    }
    if fresh {
        let mut c = server.client();
        redis::cmd("FLUSHALL").exec(&mut c).unwrap();
        redis::cmd("CL.TOP").arg("RESET").exec(&mut c).unwrap();
        redis::cmd("CONFIG").arg("SET").arg("throttle.mode").arg("enforce").exec(&mut c).unwrap();
        redis::cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("").exec(&mut c).unwrap();
    }
    let mut input = String::new();
    for (command, _) in &calls {
        input.push_str(&format!("{command}\nECHO {MARK}\n"));
    }
    let mut child = Command::new(harness::cli_command())
        .args(["-p", &server.port.to_string(), "--no-raw"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redis-cli");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mark = format!("\"{MARK}\"");
    let mut replies: Vec<Vec<String>> = vec![Vec::new()];
    for line in text.lines() {
        if line == mark {
            replies.push(Vec::new());
        } else {
            replies.last_mut().unwrap().push(line.to_string());
        }
    }
    replies.pop(); // after the last mark: nothing
    let mut body = Vec::new();
    let mut differs = Vec::new();
    for (i, (command, shown)) in calls.iter().enumerate() {
        let replied = replies.get(i).cloned().unwrap_or_default();
        let ok =
            replied.len() == shown.len() && shown.iter().zip(&replied).all(|(s, g)| same(s, g, command, tolerance));
        body.push(format!("> {command}"));
        if ok {
            body.extend(shown.iter().cloned());
        } else {
            body.extend(replied.iter().cloned());
            differs.push(format!("> {command}\n--- shown\n{}\n--- replied\n{}", shown.join("\n"), replied.join("\n")));
        }
    }
    if replies.len() != calls.len() {
        differs.push(format!(
            "{} replies to {} commands: {}",
            replies.len(),
            calls.len(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if differs.is_empty() { Ok(()) } else { Err((body, differs.join("\n"))) }
}

/// Every `redis-cli` block of README.md and docs/src replies as shown. `DOCS_GEN=1` writes the
/// replies the server gave into the blocks that differ (check them with `git diff`).
#[test]
fn every_redis_cli_example_replies_as_shown() {
    let generate = std::env::var_os("DOCS_GEN").is_some();
    let server = Server::start();
    let mut c = server.client();
    let library = std::fs::read_to_string(root().join("functions/throttle.lua")).unwrap();
    let _: String = redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(library).query(&mut c).unwrap();
    let mut failures = Vec::new();
    let mut ran = 0;
    for page in pages() {
        let mut rewrites: Vec<(usize, usize, Vec<String>)> = Vec::new();
        for block in blocks(&page) {
            let at = format!("{}:{}", block.file.strip_prefix(root()).unwrap().display(), block.line);
            let kind = block.info.split_whitespace().next().unwrap_or("");
            if kind.is_empty() {
                failures.push(format!("{at}: a fenced block without an info string (redis-cli, sh, text, …)"));
                continue;
            }
            if kind != "redis-cli" {
                continue;
            }
            let fresh = !block.info.split_whitespace().any(|w| w == "continue");
            if let Err((body, e)) = run(&server, &block, fresh) {
                if generate {
                    rewrites.push((block.line, block.body.len(), body));
                } else {
                    failures.push(format!("{at}: {e}"));
                }
            }
            ran += 1;
        }
        if !rewrites.is_empty() {
            let text = std::fs::read_to_string(&page).unwrap();
            let mut lines: Vec<String> = text.lines().map(String::from).collect();
            for (start, len, body) in rewrites.into_iter().rev() {
                // `start` is the 1-based line of the opening fence: the body follows it.
                lines.splice(start..start + len, body);
            }
            std::fs::write(&page, lines.join("\n") + "\n").unwrap();
        }
    }
    assert!(failures.is_empty(), "{} of {ran} examples differ:\n\n{}", failures.len(), failures.join("\n\n"));
    assert!(ran > 20, "only {ran} redis-cli examples found");
}

/// The pages of docs/src/commands are the commands the module registers, and each shows the
/// server's arity and the syntax (rendered from COMMAND DOCS's arguments), summary, complexity
/// and since that COMMAND DOCS gives (the block generated from core's tables, checked against
/// them by core/tests/docs.rs: both derive from the one table).
#[test]
fn every_registered_command_has_a_page() {
    let server = Server::start();
    let mut c = server.client();
    let mut registered: Vec<String> =
        redis::cmd("COMMAND").arg("LIST").arg("FILTERBY").arg("MODULE").arg("throttle").query(&mut c).unwrap();
    registered.sort();
    let dir = root().join("docs/src/commands");
    let mut paged: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".md").to_string())
        .collect();
    paged.sort();
    assert_eq!(paged, registered, "docs/src/commands/*.md against COMMAND LIST FILTERBY MODULE throttle");
    for name in registered {
        let info: Vec<redis::Value> = redis::cmd("COMMAND").arg("INFO").arg(&name).query(&mut c).unwrap();
        let redis::Value::Array(fields) = &info[0] else { panic!("COMMAND INFO {name}: {info:?}") };
        let arity: i64 = redis::from_redis_value(fields[1].clone()).unwrap();
        let page = std::fs::read_to_string(dir.join(format!("{name}.md"))).unwrap();
        assert!(
            page.contains(&format!("| arity | {arity}: ")),
            "docs/src/commands/{name}.md does not show the server's arity {arity}"
        );
        // The syntax, summary, complexity and since that COMMAND DOCS gives.
        let docs: redis::Value = redis::cmd("COMMAND").arg("DOCS").arg(&name).query(&mut c).unwrap();
        let docs = map(&map(&docs)[0].1);
        let text = |field: &str| docs.iter().find(|(k, _)| k == field).map(|(_, v)| string(v)).unwrap_or_default();
        let args = docs.iter().find(|(k, _)| k == "arguments").map(|(_, v)| v.clone());
        let words: Vec<String> = match &args {
            Some(redis::Value::Array(args)) => args.iter().map(|a| syntax(&map(a))).collect(),
            _ => Vec::new(),
        };
        let syntax = std::iter::once(name.to_uppercase()).chain(words).collect::<Vec<_>>().join(" ");
        for shown in [
            format!("```syntax\n{syntax}\n```"),
            text("summary"),
            format!("| complexity | {} |", text("complexity")),
            format!("| since | {} |", text("since")),
        ] {
            assert!(page.contains(&shown), "docs/src/commands/{name}.md does not show COMMAND DOCS's {shown:?}");
        }
    }
}

fn string(v: &redis::Value) -> String {
    redis::from_redis_value(v.clone()).unwrap_or_default()
}

/// A RESP2 map (a flat array of keys and values) or a RESP3 map, as pairs.
fn map(v: &redis::Value) -> Vec<(String, redis::Value)> {
    match v {
        redis::Value::Map(pairs) => pairs.iter().map(|(k, v)| (string(k), v.clone())).collect(),
        redis::Value::Array(items) => {
            items.chunks(2).map(|kv| (string(&kv[0]), kv.get(1).cloned().unwrap_or(redis::Value::Nil))).collect()
        }
        _ => Vec::new(),
    }
}

/// One argument of COMMAND DOCS as the manual writes it: `max_burst`, `[MS]`,
/// `[MAXWAIT maxwait]`, `key [key ...]`, a oneof by its name.
fn syntax(arg: &[(String, redis::Value)]) -> String {
    let field = |f: &str| arg.iter().find(|(k, _)| k == f).map(|(_, v)| v.clone());
    let name = field("name").map(|v| string(&v)).unwrap_or_default();
    let kind = field("type").map(|v| string(&v)).unwrap_or_default();
    let token = field("token").map(|v| string(&v));
    let flags: Vec<String> = match field("flags") {
        Some(redis::Value::Array(f)) => f.iter().map(string).collect(),
        Some(redis::Value::Set(f)) => f.iter().map(string).collect(),
        _ => Vec::new(),
    };
    let word = match (kind.as_str(), token) {
        ("pure-token", Some(token)) => token,
        (_, Some(token)) => format!("{token} {name}"),
        _ => name,
    };
    let multiple = flags.iter().any(|f| f == "multiple");
    let word = if multiple { format!("{word} [{word} ...]") } else { word };
    if flags.iter().any(|f| f == "optional") { format!("[{word}]") } else { word }
}
