//! The shared vectors (tests/vectors, read by every language's tests too): the core decides
//! every algorithm step as recorded and gives every recorded error text, and the recorded
//! replies are the reference models' (algorithms.json) and the contract's rounding
//! (replies.json). `VECTORS_GEN=1 cargo test -p redis-throttle-core vectors` writes the files
//! again from the models and the core: read the `git diff` before committing it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::calendar::{Calendar, Per, Zone};
use crate::limiter::{Algorithm, Request, Stored, Write};
use crate::time::{Instant, NANOS_PER_MILLI, Nanos, Unit};
use crate::{Caps, Effect, Reply, reference};

fn path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors").join(file)
}

fn generating() -> bool {
    std::env::var_os("VECTORS_GEN").is_some()
}

fn read(file: &str) -> Value {
    let text = std::fs::read_to_string(path(file)).unwrap_or_else(|e| panic!("tests/vectors/{file}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("tests/vectors/{file}: {e}"))
}

/// Writes `cases` under `about` with one case field, and each element of `lines`, per line:
/// diffs stay readable and every language's JSON reader takes it.
fn write(file: &str, about: &str, sections: &[(&str, Vec<Value>)]) {
    let mut out = format!("{{\n  \"about\": {},\n", Value::from(about));
    for (i, (name, items)) in sections.iter().enumerate() {
        let _ = writeln!(out, "  \"{name}\": [");
        for (j, item) in items.iter().enumerate() {
            let comma = if j + 1 < items.len() { "," } else { "" };
            let _ = writeln!(out, "    {}{comma}", render(item, 4));
        }
        let comma = if i + 1 < sections.len() { "," } else { "" };
        let _ = writeln!(out, "  ]{comma}");
    }
    out.push_str("}\n");
    std::fs::write(path(file), out).unwrap();
}

/// An object with its `steps` one per line; anything else on one line.
fn render(v: &Value, indent: usize) -> String {
    let Some(steps) = v.get("steps").and_then(Value::as_array) else { return v.to_string() };
    let mut head = v.clone();
    head.as_object_mut().unwrap().remove("steps");
    let head = head.to_string();
    let pad = " ".repeat(indent + 2);
    let lines: Vec<String> = steps.iter().map(|s| format!("{pad}{s}")).collect();
    format!("{}, \"steps\": [\n{}\n{}]}}", &head[..head.len() - 1], lines.join(",\n"), " ".repeat(indent))
}

// ---------------------------------------------------------------------------------------
// Algorithm steps.

/// 2027-01-01T00:00:00Z: ahead of any real clock, so a server's keys written at these instants
/// live while a test runs.
const START_MS: i64 = 1_798_761_600_000;

/// One call of a scripted case: `offset` ms after `START_MS`, the command's words.
struct Call {
    offset: i64,
    words: &'static str,
}

const fn at(offset: i64, words: &'static str) -> Call {
    Call { offset, words }
}

struct Case {
    name: &'static str,
    source: &'static str,
    calls: Vec<Call>,
    /// The contract's own replies, where it documents them: the model must give these.
    documented: Option<Vec<[i64; 5]>>,
}

fn cases() -> Vec<Case> {
    const MODEL: &str = "the reference model (core/src/reference)";
    vec![
        Case {
            name: "CL.THROTTLE: redis-cell's documented example",
            source: "SPEC.md, CL.THROTTLE vectors",
            calls: vec![at(0, "CL.THROTTLE user123 15 30 60"), at(0, "CL.THROTTLE user123 15 30 60")],
            documented: Some(vec![[0, 16, 15, -1, 2], [0, 16, 14, -1, 4]]),
        },
        Case {
            name: "CL.THROTTLE: burst 4, 1 per 10 s, until denied; more than the limit on a fresh key",
            source: "SPEC.md, CL.THROTTLE vectors",
            calls: vec![
                at(0, "CL.THROTTLE burst 4 1 10"),
                at(0, "CL.THROTTLE burst 4 1 10"),
                at(0, "CL.THROTTLE burst 4 1 10"),
                at(0, "CL.THROTTLE burst 4 1 10"),
                at(0, "CL.THROTTLE burst 4 1 10"),
                at(0, "CL.THROTTLE burst 4 1 10"),
                at(0, "CL.THROTTLE fresh 4 1 10 6"),
            ],
            documented: Some(vec![
                [0, 5, 4, -1, 10],
                [0, 5, 3, -1, 20],
                [0, 5, 2, -1, 30],
                [0, 5, 1, -1, 40],
                [0, 5, 0, -1, 50],
                [1, 5, 0, 10, 50],
                [1, 5, 5, -1, 0],
            ]),
        },
        Case {
            name: "CL.THROTTLE in ms: takes, a denial, a peek, time passing, refunds to full",
            source: MODEL,
            calls: vec![
                at(0, "CL.THROTTLE t:ms 2 3 1000 2 MS"),
                at(10, "CL.THROTTLE t:ms 2 3 1000 MS"),
                at(20, "CL.THROTTLE t:ms 2 3 1000 MS"),
                at(30, "CL.THROTTLE t:ms 2 3 1000 0 MS"),
                at(400, "CL.THROTTLE t:ms 2 3 1000 MS"),
                at(401, "CL.THROTTLE t:ms 2 3 1000 -1 MS"),
                at(402, "CL.THROTTLE t:ms 2 3 1000 -5 MS"),
                at(403, "CL.THROTTLE t:ms 2 3 1000 0 MS"),
            ],
            documented: None,
        },
        Case {
            name: "CL.WINDOW exact: the limit in any span, the oldest leaving first",
            source: MODEL,
            calls: vec![
                at(0, "CL.WINDOW w:exact 3 10"),
                at(1_000, "CL.WINDOW w:exact 3 10 2"),
                at(2_000, "CL.WINDOW w:exact 3 10"),
                at(9_999, "CL.WINDOW w:exact 3 10 0"),
                at(10_000, "CL.WINDOW w:exact 3 10"),
                at(11_500, "CL.WINDOW w:exact 3 10 2"),
                at(11_600, "CL.WINDOW w:exact 3 10 -1"),
                at(40_000, "CL.WINDOW w:exact 3 10 4"),
            ],
            documented: None,
        },
        Case {
            name: "CL.WINDOW with PRECISION, in ms",
            source: MODEL,
            calls: vec![
                at(0, "CL.WINDOW w:ring 5 60000 2 MS PRECISION 10000"),
                at(15_000, "CL.WINDOW w:ring 5 60000 3 MS PRECISION 10000"),
                at(30_000, "CL.WINDOW w:ring 5 60000 MS PRECISION 10000"),
                at(60_001, "CL.WINDOW w:ring 5 60000 MS PRECISION 10000"),
                at(70_000, "CL.WINDOW w:ring 5 60000 2 MS PRECISION 10000"),
                at(70_001, "CL.WINDOW w:ring 5 60000 -2 MS PRECISION 10000"),
            ],
            documented: None,
        },
        Case {
            name: "CL.BUCKET: draws, refills by whole intervals, never beyond capacity",
            source: MODEL,
            calls: vec![
                at(0, "CL.BUCKET b 5 2 10 3"),
                at(4_000, "CL.BUCKET b 5 2 10 3"),
                at(9_999, "CL.BUCKET b 5 2 10 0"),
                at(10_000, "CL.BUCKET b 5 2 10 3"),
                at(35_000, "CL.BUCKET b 5 2 10 1"),
                at(35_001, "CL.BUCKET b 5 2 10 6"),
                at(35_002, "CL.BUCKET b 5 2 10 -9"),
            ],
            documented: None,
        },
        Case {
            name: "CL.COUNTER: a fixed window from the first counted call",
            source: MODEL,
            calls: vec![
                at(0, "CL.COUNTER c 3 60"),
                at(30_000, "CL.COUNTER c 3 60 2"),
                at(30_001, "CL.COUNTER c 3 60"),
                at(59_999, "CL.COUNTER c 3 60 0"),
                at(60_000, "CL.COUNTER c 3 60"),
                at(60_001, "CL.COUNTER c 3 60 -1"),
                at(60_002, "CL.COUNTER c 3 60000 4 MS"),
            ],
            documented: None,
        },
        Case {
            name: "CL.ALL: all or nothing, the binding limiter and each one's details",
            source: MODEL,
            calls: vec![
                at(0, "CL.ALL 2 all:s all:h THROTTLE 1 1 1 COUNTER 3 3600 DETAILS"),
                at(0, "CL.ALL 2 all:s all:h THROTTLE 1 1 1 COUNTER 3 3600 DETAILS"),
                at(0, "CL.ALL 2 all:s all:h THROTTLE 1 1 1 COUNTER 3 3600 DETAILS"),
                at(2_000, "CL.ALL 2 all:s all:h THROTTLE 1 1 1 COUNTER 3 3600 QUANTITY 2 DETAILS"),
                at(2_000, "CL.ALL 2 all:s all:h THROTTLE 1 1 1 COUNTER 3 3600 DETAILS"),
                at(
                    2_500,
                    "CL.ALL 3 all:w all:b all:q WINDOW 10 60000 QUANTITY 4 BUCKET 5 1 1000 QUANTITY 2 QUOTA 100 PER HOUR QUANTITY 50 MS DETAILS",
                ),
                at(
                    2_600,
                    "CL.ALL 3 all:w all:b all:q WINDOW 10 60000 QUANTITY 4 BUCKET 5 1 1000 QUANTITY 4 QUOTA 100 PER HOUR QUANTITY 50 MS DETAILS",
                ),
                at(
                    2_700,
                    "CL.ALL 3 all:w all:b all:q WINDOW 10 60000 QUANTITY 0 BUCKET 5 1 1000 QUANTITY -2 QUOTA 100 PER HOUR QUANTITY 0 MS DETAILS",
                ),
            ],
            documented: None,
        },
        Case {
            name: "DEBIT: units counted whatever the limit says, then repaid by time",
            source: MODEL,
            calls: vec![
                at(0, "CL.THROTTLE d:t 2 1 1 5 DEBIT"),
                at(500, "CL.THROTTLE d:t 2 1 1 0"),
                at(2_500, "CL.THROTTLE d:t 2 1 1"),
                at(0, "CL.WINDOW d:w 3 10 4 DEBIT"),
                at(9_999, "CL.WINDOW d:w 3 10 0"),
                at(10_000, "CL.WINDOW d:w 3 10"),
                at(0, "CL.BUCKET d:b 5 1 2 7 DEBIT"),
                at(3_000, "CL.BUCKET d:b 5 1 2 DEBIT"),
                at(4_000, "CL.BUCKET d:b 5 1 2 0"),
                at(0, "CL.COUNTER d:c 3 60 2 DEBIT"),
                at(1_000, "CL.COUNTER d:c 3 60 2 DEBIT"),
                at(2_000, "CL.COUNTER d:c 3 60"),
                at(0, "CL.QUOTA d:q 10 PER HOUR QUANTITY 12 DEBIT MS"),
                at(0, "CL.ALL 2 d:a1 d:a2 COUNTER 5 60 QUANTITY 3 THROTTLE 1 1 1 QUANTITY 3 DEBIT DETAILS"),
                at(1_000, "CL.ALL 2 d:a1 d:a2 COUNTER 5 60 THROTTLE 1 1 1 DETAILS"),
            ],
            documented: None,
        },
        Case {
            name: "CL.QUOTA: per calendar minute in UTC and per day at +05:30",
            source: MODEL,
            calls: vec![
                at(0, "CL.QUOTA q:min 2 PER MINUTE"),
                at(20_000, "CL.QUOTA q:min 2 PER MINUTE QUANTITY 1 MS"),
                at(59_999, "CL.QUOTA q:min 2 PER MINUTE"),
                at(60_000, "CL.QUOTA q:min 2 PER MINUTE"),
                at(0, "CL.QUOTA q:day 10 PER DAY TZ +05:30 QUANTITY 4"),
                at(3_600_000, "CL.QUOTA q:day 10 PER DAY TZ +05:30 QUANTITY 7 MS"),
                at(3_600_001, "CL.QUOTA q:day 10 PER DAY TZ +05:30 QUANTITY -4"),
            ],
            documented: None,
        },
    ]
}

/// The models' state of one key.
#[derive(Clone)]
enum Model {
    Throttle(Option<i64>),
    Window(reference::window::Model),
    Bucket(reference::bucket::Model),
    Counter(reference::counter::Model),
    Quota(reference::quota::Model),
}

/// The words of a call: the command, the key, integers, and `MS`, `PRECISION p`, `PER`, `TZ`.
struct Words<'a> {
    command: &'a str,
    key: &'a str,
    numbers: Vec<i64>,
    unit: Unit,
    precision: Option<i64>,
    per: Option<&'a str>,
    tz: Option<&'a str>,
    debit: bool,
}

fn words(text: &str) -> Words<'_> {
    let mut it = text.split(' ');
    let (command, key) = (it.next().unwrap(), it.next().unwrap());
    let mut w = Words {
        command,
        key,
        numbers: Vec::new(),
        unit: Unit::Seconds,
        precision: None,
        per: None,
        tz: None,
        debit: false,
    };
    while let Some(word) = it.next() {
        match word {
            "MS" => w.unit = Unit::Millis,
            "PRECISION" => w.precision = Some(it.next().unwrap().parse().unwrap()),
            "PER" => w.per = Some(it.next().unwrap()),
            "TZ" => w.tz = Some(it.next().unwrap()),
            "QUANTITY" => {}
            "DEBIT" => w.debit = true,
            n => w.numbers.push(n.parse().unwrap()),
        }
    }
    w
}

/// The model's reply to a call at `now_ms`, in nanoseconds.
fn model_call(models: &mut HashMap<String, Model>, text: &str, now_ms: i64) -> [i128; 5] {
    let w = words(text);
    let ns = |v: i64| {
        i128::from(v)
            * match w.unit {
                Unit::Seconds => 1_000_000_000,
                Unit::Millis => 1_000_000,
            }
    };
    let now = now_ms * NANOS_PER_MILLI;
    let n = &w.numbers;
    let q = |i: usize| n.get(i).copied().unwrap_or(1);
    let model = models.entry(w.key.to_string()).or_insert_with(|| match w.command {
        "CL.THROTTLE" => Model::Throttle(None),
        "CL.WINDOW" => Model::Window(Default::default()),
        "CL.BUCKET" => Model::Bucket(reference::bucket::Model::new(n[0], n[1], ns(n[2]) as i64)),
        "CL.COUNTER" => Model::Counter(Default::default()),
        "CL.QUOTA" => Model::Quota(Default::default()),
        other => panic!("no model for {other}"),
    });
    match model {
        Model::Throttle(tat) => {
            let (reply, write) =
                reference::throttle::call(*tat, now, n[0], n[1], ns(n[2]) as i64, q(3), w.debit).expect("valid");
            if let Some(new) = write {
                *tat = new.map(|t| t as i64);
            }
            reply
        }
        Model::Window(m) => m.call(now.into(), n[0].into(), ns(n[1]), w.precision.map(ns), q(2).into(), w.debit),
        Model::Bucket(m) => m.call(now.into(), q(3).into(), w.debit),
        Model::Counter(m) => m.call(now.into(), n[0].into(), ns(n[1]), q(2).into(), w.debit),
        Model::Quota(m) => {
            let per = Per::parse(w.per.unwrap().as_bytes()).unwrap();
            let zone = w.tz.map_or(Zone::UTC, |z| Zone::parse(z.as_bytes()).unwrap());
            let (_, end) = reference::quota::period(&Calendar { per, zone, anchor_ms: None }, now_ms);
            m.call(now.into(), n[0].into(), i128::from(end) * i128::from(NANOS_PER_MILLI), q(1).into(), w.debit)
        }
    }
}

/// The single commands a CL.ALL call stands for (`CL.X key params… quantity [DEBIT] [MS]`, each
/// spec's own words), whether it asks for `DETAILS`, its unit, and whether it is a `DEBIT`.
fn specs(text: &str) -> (Vec<String>, bool, Unit, bool) {
    let w: Vec<&str> = text.split(' ').collect();
    let n: usize = w[1].parse().unwrap();
    let keys = &w[2..2 + n];
    let (mut singles, mut details, mut unit, mut debit): (Vec<Vec<String>>, bool, Unit, bool) =
        (Vec::new(), false, Unit::Seconds, false);
    for &word in &w[2 + n..] {
        match word {
            "THROTTLE" | "WINDOW" | "BUCKET" | "COUNTER" | "QUOTA" => {
                singles.push(vec![format!("CL.{word}"), keys[singles.len()].to_string()])
            }
            "DETAILS" => details = true,
            "DEBIT" => debit = true,
            "MS" => unit = Unit::Millis,
            other => singles.last_mut().unwrap().push(other.to_string()),
        }
    }
    let tail = format!("{}{}", if debit { " DEBIT" } else { "" }, if unit == Unit::Millis { " MS" } else { "" });
    (singles.into_iter().map(|s| s.join(" ") + &tail).collect(), details, unit, debit)
}

/// The model's reply to a call: a single command's five integers, or CL.ALL's (every limiter
/// at one instant, each as its single command; all effects or none; the binding one: among
/// the denying, the longest `retry_after` as replied (never counts as longest), else the fewest
/// `remaining`, the first of equals; then its 1-based index, and each one's five with
/// `DETAILS`). A `DEBIT` counts every limiter's units whatever the limits say.
fn model_reply(models: &mut HashMap<String, Model>, text: &str, now_ms: i64) -> Value {
    if !text.starts_with("CL.ALL ") {
        return json!(replied(model_call(models, text, now_ms), words(text).unit));
    }
    let (singles, details, unit, debit) = specs(text);
    let mut trial: HashMap<String, Model> = models.iter().map(|(k, m)| (k.clone(), m.clone())).collect();
    let each: Vec<[i64; 5]> = singles.iter().map(|s| replied(model_call(&mut trial, s, now_ms), unit)).collect();
    let denied: Vec<usize> = (0..each.len()).filter(|&i| each[i][0] == 1).collect();
    // A DEBIT is never refused: every limiter keeps its count.
    if denied.is_empty() || debit {
        *models = trial;
    }
    let binding = if denied.is_empty() {
        (0..each.len()).min_by_key(|&i| each[i][2]).unwrap()
    } else {
        let wait = |i: usize| if each[i][3] < 0 { i64::MAX } else { each[i][3] };
        let longest = denied.iter().map(|&i| wait(i)).max().unwrap();
        *denied.iter().find(|&&i| wait(i) == longest).unwrap()
    };
    let mut reply: Vec<Value> = each[binding].iter().map(|&v| json!(v)).collect();
    reply.push(json!(binding + 1));
    if details {
        reply.push(json!(each));
    }
    Value::Array(reply)
}

/// A model's reply as the command replies it, in the call's unit.
fn replied(r: [i128; 5], unit: Unit) -> [i64; 5] {
    let nanos = |v: i128| Nanos::new(i64::try_from(v).unwrap()).unwrap();
    Reply {
        limited: r[0] == 1,
        limit: r[1] as i64,
        remaining: r[2] as i64,
        retry_after: (r[3] >= 0).then(|| nanos(r[3])),
        reset_after: nanos(r[4]),
    }
    .to_array(unit)
}

/// Keys as a server holds them: the value and its absolute expiry (Unix ms).
#[derive(Default)]
struct Keys(HashMap<Vec<u8>, (Vec<u8>, i64)>);

impl Keys {
    /// The core's reply to a call (a limiter command, or CL.ALL) at `now_ms`, its effects applied.
    fn call(&mut self, text: &str, now_ms: i64) -> crate::Result<Value> {
        let args: Vec<&[u8]> = text.split(' ').map(str::as_bytes).collect();
        let now = Instant::from_nanos(now_ms * NANOS_PER_MILLI);
        self.0.retain(|_, (_, at)| now_ms <= *at);
        if text.starts_with("CL.ALL ") {
            let r = crate::all::Request::parse(&args[1..], &Caps::DEFAULT)?;
            let stored: Vec<_> = r.keys.iter().map(|k| self.stored(k)).collect();
            let outcome = crate::all::decide_charge(&r.limiters, &r.held, &stored, now, r.unit, r.charge)?;
            let mut reply: Vec<Value> = outcome.reply().to_array(r.unit).iter().map(|&v| json!(v)).collect();
            reply.push(json!(outcome.binding + 1));
            if r.details {
                reply.push(json!(outcome.decisions.iter().map(|d| d.reply.to_array(r.unit)).collect::<Vec<_>>()));
            }
            for (key, d) in r.keys.iter().zip(outcome.decisions) {
                self.apply(key, d.effect);
            }
            return Ok(Value::Array(reply));
        }
        let algorithm = Algorithm::ALL
            .into_iter()
            .find(|a| a.command().name.eq_ignore_ascii_case(text.split(' ').next().unwrap()))
            .expect("a limiter command");
        let r = Request::parse(algorithm, &args[1..], &Caps::DEFAULT)?;
        let d = r.limiter.decide_charge(self.stored(r.key), now, r.quantity, r.held, r.charge)?;
        self.apply(r.key, d.effect);
        Ok(json!(d.reply.to_array(r.unit)))
    }

    fn stored(&self, key: &[u8]) -> Option<Stored<'_>> {
        self.0.get(key).map(|(v, at)| Stored { value: v, expires_at_ms: Some(*at) })
    }

    fn apply(&mut self, key: &[u8], effect: Effect<Write>) {
        match effect {
            Effect::Nothing => {}
            Effect::Delete => {
                self.0.remove(key);
            }
            Effect::Store { state, expires_at } => {
                let value = match state {
                    Write::Integer(v) => v.to_string().into_bytes(),
                    Write::Tagged(tag, v) => [&[tag][..], v.to_string().as_bytes()].concat(),
                    Write::Patch(patch) => {
                        let mut value = self.0.get(key).map(|(v, _)| v.clone()).unwrap_or_default();
                        patch.apply(&mut value);
                        value
                    }
                };
                self.0.insert(key.to_vec(), (value, expires_at.ceil_millis()));
            }
        }
    }
}

fn generated_algorithms() -> Vec<Value> {
    cases()
        .into_iter()
        .map(|case| {
            let mut models = HashMap::new();
            let steps: Vec<Value> = case
                .calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let at_ms = START_MS + call.offset;
                    let reply = model_reply(&mut models, call.words, at_ms);
                    if let Some(documented) = &case.documented {
                        assert_eq!(
                            reply,
                            json!(documented[i]),
                            "{}: step {i}: the model against the contract",
                            case.name
                        );
                    }
                    json!({"at_ms": at_ms, "call": call.words.split(' ').collect::<Vec<_>>(), "reply": reply})
                })
                .collect();
            json!({"name": case.name, "source": case.source, "steps": steps})
        })
        .collect()
}

fn call_text(step: &Value) -> String {
    step["call"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect::<Vec<_>>().join(" ")
}

#[test]
fn algorithm_steps_are_the_models_and_the_core_decides_them() {
    let generated = generated_algorithms();
    if generating() {
        write(
            "algorithms.json",
            "Algorithm steps and their replies: each case on fresh keys, each step a call at an instant (Unix ms), replies from the reference models (core/src/reference) or the contract's documented vectors. Read by core/src/vectors.rs, tests/twin.rs (the module and the twin), and written by VECTORS_GEN=1 cargo test -p redis-throttle-core vectors.",
            &[("cases", generated.clone())],
        );
    }
    let recorded = read("algorithms.json");
    let cases = recorded["cases"].as_array().expect("cases");
    assert_eq!(cases, &generated, "tests/vectors/algorithms.json is not the models' replies (VECTORS_GEN=1 writes it)");
    for case in cases {
        let mut keys = Keys::default();
        for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let call = call_text(step);
            let got = keys.call(&call, step["at_ms"].as_i64().unwrap()).unwrap_or_else(|e| panic!("{call}: {e}"));
            assert_eq!(got, step["reply"], "{}: step {i}: {call}", case["name"]);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Error texts.

/// Calls each refused with one error, the contract's documented texts first.
const ERRORS: [(&str, Option<&str>); 16] = [
    ("CL.THROTTLE k 1.5 30 60", Some("ERR value is not an integer or out of range")),
    ("CL.THROTTLE k 0x10 30 60", Some("ERR value is not an integer or out of range")),
    ("CL.THROTTLE k 15 30 60 1 FOO", Some("ERR syntax error")),
    ("CL.THROTTLE k -1 30 60", None),
    ("CL.THROTTLE k 15 0 60", None),
    ("CL.THROTTLE k 15 30 0", None),
    ("CL.WINDOW k 0 60", None),
    ("CL.WINDOW k 10 60 PRECISION 0", None),
    ("CL.WINDOW k 10 60 PRECISION 61", None),
    ("CL.BUCKET k 10 0 60", None),
    ("CL.BUCKET k 10 1 0", None),
    ("CL.COUNTER k 0 60", None),
    ("CL.COUNTER k 1 1000000000001 MS", None),
    ("CL.QUOTA k 10 PER FORTNIGHT", None),
    ("CL.WINDOW k 10 60 100001 DEBIT", None),
    ("CL.COUNTER k 10 60 -1 DEBIT", None),
];

/// Calls refused with an error only after others (`before`, at the same instant on the same
/// fresh keys): the state they leave is what the error is about.
const ERRORS_AFTER: [(&[&str], &str); 1] = [
    // An exact log holds at most twice throttle.max-exact-limit units.
    (&["CL.WINDOW k 10 60 100000 DEBIT", "CL.WINDOW k 10 60 100000 DEBIT"], "CL.WINDOW k 10 60 1 DEBIT"),
];

/// The error of `call` on fresh keys after the calls `before`.
fn error_after(before: &[&str], call: &str) -> String {
    let mut keys = Keys::default();
    for b in before {
        keys.call(b, START_MS).unwrap_or_else(|e| panic!("{b}: {e}"));
    }
    keys.call(call, START_MS).expect_err(call).to_string()
}

fn generated_errors() -> Vec<Value> {
    let single = ERRORS.iter().map(|&(call, documented)| {
        let error = error_after(&[], call);
        if let Some(text) = documented {
            assert_eq!(error, text, "{call}: the core against the contract");
        }
        json!({"call": call.split(' ').collect::<Vec<_>>(), "error": error})
    });
    let after = ERRORS_AFTER.iter().map(|&(before, call)| {
        let error = error_after(before, call);
        let before: Vec<Vec<&str>> = before.iter().map(|b| b.split(' ').collect()).collect();
        json!({"before": before, "call": call.split(' ').collect::<Vec<_>>(), "error": error})
    });
    single.chain(after).collect()
}

#[test]
fn error_texts_are_the_cores() {
    let generated = generated_errors();
    if generating() {
        write(
            "errors.json",
            "Calls refused with an error, and its text (after the calls `before`, if any, on the same fresh keys): the contract's documented texts, then the module's own (written by VECTORS_GEN=1 cargo test -p redis-throttle-core vectors from the core, checked by tests/twin.rs on the module and the twin). Read by core/src/vectors.rs, tests/twin.rs and the Python package's tests (the texts it gives before sending).",
            &[("errors", generated.clone())],
        );
    }
    let recorded = read("errors.json");
    for vector in recorded["errors"].as_array().expect("errors") {
        let call = call_text(vector);
        let before: Vec<String> =
            vector["before"].as_array().into_iter().flatten().map(|b| call_text(&json!({"call": b}))).collect();
        let got = error_after(&before.iter().map(String::as_str).collect::<Vec<_>>(), &call);
        assert_eq!(got, vector["error"].as_str().unwrap(), "{call}");
    }
    assert_eq!(
        recorded["errors"].as_array().unwrap(),
        &generated,
        "tests/vectors/errors.json (VECTORS_GEN=1 writes it)"
    );
}

// ---------------------------------------------------------------------------------------
// Reply times: nanoseconds to the integers replied.

/// Reply times in nanoseconds (`-1`: no retry time).
const TIMES: [i64; 10] =
    [-1, 0, 1, 999_999, 1_000_000, 1_000_001, 999_999_999, 1_000_000_000, 1_000_999_999, 1_001_000_000];

/// The contract's rounding, stated on its own: seconds as redis-cell (whole seconds, plus one
/// when the leftover is at least a millisecond), milliseconds rounded up.
fn documented_rounding(ns: i64) -> (i64, i64) {
    if ns < 0 {
        return (-1, -1);
    }
    let seconds = ns / 1_000_000_000 + i64::from(ns % 1_000_000_000 >= 1_000_000);
    let millis = (ns + 999_999) / 1_000_000;
    (seconds, millis)
}

#[test]
fn reply_times_round_as_recorded() {
    let recorded = read("replies.json");
    let times = recorded["times"].as_array().expect("times");
    let generated: Vec<Value> = TIMES
        .iter()
        .map(|&ns| {
            let (seconds, millis) = documented_rounding(ns);
            json!({"ns": ns, "seconds": seconds, "millis": millis})
        })
        .collect();
    assert_eq!(times, &generated, "tests/vectors/replies.json's times are the contract's rounding");
    for t in times {
        let ns = t["ns"].as_i64().unwrap();
        let reply = Reply {
            limited: true,
            limit: 1,
            remaining: 0,
            retry_after: (ns >= 0).then(|| Nanos::new(ns).unwrap()),
            reset_after: Nanos::new(ns.max(0)).unwrap(),
        };
        assert_eq!(reply.to_array(Unit::Seconds)[3], t["seconds"].as_i64().unwrap(), "{ns} ns in seconds");
        assert_eq!(reply.to_array(Unit::Millis)[3], t["millis"].as_i64().unwrap(), "{ns} ns in ms");
    }
}
