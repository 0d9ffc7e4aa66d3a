//! The runs behind the pictures: real calls to a real server, timed by the client's clock
//! (or the server's `TIME` where the picture shows the server's schedule).

use std::time::{Duration, Instant};

use redis::{Connection, RedisResult, Value};

/// Sleeps until `at` after `start` (returns at once when that moment has passed).
fn sleep_until(start: Instant, at_ms: f64) {
    let target = start + Duration::from_secs_f64(at_ms / 1000.0);
    let now = Instant::now();
    if target > now {
        std::thread::sleep(target - now);
    }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// A small deterministic generator (the pictures are the same shape on every run).
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed)
    }
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

fn ints(value: &Value) -> Vec<i64> {
    match value {
        Value::Array(items) => items
            .iter()
            .filter_map(|v| match v {
                Value::Int(i) => Some(*i),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn five(value: &Value) -> RedisResult<[i64; 5]> {
    let v = ints(value);
    v.get(..5).and_then(|s| s.try_into().ok()).ok_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::Parse, "expected five integers", format!("{value:?}")))
    })
}

// ---------------------------------------------------------------------------------------------
// One arrival pattern through the four algorithms.

/// A phase of the arrival pattern, for the picture's background: `[from, to)` in ms.
pub struct Phase {
    pub from_ms: f64,
    pub to_ms: f64,
    pub label: &'static str,
}

pub struct Algorithm {
    pub name: &'static str,
    /// The command as called, without the key (for the caption).
    pub args: &'static [&'static str],
    pub about: &'static str,
}

/// Every limiter: 10 per second, in milliseconds.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm {
        name: "CL.THROTTLE",
        args: &["9", "10", "1000", "1", "MS"],
        about: "GCRA: a burst of 10, then one every 100 ms",
    },
    Algorithm { name: "CL.WINDOW", args: &["10", "1000", "1", "MS"], about: "sliding window: at most 10 in any 1 s" },
    Algorithm {
        name: "CL.BUCKET",
        args: &["10", "10", "1000", "1", "MS"],
        about: "token bucket: 10 tokens, 10 more every whole second",
    },
    Algorithm {
        name: "CL.COUNTER",
        args: &["10", "1000", "1", "MS"],
        about: "fixed window: 10 per 1 s window, opened by the first call",
    },
];

pub struct Call {
    pub t_ms: f64,
    pub reply: [i64; 5],
}

pub struct AlgorithmsRun {
    pub phases: Vec<Phase>,
    /// One list of calls per entry of `ALGORITHMS`.
    pub calls: Vec<Vec<Call>>,
    pub end_ms: f64,
}

/// A burst of 20, then 20 per second (twice the rate) for 3 s, a pause of 1.5 s, then 5 per
/// second (half the rate) for 1 s. Each arrival calls the four commands (on four keys) in one
/// pipeline, so they see the same arrivals within a fraction of a millisecond.
pub fn algorithms(con: &mut Connection) -> RedisResult<AlgorithmsRun> {
    let phases = vec![
        Phase { from_ms: 0.0, to_ms: 150.0, label: "burst of 20" },
        Phase { from_ms: 500.0, to_ms: 3500.0, label: "20/s: twice the rate" },
        Phase { from_ms: 3500.0, to_ms: 5000.0, label: "pause" },
        Phase { from_ms: 5000.0, to_ms: 6000.0, label: "5/s: half the rate" },
    ];
    let mut arrivals: Vec<f64> = (0..20).map(|_| 0.0).collect();
    arrivals.extend((0..60).map(|i| 500.0 + 50.0 * f64::from(i)));
    arrivals.extend((0..5).map(|i| 5000.0 + 200.0 * f64::from(i)));
    let prefix = format!("plots:alg:{}", std::process::id());
    let mut calls: Vec<Vec<Call>> = ALGORITHMS.iter().map(|_| Vec::new()).collect();
    let start = Instant::now();
    for &at in &arrivals {
        sleep_until(start, at);
        let t_ms = ms_since(start);
        let mut pipe = redis::pipe();
        for alg in &ALGORITHMS {
            pipe.cmd(alg.name).arg(format!("{prefix}:{}", alg.name)).arg(alg.args);
        }
        let replies: Vec<Value> = pipe.query(con)?;
        for (list, reply) in calls.iter_mut().zip(&replies) {
            list.push(Call { t_ms, reply: five(reply)? });
        }
    }
    Ok(AlgorithmsRun { phases, calls, end_ms: 6200.0 })
}

// ---------------------------------------------------------------------------------------------
// CL.PACE: eight workers, one schedule.

pub const PACE_COUNT: u32 = 50;
pub const PACE_PERIOD_MS: u32 = 1000;

pub struct Slot {
    pub worker: usize,
    /// When the worker asked (server clock, ms since the run began).
    pub asked_ms: f64,
    /// The slot it was given (from the schedule's stored TAT).
    pub slot_ms: f64,
    /// When it acted (server clock, after sleeping the wait).
    pub acted_ms: f64,
}

fn server_us(con: &mut Connection) -> RedisResult<i64> {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con)?;
    Ok(s * 1_000_000 + us)
}

/// Eight workers, each on its own connection, loop for `run_ms`: think for a random 0–120 ms
/// (all eight ask at once first), `CL.PACE api:vendor 50 1000 MS` (one slot every 20 ms), sleep
/// the wait they are told, act. The ask is `TIME` + `CL.PACE` in one MULTI/EXEC, so the slot is
/// read on the server's clock, from the TAT the call stored (`GET` in the same transaction).
pub fn pace(connect: &dyn Fn() -> RedisResult<Connection>, run_ms: f64) -> RedisResult<Vec<Slot>> {
    let key = format!("plots:pace:{}", std::process::id());
    let mut con = connect()?;
    let origin = server_us(&mut con)?;
    let barrier = std::sync::Barrier::new(8);
    let results: Vec<RedisResult<Vec<Slot>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|worker| {
                let key = &key;
                let barrier = &barrier;
                let mut con = connect();
                scope.spawn(move || -> RedisResult<Vec<Slot>> {
                    let con = con.as_mut().map_err(|e| e.clone())?;
                    let mut rng = Lcg::new(worker as u64 * 7919 + 17);
                    let mut slots = Vec::new();
                    barrier.wait();
                    let start = Instant::now();
                    let mut first = true;
                    while ms_since(start) < run_ms {
                        if !first {
                            std::thread::sleep(Duration::from_millis(rng.below(121)));
                        }
                        first = false;
                        // TIME, the call, and the schedule's TAT after it (`P` and decimal
                        // ns): the slot given is the TAT minus one unit's interval, exactly.
                        let ((s, us), reply, tat): ((i64, i64), Value, Option<String>) = redis::pipe()
                            .atomic()
                            .cmd("TIME")
                            .cmd("CL.PACE")
                            .arg(key)
                            .arg(PACE_COUNT)
                            .arg(PACE_PERIOD_MS)
                            .arg("MS")
                            .cmd("GET")
                            .arg(key)
                            .query(con)?;
                        let reply = five(&reply)?;
                        if reply[0] != 0 {
                            continue; // a slot more than MAXWAIT (one period) away: ask again later
                        }
                        let tat_ns: i64 =
                            tat.and_then(|t| t.strip_prefix('P').and_then(|t| t.parse().ok())).unwrap_or(0);
                        let interval_ns = i64::from(PACE_PERIOD_MS) * 1_000_000 / i64::from(PACE_COUNT);
                        let asked_ms = (s * 1_000_000 + us - origin) as f64 / 1000.0;
                        let slot_ms = ((tat_ns - interval_ns) / 1000 - origin) as f64 / 1000.0;
                        std::thread::sleep(Duration::from_millis(reply[1].max(0) as u64));
                        let acted_ms = (server_us(con)? - origin) as f64 / 1000.0;
                        slots.push(Slot { worker, asked_ms, slot_ms, acted_ms });
                    }
                    Ok(slots)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Ok(Vec::new()))).collect()
    });
    let mut all = Vec::new();
    for r in results {
        all.extend(r?);
    }
    all.sort_by(|a, b| a.slot_ms.total_cmp(&b.slot_ms));
    Ok(all)
}

// ---------------------------------------------------------------------------------------------
// CL.ALL: a day of an LLM budget, one hour of the day = one second of the run.

/// Real milliseconds per hour of the simulated day.
pub const HOUR_MS: f64 = 1000.0;

pub struct Limiter {
    pub label: &'static str,
    pub spec: &'static [&'static str],
    /// Whether QUANTITY is the request's tokens (else 1).
    pub tokens: bool,
}

/// The request rate, the hourly and the daily token budgets, with times in scaled
/// milliseconds (1 h = 1000 ms, 1 day = 24,000 ms).
pub const LLM_LIMITERS: [Limiter; 3] = [
    Limiter {
        label: "240 requests/hour, burst 20 (THROTTLE)",
        spec: &["THROTTLE", "19", "240", "1000"],
        tokens: false,
    },
    Limiter {
        label: "200,000 tokens/hour, sliding (WINDOW)",
        spec: &["WINDOW", "200000", "1000", "PRECISION", "20"],
        tokens: true,
    },
    Limiter { label: "2,500,000 tokens/day (COUNTER)", spec: &["COUNTER", "2500000", "24000"], tokens: true },
];

/// Requests per hour of the day (a working day: quiet night, busy afternoon).
pub const LLM_PROFILE: [u32; 24] =
    [20, 15, 10, 10, 10, 20, 40, 80, 160, 200, 210, 200, 180, 200, 240, 250, 240, 200, 150, 120, 100, 80, 50, 30];
/// A client's retry storm at 07:20: this many requests at once.
pub const LLM_SPIKE: (f64, u32) = (7.33, 60);

pub struct LlmCall {
    pub hour: f64,
    pub tokens: u64,
    pub limited: bool,
    /// 1-based index of the binding limiter (CL.ALL's sixth integer).
    pub binding: usize,
    /// Each limiter's remaining, as a share of its limit (from DETAILS).
    pub remaining: [f64; 3],
}

/// The CL.ALL call, as the picture's subtitle shows it (`t`: the request's tokens).
pub fn llm_command() -> String {
    let mut words = vec!["CL.ALL 3 req tok-h tok-d".to_string()];
    for lim in &LLM_LIMITERS {
        words.push(lim.spec.join(" "));
        if lim.tokens {
            words.push("QUANTITY t".into());
        }
    }
    words.push("MS DETAILS".into());
    words.join(" ")
}

pub fn llm_day(con: &mut Connection) -> RedisResult<Vec<LlmCall>> {
    let mut rng = Lcg::new(2026);
    let mut arrivals: Vec<(f64, u64)> = Vec::new();
    for (hour, &n) in LLM_PROFILE.iter().enumerate() {
        for _ in 0..n {
            let at = hour as f64 + rng.below(10_000) as f64 / 10_000.0;
            arrivals.push((at, 400 + rng.below(1201)));
        }
    }
    for _ in 0..LLM_SPIKE.1 {
        arrivals.push((LLM_SPIKE.0, 400 + rng.below(1201)));
    }
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let tag = format!("{{plots:llm:{}}}", std::process::id());
    let keys: Vec<String> = ["req", "tok-h", "tok-d"].iter().map(|k| format!("{tag}:{k}")).collect();
    let start = Instant::now();
    let mut calls = Vec::with_capacity(arrivals.len());
    for (at, tokens) in arrivals {
        sleep_until(start, at * HOUR_MS);
        let hour = ms_since(start) / HOUR_MS;
        let mut cmd = redis::cmd("CL.ALL");
        cmd.arg(keys.len()).arg(&keys);
        for lim in &LLM_LIMITERS {
            cmd.arg(lim.spec);
            if lim.tokens {
                cmd.arg("QUANTITY").arg(tokens);
            }
        }
        cmd.arg("MS").arg("DETAILS");
        let reply: Value = cmd.query(con)?;
        let head = ints(&reply);
        let details: Vec<[i64; 5]> = match &reply {
            Value::Array(items) => match items.get(6) {
                Some(Value::Array(each)) => each.iter().map(five).collect::<RedisResult<_>>()?,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        if head.len() < 6 || details.len() != 3 {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "unexpected CL.ALL reply",
                format!("{reply:?}"),
            )));
        }
        let share = |d: &[i64; 5]| d[2] as f64 / d[1].max(1) as f64;
        calls.push(LlmCall {
            hour,
            tokens,
            limited: head[0] != 0,
            binding: head[5] as usize,
            remaining: [share(&details[0]), share(&details[1]), share(&details[2])],
        });
    }
    Ok(calls)
}
