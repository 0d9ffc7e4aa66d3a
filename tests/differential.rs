//! The Functions twin against the module: the same random calls (every command; planted
//! states of every kind, hostile ones included; peeks, refunds, MS, PRECISION, argument errors)
//! on three keys of one server: the module's, the twin's through FCALL and the twin's through
//! EVALSHA. Replies, stored bytes and absolute expiries must be equal after every call.
//!
//! One instant, no tolerance: the module and the twin's test build share one server, and both
//! clocks are pinned to the same microsecond before each call (`CL.DEBUG CLOCK` for the module,
//! loaded with `DEBUG-COMMANDS yes`; the key the test build's clock reads for the twin, see
//! `scripts/twin.sh`). The test build differs from the shipped library only in that clock; the
//! shipped clock (`TIME`) is proven equal to the module's in tests/twin.rs.
//!
//! `THROTTLE_DIFF_CALLS` (default 12,000) and `THROTTLE_DIFF_SEED` reproduce or extend a run.
//!
//! skip twin: loads the module and the twin into one server itself.

mod harness;

use harness::twin::{self, CLOCK_KEY, Form};
use harness::{Options, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};
use std::collections::BTreeMap;

/// The largest limit the twin replies exactly (2^53 − 1): above it the twin refuses the call
/// with its own error (docs/src/guides/managed-redis.md).
const TWIN_LIMIT_MAX: i64 = 9_007_199_254_740_991;
const MS: i64 = 1_000_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord)]
enum Algorithm {
    Throttle,
    Window,
    Bucket,
    Counter,
}

impl Algorithm {
    fn command(self) -> &'static str {
        match self {
            Algorithm::Throttle => "CL.THROTTLE",
            Algorithm::Window => "CL.WINDOW",
            Algorithm::Bucket => "CL.BUCKET",
            Algorithm::Counter => "CL.COUNTER",
        }
    }
    fn function(self) -> &'static str {
        match self {
            Algorithm::Throttle => "cl_throttle",
            Algorithm::Window => "cl_window",
            Algorithm::Bucket => "cl_bucket",
            Algorithm::Counter => "cl_counter",
        }
    }
}

const ALGORITHMS: [Algorithm; 4] = [Algorithm::Throttle, Algorithm::Window, Algorithm::Bucket, Algorithm::Counter];

/// A limiter's parameters as a slot keeps them between calls, so that states build up.
#[derive(Clone, Debug)]
struct Limiter {
    kind: Algorithm,
    /// Positional arguments after the key.
    positional: Vec<String>,
    millis: bool,
    /// PRECISION's value (CL.WINDOW).
    precision: Option<String>,
}

impl Limiter {
    /// The window and precision in ms, when this is a CL.WINDOW with numeric parameters.
    fn window_ms(&self) -> Option<(i64, Option<i64>)> {
        if self.kind != Algorithm::Window {
            return None;
        }
        let scale = if self.millis { 1 } else { 1000 };
        let w = self.positional.get(1)?.parse::<i64>().ok()?.checked_mul(scale)?;
        let p = match &self.precision {
            Some(p) => Some(p.parse::<i64>().ok()?.checked_mul(scale)?),
            None => None,
        };
        Some((w, p))
    }

    /// The most units it admits at once (the first positional argument; max_burst + 1).
    fn limit(&self) -> Option<i64> {
        let v = self.positional.first()?.parse::<i64>().ok()?;
        Some(if self.kind == Algorithm::Throttle { v.checked_add(1)? } else { v })
    }
}

struct Gen {
    rng: StdRng,
    /// The key's expiry (Unix ms) before the call, when it has one: what a bounded refund's
    /// `HELD t` is near.
    held: Option<i64>,
    /// Whether the call being made has `DEBIT`: its quantities are then mostly charges, often
    /// past the limit.
    debit: bool,
}

impl Gen {
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.rng.random_range(0..items.len())]
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    /// A time parameter in the call's unit: mostly small, so limiters interact with the steps.
    fn duration(&mut self, millis: bool) -> i64 {
        let secs = match self.rng.random_range(0..10) {
            0..=5 => self.rng.random_range(1..=20),
            6..=8 => self.rng.random_range(1..=600),
            _ => self.rng.random_range(1..=100_000),
        };
        if millis {
            match self.rng.random_range(0..3) {
                0 => self.rng.random_range(1..=2000),
                _ => secs * 1000 + self.rng.random_range(0..1000),
            }
        } else {
            secs
        }
    }

    fn limiter(&mut self, kind: Algorithm) -> Limiter {
        let millis = self.chance(0.35);
        let small = |g: &mut Gen, hi: i64| g.rng.random_range(1..=hi).to_string();
        let (positional, precision) = match kind {
            Algorithm::Throttle => {
                let burst = self.rng.random_range(0..=15).to_string();
                let count = small(self, 20);
                // Sometimes a tolerance beyond 2^52 ns (52 days): the twin's general arithmetic.
                let period = if self.chance(0.1) {
                    let secs = self.rng.random_range(1_000_000..=1_000_000_000i64);
                    if millis { (secs / 1000).max(1) * 1000 } else { secs }
                } else {
                    self.duration(millis)
                };
                (vec![burst, count, period.to_string()], None)
            }
            Algorithm::Window => {
                let limit = small(self, 20);
                let window = self.duration(millis);
                let precision = if self.chance(0.45) {
                    // dividing the window or not, from one bucket to many
                    let p = match self.rng.random_range(0..4) {
                        0 => window,
                        1 => (window / self.rng.random_range(1..=10)).max(1),
                        2 => (window / self.rng.random_range(1..=200)).max(1),
                        _ => self.rng.random_range(1..=window),
                    };
                    Some(p.to_string())
                } else {
                    None
                };
                (vec![limit, window.to_string()], precision)
            }
            Algorithm::Bucket => {
                let capacity = small(self, 20);
                let tokens = small(self, 6);
                let interval = self.duration(millis).to_string();
                (vec![capacity, tokens, interval], None)
            }
            Algorithm::Counter => (vec![small(self, 20), self.duration(millis).to_string()], None),
        };
        let mut l = Limiter { kind, positional, millis, precision };
        if self.chance(0.1) {
            self.near_twin_limit(&mut l);
        }
        l
    }

    /// A limit (or capacity) just below 2^53, the largest the twin replies: the units in use
    /// plus a quantity near it pass 2^53, where a double holds only even integers.
    fn near_twin_limit(&mut self, l: &mut Limiter) {
        let limit = TWIN_LIMIT_MAX - self.rng.random_range(0..4);
        match l.kind {
            Algorithm::Window => {
                // (limits above 100,000 take PRECISION)
                let w = l.positional[1].parse::<i64>().unwrap_or(10);
                l.precision.get_or_insert_with(|| (w / self.rng.random_range(1..=10)).max(1).to_string());
                l.positional[0] = limit.to_string();
            }
            Algorithm::Counter => l.positional[0] = limit.to_string(),
            // a refill of the empty bucket in at most 1,000 intervals
            Algorithm::Bucket => {
                l.positional = vec![limit.to_string(), (limit / 1000).to_string(), self.duration(l.millis).to_string()]
            }
            // 1 ns apart (a tolerance of 2^53 ns, 104 days)
            Algorithm::Throttle => {
                l.positional = vec![
                    (limit - 1).to_string(),
                    "1000000000".into(),
                    if l.millis { "1000".into() } else { "1".into() },
                ]
            }
        }
    }

    /// Parameters at or beyond the edges: overflows, ranges, rates faster than 1 ns, limits the
    /// twin cannot reply exactly.
    fn extreme_limiter(&mut self, kind: Algorithm) -> Limiter {
        let mut l = self.limiter(kind);
        let edges: &[&str] = &[
            "9223372036854775807",
            "9223372036854775806",
            "9223372036854775808",
            "-9223372036854775808",
            "0",
            "-1",
            "9007199254740991",
            "9007199254740992",
            "9007199254740993",
            "999999999999999999",
            "1000000000000000000",
            "4611686018427387904",
            "100000",
            "100001",
            "10000",
            "10001",
            "9223372036",
            "9223372037",
            "9223372036854",
            "9223372036855",
            "1000000000",
            "123456789012345",
            "1000000001",
            "1000000000000",
            "1000000000001",
            "1000000000000000001",
            "999999999999999998",
            "4503599627370496",
            "4503599627370497",
        ];
        let i = self.rng.random_range(0..l.positional.len() + usize::from(l.precision.is_some()));
        let v = self.pick(edges).to_string();
        if i < l.positional.len() {
            l.positional[i] = v;
        } else {
            l.precision = Some(v);
        }
        l
    }

    fn quantity(&mut self, limit: Option<i64>) -> Option<String> {
        if self.debit && self.chance(0.85) {
            return self.charge(limit);
        }
        if let Some(big) = limit.filter(|&l| l > 1000)
            && self.chance(0.4)
        {
            // near a large limit: denied by a few units in use, or admitted at the edge
            return Some((big - self.rng.random_range(0..12)).to_string());
        }
        let limit = limit.unwrap_or(10).clamp(1, 1000);
        Some(match self.rng.random_range(0..100) {
            0..=29 => return None,
            30..=44 => "1".into(),
            45..=54 => "0".into(),
            55..=72 => self.rng.random_range(2..=limit + 2).to_string(),
            73..=88 => (-self.rng.random_range(1..=limit + 2)).to_string(),
            89..=94 => self
                .pick(&[
                    "9223372036854775807",
                    "-9223372036854775808",
                    "9007199254740993",
                    "-9007199254740993",
                    "1000000000000000000",
                    "-99999999999",
                ])
                .to_string(),
            _ => self.pick(&["1.5", "x", "+1", "", "01", "-0", " 1", "PRECISION", "ms"]).to_string(),
        })
    }

    /// A `DEBIT`'s quantity: within the limit, past it (overdrawn), above it (never fits), a
    /// pure check, a refund (an error), or at the edges of what each stored form holds.
    fn charge(&mut self, limit: Option<i64>) -> Option<String> {
        let limit = limit.unwrap_or(10).clamp(1, 1_000_000);
        Some(match self.rng.random_range(0..100) {
            0..=9 => return None,
            10..=21 => "0".into(),
            22..=51 => self.rng.random_range(1..=limit).to_string(),
            52..=84 => self.rng.random_range(limit.min(999_999) + 1..=limit * 3 + 2).to_string(),
            85..=89 => (-self.rng.random_range(1..=limit)).to_string(),
            _ => self
                .pick(&[
                    "100000",
                    "100001",
                    "999999999999999999",
                    "1000000000000000000",
                    "9007199254740991",
                    "9007199254740993",
                    "4611686018427387904",
                    "9223372036854775807",
                ])
                .to_string(),
        })
    }

    /// `HELD t` for a call of quantity `q`: mostly with a refund, `t` at or near the key's
    /// expiry (a bounded refund), now and then an argument error (not a refund, out of range).
    fn held_words(&mut self, q: Option<&str>) -> Option<Vec<String>> {
        let refund = q.is_some_and(|q| q.starts_with('-') && q.len() > 1 && q[1..].bytes().all(|b| b.is_ascii_digit()));
        let t = match (refund && self.chance(0.6), self.chance(0.02)) {
            (true, _) => match self.held {
                Some(at) => at.saturating_add(*self.pick(&[0, 0, 0, -1, 1, -1000, 1000, -60_000])).to_string(),
                None => (self.rng.random_range(1_700_000_000_000i64..1_900_000_000_000)).to_string(),
            },
            (false, true) => self.pick(&["-1", "0", "9223372036854", "9223372036855", "1.5", "x"]).to_string(),
            _ => return None,
        };
        Some(vec![self.pick(&["HELD", "held"]).to_string(), t])
    }

    /// The arguments after the key: positional, then the tail in a random order.
    fn args(&mut self, l: &Limiter) -> Vec<String> {
        let mut args = l.positional.clone();
        let mut tail: Vec<Vec<String>> = Vec::new();
        self.debit = self.chance(0.2);
        if self.debit {
            tail.push(vec![self.pick(&["DEBIT", "debit"]).to_string()]);
        }
        let q = self.quantity(l.limit());
        self.debit = false;
        if let Some(held) = self.held_words(q.as_deref()) {
            tail.push(held);
        }
        if let Some(q) = q {
            tail.push(vec![q]);
        }
        if l.millis {
            tail.push(vec![self.pick(&["MS", "ms", "Ms"]).to_string()]);
        }
        if let Some(p) = &l.precision {
            tail.push(vec![self.pick(&["PRECISION", "precision"]).to_string(), p.clone()]);
        }
        if self.chance(0.2) {
            tail.push(vec![self.pick(&["SHADOW", "shadow"]).to_string()]);
        }
        // MS, PRECISION, SHADOW and the quantity may come in any order.
        for i in (1..tail.len()).rev() {
            let j = self.rng.random_range(0..=i);
            tail.swap(i, j);
        }
        args.extend(tail.into_iter().flatten());
        if self.chance(0.01) {
            // an unknown word, a repeated option, a missing PRECISION value, too many words
            match self.rng.random_range(0..5) {
                0 => args.push("BOGUS".into()),
                1 => args.push("MS".into()),
                2 => args.push("PRECISION".into()),
                3 => args.push("DEBIT".into()),
                _ => args.extend(["1".to_string(), "1".to_string(), "1".to_string()]),
            }
        }
        if self.chance(0.005) {
            args.truncate(self.rng.random_range(0..args.len().max(1)));
        }
        if self.chance(0.01) && !args.is_empty() {
            let i = self.rng.random_range(0..args.len());
            args[i] =
                self.pick(&["1.5", "0x10", " 5", "", "+5", "05", "\u{ff}", "-0", "99999999999999999999"]).to_string();
        }
        args
    }
}

impl Limiter {
    fn word(&self) -> &'static str {
        match self.kind {
            Algorithm::Throttle => "THROTTLE",
            Algorithm::Window => "WINDOW",
            Algorithm::Bucket => "BUCKET",
            Algorithm::Counter => "COUNTER",
        }
    }

    /// Which positional arguments are times (CL.ALL's MS applies to every spec).
    fn is_duration(&self, i: usize) -> bool {
        matches!(
            (self.kind, i),
            (Algorithm::Throttle, 2) | (Algorithm::Window, 1) | (Algorithm::Bucket, 2) | (Algorithm::Counter, 1)
        )
    }

    /// A time of this limiter in the unit of a CL.ALL call (`millis`): the same duration when
    /// it is expressible, else the same number.
    fn in_unit(&self, word: &str, millis: bool) -> String {
        match (word.parse::<i64>(), self.millis, millis) {
            (Ok(v), false, true) => v.saturating_mul(1000).to_string(),
            (Ok(v), true, false) if v % 1000 == 0 => (v / 1000).to_string(),
            _ => word.to_string(),
        }
    }
}

impl Gen {
    /// This limiter as a CL.ALL spec in the call's unit: its word, numbers, then `QUANTITY q`
    /// and `PRECISION p` in either order.
    fn spec(&mut self, l: &Limiter, millis: bool) -> Vec<String> {
        let word = l.word();
        let word = match self.rng.random_range(0..3) {
            0 => word.to_lowercase(),
            _ => word.to_string(),
        };
        let mut words = vec![word];
        for (i, w) in l.positional.iter().enumerate() {
            words.push(if l.is_duration(i) { l.in_unit(w, millis) } else { w.clone() });
        }
        let mut options: Vec<Vec<String>> = Vec::new();
        let q = self.quantity(l.limit());
        if let Some(held) = self.held_words(q.as_deref()) {
            options.push(held);
        }
        if let Some(q) = q {
            options.push(vec![self.pick(&["QUANTITY", "quantity"]).to_string(), q]);
        }
        if let Some(p) = &l.precision {
            options.push(vec!["PRECISION".into(), l.in_unit(p, millis)]);
        }
        for i in (1..options.len()).rev() {
            let j = self.rng.random_range(0..=i);
            options.swap(i, j);
        }
        words.extend(options.into_iter().flatten());
        words
    }

    /// The words after CL.ALL's keys: the specs, MS, DETAILS and SHADOW anywhere among them,
    /// and now and then a malformed call.
    fn all_args(&mut self, limiters: &[&Limiter]) -> Vec<String> {
        let millis = self.chance(0.4);
        self.debit = self.chance(0.25);
        let debit = self.debit;
        let mut parts: Vec<Vec<String>> = limiters.iter().map(|l| self.spec(l, millis)).collect();
        self.debit = false;
        let mut options = Vec::new();
        if debit {
            options.push(self.pick(&["DEBIT", "debit"]).to_string());
        }
        if millis {
            options.push(self.pick(&["MS", "ms"]).to_string());
        }
        if self.chance(0.3) {
            options.push(self.pick(&["DETAILS", "details"]).to_string());
        }
        if self.chance(0.2) {
            options.push(self.pick(&["SHADOW", "shadow"]).to_string());
        }
        for o in options {
            let at = self.rng.random_range(1..=parts.len());
            parts.insert(at, vec![o]);
        }
        let malformed = self.chance(0.06).then(|| self.rng.random_range(0..8));
        if let Some(kind @ 6..) = malformed {
            // Inside one spec (the parts of more than one word): PRECISION right after it (which
            // only a window takes), or a word that is no integer among its numbers.
            let specs: Vec<usize> = parts.iter().enumerate().filter(|(_, p)| p.len() > 1).map(|(i, _)| i).collect();
            let at = specs[self.rng.random_range(0..specs.len())];
            if kind == 6 {
                parts[at].extend(["PRECISION".to_string(), "5".to_string()]);
            } else {
                let number = self.rng.random_range(1..=2);
                parts[at][number] = self.pick(&["x", "1.5"]).to_string();
            }
        }
        let mut args: Vec<String> = parts.into_iter().flatten().collect();
        if let Some(kind @ ..6) = malformed {
            match kind {
                0 => args.push("THROTTLE 1 1".into()),
                1 => args.insert(0, "LIMITER".into()),
                2 => args.push(self.pick(&["MS", "DEBIT"]).to_string()),
                3 => args.push("DETAILS".into()),
                4 => args.truncate(args.len().saturating_sub(1)),
                _ => args.push(self.pick(&["COUNTER", "WINDOW 5"]).to_string()),
            }
            args = args.join(" ").split(' ').map(String::from).collect();
        }
        args
    }
}

/// What a key holds before a call, written alike into the three keys.
#[derive(Clone, Debug)]
enum Plant {
    Value(Vec<u8>, Option<i64>),
    List,
}

impl Gen {
    fn expiry(&mut self, natural: i64, now_ms: i64) -> Option<i64> {
        match self.rng.random_range(0..10) {
            0 => None,
            1 => Some(now_ms + self.rng.random_range(3_600_000..36_000_000)), // far ahead: a clock stepped back
            2 => Some(now_ms + self.rng.random_range(-5_000..5_000)),
            3 => Some(9_223_372_036_855), // its nanoseconds overflow i64
            _ => Some(natural.max(now_ms - 60_000)),
        }
    }

    fn plant(&mut self, l: &Limiter, now_ns: i64) -> Plant {
        let now_ms = now_ns.div_euclid(MS);
        let text = |v: i64| v.to_string().into_bytes();
        match self.rng.random_range(0..100) {
            0..=2 => return Plant::List,
            3..=6 => {
                let junk: &[&[u8]] = &[
                    b"",
                    b"hello",
                    b"1.5",
                    b" 5",
                    b"\x03abc",
                    b"\x01\x00\x00",
                    b"\x02",
                    b"-0",
                    b"+5",
                    b"P",
                    b"P12",
                    b"P-1700000000000000000",
                ];
                return Plant::Value(self.pick(junk).to_vec(), Some(now_ms + 100_000));
            }
            7..=9 => {
                // A pacer's key (CL.PACE's `P` and TAT, a queue up to an hour long): WRONGTYPE
                // for every limiter, the twin's as the module's, its queue left as it is.
                let tat = now_ns + self.rng.random_range(0..3_600_000_000_000);
                let mut value = b"P".to_vec();
                value.extend_from_slice(tat.to_string().as_bytes());
                return Plant::Value(value, Some(tat.div_euclid(MS) + 1));
            }
            _ => {}
        }
        // Mostly this limiter's own kind; sometimes another's (WRONGTYPE).
        let other = *self.pick(&ALGORITHMS);
        let kind = if self.chance(0.85) { l.kind } else { other };
        match kind {
            Algorithm::Throttle => {
                let tat = match self.rng.random_range(0..8) {
                    0 => 1_000_000_000_000_000_000,
                    1 => now_ns - self.rng.random_range(0..3_600_000_000_000),
                    2 => now_ns + self.rng.random_range(3_600_000_000_000..36_000_000_000_000),
                    _ => now_ns + self.rng.random_range(0..300_000_000_000),
                };
                let natural = tat.div_euclid(MS) + 1;
                Plant::Value(text(tat), self.expiry(natural, now_ms))
            }
            Algorithm::Counter => {
                let count = match self.rng.random_range(0..12) {
                    0 => 0,
                    1 => 100_000_000_000_000_000,
                    2 => 999_999_999_999_999_999,
                    3 => 9_007_199_254_740_993,
                    _ => self.rng.random_range(1..=25),
                };
                let natural = now_ms + self.rng.random_range(1..=120_000);
                Plant::Value(text(count), self.expiry(natural, now_ms))
            }
            Algorithm::Bucket => {
                let deficit: i64 = match self.rng.random_range(0..12) {
                    0 => 1_000_000_000_000,
                    1 => i64::MAX,
                    _ => self.rng.random_range(1..=25),
                };
                let natural = now_ms + self.rng.random_range(1..=200) * 1000 + self.rng.random_range(0..3) * 7;
                Plant::Value(text(-deficit), self.expiry(natural, now_ms))
            }
            Algorithm::Window => {
                let (window, precision) = l.window_ms().unwrap_or((10_000, None));
                let ring = match precision {
                    Some(_) => self.chance(0.85),
                    None => self.chance(0.15),
                };
                if ring {
                    self.ring(window, precision.unwrap_or(1000).max(1), now_ns)
                } else {
                    self.log(window, now_ns)
                }
            }
        }
    }

    /// An exact log (layout 1): entries ascending around the window, some after now.
    fn log(&mut self, window_ms: i64, now_ns: i64) -> Plant {
        let n = match self.rng.random_range(0..10) {
            0 => 0,
            1 => self.rng.random_range(20..60),
            _ => self.rng.random_range(1..12),
        };
        let span = window_ms.saturating_mul(MS).saturating_mul(2).min(1 << 50);
        let mut entries: Vec<i64> = (0..n).map(|_| now_ns - self.rng.random_range(0..=span)).collect();
        if self.chance(0.15) {
            for _ in 0..self.rng.random_range(1..4) {
                entries.push(now_ns + self.rng.random_range(1..3_600_000_000_000));
            }
        }
        entries.sort_unstable();
        if self.chance(0.03) {
            entries.reverse(); // hostile: not ascending
        }
        let head =
            if entries.is_empty() || self.chance(0.7) { 0 } else { self.rng.random_range(0..=entries.len() as u32) };
        let mut bytes = vec![1u8, 0, 0, 0];
        bytes.extend_from_slice(&head.to_le_bytes());
        for e in &entries {
            bytes.extend_from_slice(&e.to_le_bytes());
        }
        if self.chance(0.03) {
            bytes.push(7); // a torn entry
        }
        if self.chance(0.02) {
            bytes[5] = 0xff; // head beyond the entries
        }
        let newest = entries.iter().max().copied().unwrap_or(now_ns);
        let natural = (newest + window_ms * MS).div_euclid(MS) + 1;
        Plant::Value(bytes, self.expiry(natural, now_ns.div_euclid(MS)))
    }

    /// A ring (layout 2): this call's precision or another, its newest bucket near now, ahead
    /// (a clock stepped back) or far behind.
    fn ring(&mut self, window_ms: i64, precision_ms: i64, now_ns: i64) -> Plant {
        let p_ms = match self.rng.random_range(0..10) {
            0 => self.rng.random_range(1..=window_ms.max(1)),
            1 => precision_ms * 2,
            _ => precision_ms,
        };
        let spanned = (window_ms + precision_ms - 1) / precision_ms;
        let slots = if self.chance(0.85) { (window_ms + p_ms - 1) / p_ms + 1 } else { self.rng.random_range(1..=30) };
        let slots = slots.clamp(1, 10_001);
        let current = now_ns.div_euclid(p_ms * MS);
        let newest = match self.rng.random_range(0..14) {
            0 => current + spanned + self.rng.random_range(1..100), // ahead: stepped
            1 => current - self.rng.random_range(slots..slots + 1000),
            2 => -(1 << 60),
            3 => -(1 << 53) + self.rng.random_range(-3..3), // around what a double holds
            // Far ahead, in the call's own precision (a ring no limiter writes: beyond 2^53
            // buckets the twin reasons on the sign, and a ratio of precisions near a power of
            // two would put it at the edge of its exact range, where it refuses the call).
            4 if p_ms == precision_ms => (1 << 60) + self.rng.random_range(0..1000),
            _ => current - self.rng.random_range(0..=spanned.min(5)),
        };
        let mut bytes = vec![2u8, 0, 0, 0, 0, 0, 0, 0];
        bytes.extend_from_slice(&(p_ms * MS).to_le_bytes());
        bytes.extend_from_slice(&newest.to_le_bytes());
        for _ in 0..slots {
            let c: i64 = match self.rng.random_range(0..20) {
                0..=7 => 0,
                8 => -1, // hostile: a count with its top bit set
                _ => self.rng.random_range(1..=6),
            };
            let c = if c < 0 && !self.chance(0.2) { 0 } else { c };
            bytes.extend_from_slice(&c.to_le_bytes());
        }
        if self.chance(0.02) {
            bytes[3] = 1; // reserved byte set
        }
        let natural = (newest + 1).saturating_mul(p_ms).saturating_add(window_ms).max(now_ns / MS + 1);
        Plant::Value(bytes, self.expiry(natural, now_ns.div_euclid(MS)))
    }
}

/// A key's value (`GET`) and absolute expiry (`PEXPIRETIME`), as replied.
type KeyState = (Value, Value);

struct Rig {
    _server: Server,
    c: Connection,
    sha: String,
}

impl Rig {
    fn start() -> Rig {
        let server = Server::with(Options::default().debug_commands());
        let mut c = server.client();
        twin::load(&mut c, Form::Library, &twin::source(Form::Library, true));
        let sha = twin::load(&mut c, Form::Eval, &twin::source(Form::Eval, true)).unwrap();
        Rig { _server: server, c, sha }
    }

    /// The three keys of slot `i`: the module's, FCALL's, EVALSHA's.
    fn keys(i: usize) -> [String; 3] {
        [format!("d:{i}:module"), format!("d:{i}:fcall"), format!("d:{i}:eval")]
    }

    fn plant(&mut self, keys: &[String; 3], plant: &Plant) {
        let mut pipe = redis::pipe();
        for k in keys {
            pipe.cmd("DEL").arg(k).ignore();
            match plant {
                Plant::List => {
                    pipe.cmd("RPUSH").arg(k).arg("x").ignore();
                }
                Plant::Value(bytes, expiry) => {
                    pipe.cmd("SET").arg(k).arg(bytes.as_slice()).ignore();
                    if let Some(at) = expiry {
                        pipe.cmd("PEXPIREAT").arg(k).arg(*at).ignore();
                    }
                }
            }
        }
        pipe.query::<()>(&mut self.c).unwrap();
    }

    /// Runs the call on the three keys at `now_us`; returns the module key's state before, the
    /// replies and each key's state after.
    fn call(
        &mut self,
        kind: Algorithm,
        keys: &[String; 3],
        args: &[String],
        now_us: i64,
    ) -> (KeyState, [Value; 3], [KeyState; 3]) {
        self.call_named((kind.command(), kind.function()), keys, args, now_us)
    }

    /// `call` of a command and its function by name.
    fn call_named(
        &mut self,
        (command, function): (&str, &str),
        keys: &[String; 3],
        args: &[String],
        now_us: i64,
    ) -> (KeyState, [Value; 3], [KeyState; 3]) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("GET").arg(&keys[0]).cmd("PEXPIRETIME").arg(&keys[0]);
        pipe.cmd("CL.DEBUG").arg("CLOCK").arg(now_us).ignore();
        pipe.cmd("SET").arg(CLOCK_KEY).arg(now_us).ignore();
        pipe.cmd(command).arg(&keys[0]).arg(args);
        pipe.cmd("FCALL").arg(function).arg(1).arg(&keys[1]).arg(args);
        pipe.cmd("EVALSHA").arg(&self.sha).arg(1).arg(&keys[2]).arg(function).arg(args);
        for k in keys {
            pipe.cmd("GET").arg(k).cmd("PEXPIRETIME").arg(k);
        }
        let v: Vec<Value> = pipe.query(&mut self.c).unwrap();
        let [before, before_at, a, b, c, g0, e0, g1, e1, g2, e2]: [Value; 11] = v.try_into().unwrap();
        ((before, before_at), [a, b, c], [(g0, e0), (g1, e1), (g2, e2)])
    }
}

impl Rig {
    /// CL.ALL over slots' key sets (the module's keys, FCALL's, EVALSHA's) at `now_us`;
    /// returns the module keys' states before, the three replies and every key's state after,
    /// set by set.
    fn call_all(
        &mut self,
        slots: &[usize],
        args: &[String],
        now_us: i64,
    ) -> (Vec<KeyState>, [Value; 3], Vec<Vec<KeyState>>) {
        self.call_multi(("CL.ALL", "cl_all"), slots, args, now_us)
    }

    /// `call_all` of a command of CL.ALL's grammar (CL.ALL, CL.EACH) and its function.
    fn call_multi(
        &mut self,
        (command, function): (&str, &str),
        slots: &[usize],
        args: &[String],
        now_us: i64,
    ) -> (Vec<KeyState>, [Value; 3], Vec<Vec<KeyState>>) {
        let sets: Vec<Vec<String>> =
            (0..3).map(|form| slots.iter().map(|&s| Rig::keys(s)[form].clone()).collect()).collect();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for k in &sets[0] {
            pipe.cmd("GET").arg(k).cmd("PEXPIRETIME").arg(k);
        }
        pipe.cmd("CL.DEBUG").arg("CLOCK").arg(now_us).ignore();
        pipe.cmd("SET").arg(CLOCK_KEY).arg(now_us).ignore();
        pipe.cmd(command).arg(slots.len()).arg(&sets[0]).arg(args);
        pipe.cmd("FCALL").arg(function).arg(slots.len()).arg(&sets[1]).arg(args);
        pipe.cmd("EVALSHA").arg(&self.sha).arg(slots.len()).arg(&sets[2]).arg(function).arg(args);
        for set in &sets {
            for k in set {
                pipe.cmd("GET").arg(k).cmd("PEXPIRETIME").arg(k);
            }
        }
        let mut before: Vec<Value> = pipe.query(&mut self.c).unwrap();
        let mut v = before.split_off(2 * slots.len());
        let states: Vec<Value> = v.split_off(3);
        let replies: [Value; 3] = v.try_into().unwrap();
        let pairs = |v: &[Value]| -> Vec<KeyState> { v.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect() };
        (pairs(&before), replies, pairs(&states).chunks(slots.len()).map(<[_]>::to_vec).collect())
    }
}

/// The units the DEBIT of a call (`args` after `positional` words; CL.ALL's QUANTITY values)
/// charges at most (1 by default), 0 without DEBIT.
fn debited(args: &[String], positional: usize) -> u128 {
    if !args.iter().any(|a| a.eq_ignore_ascii_case("DEBIT")) {
        return 0;
    }
    let value = |(i, a): (usize, &String)| {
        let after = |w: &str| i > 0 && args[i - 1].eq_ignore_ascii_case(w);
        let counts = if positional == 0 { after("QUANTITY") } else { !after("HELD") && !after("PRECISION") };
        (i >= positional && counts).then(|| a.parse::<u64>().ok()).flatten()
    };
    args.iter().enumerate().filter_map(value).map(u128::from).max().unwrap_or(1)
}

/// Whether the twin refused a call for a CL.WINDOW ring whose counts reach 2^53 (docs/src/guides/managed-redis.md,
/// "What differs": a double cannot carry the sum), and the module's key before the call was
/// one, or a debit of `debit` units would make one: a limit above 2^52 whose window changed
/// on a live key can leave one, and a debit can pass any limit.
fn refused_ring_beyond_twin(twin_reply: &Value, before: &[KeyState], debit: u128) -> bool {
    let refused = server_error(twin_reply).is_some_and(|e| {
        e.contains("key holds CL.WINDOW state beyond what the Functions twin computes exactly (use the module)")
    });
    // (an exact log's entries are units too, when a debit converts it)
    let beyond = |v: &Value| match v {
        Value::BulkString(b) if b.len() >= 32 && b[0] == 2 && (b.len() - 24) % 8 == 0 => {
            let counts = b[24..].chunks(8).map(|c| u128::from(u64::from_le_bytes(c.try_into().unwrap())));
            counts.sum::<u128>() + debit >= 1 << 53
        }
        Value::BulkString(b) if debit > 0 && b.len() >= 8 && b[0] == 1 => {
            ((b.len() - 8) / 8) as u128 + debit >= 1 << 53
        }
        _ => false,
    };
    refused && (debit >= 1 << 53 || before.iter().any(|(v, _)| beyond(v)))
}

/// The twin's answer for a call the module answered with a limit above 2^53 − 1.
fn twin_limit_error(kind: Algorithm) -> String {
    let name = if kind == Algorithm::Bucket { "capacity" } else { "limit" };
    format!(
        "ERR parameters are too large for the Functions twin: a {name} above 9007199254740991 cannot be replied exactly (use the module)"
    )
}

fn server_error(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(format!("{} {}", e.code(), e.details().unwrap_or("")).trim().to_string()),
        _ => None,
    }
}

#[derive(Default)]
struct Tally {
    calls: BTreeMap<String, u64>,
}

impl Tally {
    fn add(&mut self, what: String) {
        *self.calls.entry(what).or_default() += 1;
    }
}

#[test]
fn the_twin_matches_the_module_call_for_call() {
    let calls: usize = std::env::var("THROTTLE_DIFF_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(12_000);
    let seed: u64 = std::env::var("THROTTLE_DIFF_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("THROTTLE_DIFF_SEED={seed} THROTTLE_DIFF_CALLS={calls}");
    let mut g = Gen { rng: StdRng::seed_from_u64(seed), held: None, debit: false };

    // Pinned instants start a day ahead of the server's real clock, so no key the test writes
    // expires by real time while it runs (a key's expiry is absolute, in the server's ms).
    let real_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    let mut now_us = real_us + 86_400_000_000 + g.rng.random_range(0..1_000_000);
    let mut rig = Rig::start();

    const SLOTS: usize = 24;
    let mut limiters: Vec<Limiter> = (0..SLOTS).map(|i| g.limiter(ALGORITHMS[i % 4])).collect();
    let mut tally = Tally::default();

    for step in 0..calls {
        // The clock: mostly forward in steps from 0 to an hour, sometimes back (a clock step).
        now_us += match g.rng.random_range(0..100) {
            0..=9 => 0,
            10..=29 => g.rng.random_range(1..1000),
            30..=59 => g.rng.random_range(1000..1_000_000),
            60..=84 => g.rng.random_range(1_000_000..60_000_000),
            85..=94 => g.rng.random_range(60_000_000..3_600_000_000),
            _ => -g.rng.random_range(1..3_600_000_000),
        };
        now_us = now_us.clamp(real_us + 43_200_000_000, real_us + 172_800_000_000);

        if g.chance(0.15) {
            // CL.ALL over 1 to 4 slots (their keys hold what the single commands leave), each
            // slot's limiter as a spec; now and then one slot twice.
            let n = g.rng.random_range(1..=4);
            let mut slots: Vec<usize> = Vec::new();
            while slots.len() < n {
                let s = g.rng.random_range(0..SLOTS);
                if !slots.contains(&s) || g.chance(0.02) {
                    slots.push(s);
                }
            }
            let chosen: Vec<&Limiter> = slots.iter().map(|&s| &limiters[s]).collect();
            let expiry: i64 = redis::cmd("PEXPIRETIME").arg(&Rig::keys(slots[0])[0]).query(&mut rig.c).unwrap();
            g.held = (expiry >= 0).then_some(expiry);
            let mut args = g.all_args(&chosen);
            // CL.EACH (its grammar CL.ALL's but DETAILS) or CL.ALL.
            let each = g.chance(0.4);
            if each {
                args.retain(|w| !w.eq_ignore_ascii_case("DETAILS"));
            }
            let (command, function) = if each { ("CL.EACH", "cl_each") } else { ("CL.ALL", "cl_all") };
            let (before, replies, states) = rig.call_multi((command, function), &slots, &args, now_us);
            let context = format!(
                "step {step} (THROTTLE_DIFF_SEED={seed}): at {now_us} µs, {command} {} slots {slots:?} {}",
                slots.len(),
                args.join(" ")
            );
            if matches!(&replies[0], Value::Array(items) if matches!(items.get(1), Some(Value::Int(l)) if *l > TWIN_LIMIT_MAX))
            {
                continue; // (specs come from ordinary limiters: not reached)
            }
            if refused_ring_beyond_twin(&replies[1], &before, debited(&args, 0)) {
                assert_eq!(replies[2], replies[1], "{context}");
                assert!(states[1..].iter().all(|s| *s == before), "{context}: the twin wrote nothing");
                tally.add("a ring counting 2^53 or more (refused by the twin)".into());
                let all: Vec<String> = slots.iter().flat_map(|&s| Rig::keys(s)).collect();
                let _: () = redis::cmd("DEL").arg(&all).query(&mut rig.c).unwrap(); // the module's keys moved on alone
                continue;
            }
            assert_eq!(replies[1], replies[0], "FCALL {function} differs from the module's {command}: {context}");
            assert_eq!(replies[2], replies[0], "EVALSHA {function} differs from the module's {command}: {context}");
            assert_eq!(states[1], states[0], "FCALL {function} stored bytes/expiry differ: {context}");
            assert_eq!(states[2], states[0], "EVALSHA {function} stored bytes/expiry differ: {context}");
            let debit = args.iter().any(|a| a.eq_ignore_ascii_case("DEBIT"));
            if each {
                let outcome = match &replies[0] {
                    Value::Array(items) => {
                        let limited = items.iter().filter(|d| five_of(d).is_some_and(|d| d[0] == 1)).count();
                        match (debit, limited) {
                            (true, 0) => "DEBIT, every limiter fitted",
                            (true, _) => "DEBIT, some overdrawn (every debit written)",
                            (false, 0) => "every limiter admitted",
                            (false, n) if n == items.len() => "every limiter denied",
                            (false, _) => "some denied, the others written",
                        }
                    }
                    Value::ServerError(e) if e.code() == "WRONGTYPE" => "WRONGTYPE",
                    Value::ServerError(_) => "error",
                    other => panic!("{context}: unexpected module reply {other:?}"),
                };
                tally.add(format!("CL.EACH: {outcome}"));
                continue;
            }
            let outcome = match &replies[0] {
                Value::Array(items) if debit && matches!(items.first(), Some(Value::Int(1))) => {
                    "DEBIT overdrawn (every debit written)"
                }
                Value::Array(_) if debit => "DEBIT fitted",
                Value::Array(items) if matches!(items.first(), Some(Value::Int(1))) => "denied (nothing written)",
                Value::Array(items) if items.len() == 7 => "admitted, DETAILS",
                Value::Array(_) => "admitted",
                Value::ServerError(e) if e.code() == "WRONGTYPE" => "WRONGTYPE",
                Value::ServerError(_) => "error",
                other => panic!("{context}: unexpected module reply {other:?}"),
            };
            tally.add(format!("CL.ALL ({} limiters): {outcome}", slots.len()));
            continue;
        }
        let slot = g.rng.random_range(0..SLOTS);
        let keys = Rig::keys(slot);
        // The limiter: the slot's own (so that state builds up), a new one, or another.
        let roll = g.rng.random_range(0..100);
        let other = *g.pick(&ALGORITHMS);
        let mut scratch = false;
        if limiters[slot].kind == Algorithm::Window && g.chance(0.05) {
            // The same window with PRECISION added or removed: the key switches layout.
            let w = limiters[slot].positional[1].parse::<i64>().unwrap_or(10);
            let p = (w / g.rng.random_range(1..=50)).max(1).to_string();
            let flipped = if limiters[slot].precision.is_some() { None } else { Some(p) };
            limiters[slot].precision = flipped;
        }
        let limiter = if roll < 80 {
            limiters[slot].clone()
        } else if roll < 90 {
            limiters[slot] = g.limiter(other);
            limiters[slot].clone()
        } else if roll < 96 {
            g.limiter(other)
        } else {
            scratch = true;
            g.extreme_limiter(other)
        };
        if scratch {
            // Extreme parameters on an empty key, so that the reply is the parameters' alone.
            let _: () = redis::cmd("DEL").arg(&keys).query(&mut rig.c).unwrap();
        } else if g.chance(0.12) {
            let plant = g.plant(&limiter, now_us * 1000);
            rig.plant(&keys, &plant);
            tally.add(format!(
                "planted {}",
                match &plant {
                    Plant::List => "list".to_string(),
                    Plant::Value(b, _) => match b.first() {
                        Some(1) => "exact log".into(),
                        Some(b'P') if b.len() > 4 => "pacer".into(),
                        Some(2) => "ring".into(),
                        _ => "integer or junk".into(),
                    },
                }
            ));
        }
        let expiry: i64 = redis::cmd("PEXPIRETIME").arg(&keys[0]).query(&mut rig.c).unwrap();
        g.held = (expiry >= 0).then_some(expiry);
        let args = g.args(&limiter);
        let (before, replies, states) = rig.call(limiter.kind, &keys, &args, now_us);
        let context = || {
            format!(
                "step {step} (THROTTLE_DIFF_SEED={seed}): at {now_us} µs, {} {} {} on {before:?}",
                limiter.kind.command(),
                keys[0],
                args.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(" ")
            )
        };

        // The expected twin reply: the module's, but for limits the twin cannot reply exactly.
        let module = &replies[0];
        let over_limit = match module {
            Value::Array(items) => matches!(items.get(1), Some(Value::Int(l)) if *l > TWIN_LIMIT_MAX),
            _ => false,
        };
        if over_limit {
            for twin_reply in &replies[1..] {
                assert_eq!(
                    server_error(twin_reply).as_deref(),
                    Some(twin_limit_error(limiter.kind).as_str()),
                    "{}",
                    context()
                );
            }
            assert!(states[1..].iter().all(|(v, _)| *v == Value::Nil), "{}: the twin wrote nothing", context());
            tally.add("beyond the twin's exact range (refused)".into());
            let _: () = redis::cmd("DEL").arg(&keys).query(&mut rig.c).unwrap(); // the module's key moved on alone
            continue;
        }
        if refused_ring_beyond_twin(
            &replies[1],
            std::slice::from_ref(&before),
            debited(&args, limiter.positional.len()),
        ) {
            assert_eq!(replies[2], replies[1], "{}", context());
            assert!(states[1..].iter().all(|s| *s == before), "{}: the twin wrote nothing", context());
            tally.add("a ring counting 2^53 or more (refused by the twin)".into());
            let _: () = redis::cmd("DEL").arg(&keys).query(&mut rig.c).unwrap();
            continue;
        }
        assert_eq!(replies[1], replies[0], "FCALL reply differs from the module's: {}", context());
        assert_eq!(replies[2], replies[0], "EVALSHA reply differs from the module's: {}", context());
        assert_eq!(states[1], states[0], "FCALL stored bytes/expiry differ from the module's: {}", context());
        assert_eq!(states[2], states[0], "EVALSHA stored bytes/expiry differ from the module's: {}", context());

        let outcome = match module {
            Value::Array(items) => match (
                items.first(),
                // The quantity: an integer of the tail, not an option's value.
                args.iter()
                    .enumerate()
                    .skip(limiter.positional.len())
                    .find(|&(i, a)| {
                        a.parse::<i64>().is_ok()
                            && !args[i - 1].eq_ignore_ascii_case("HELD")
                            && !args[i - 1].eq_ignore_ascii_case("PRECISION")
                    })
                    .map(|(_, a)| a),
            ) {
                (Some(Value::Int(1)), _) => "denied",
                (_, Some(q)) if q == "0" => "peek",
                (_, Some(q)) if q.starts_with('-') => "refund",
                _ => "admitted",
            },
            Value::ServerError(e) if e.code() == "WRONGTYPE" => "WRONGTYPE",
            Value::ServerError(e) if e.details().is_some_and(|d| d.contains("does not hold valid")) => "invalid state",
            Value::ServerError(_) => "argument error",
            other => panic!("{}: unexpected module reply {other:?}", context()),
        };
        let outcome = match outcome {
            _ if !args.iter().any(|a| a.eq_ignore_ascii_case("DEBIT")) => outcome,
            "denied" => "overdrawn (DEBIT)",
            "admitted" => "fitted (DEBIT)",
            "peek" => "check (DEBIT 0)",
            other => other,
        };
        if matches!(outcome, "WRONGTYPE" | "invalid state") && g.chance(0.5) {
            // Let the slot's limiter start afresh (else one foreign value answers every call).
            let _: () = redis::cmd("DEL").arg(&keys).query(&mut rig.c).unwrap();
        }
        if limiter.kind == Algorithm::Window
            && let Value::BulkString(b) = &before.0
            && matches!((b.first(), limiter.precision.is_some()), (Some(1), true) | (Some(2), false))
        {
            tally.add(format!("CL.WINDOW switching layout (PRECISION added or removed): {outcome}"));
        }
        if limiter.limit().is_some_and(|l| l > TWIN_LIMIT_MAX - 8) {
            tally.add(format!("{} with a limit near 2^53: {outcome}", limiter.kind.command()));
        }
        let precision = if limiter.precision.is_some() { " PRECISION" } else { "" };
        let unit = if limiter.millis { " MS" } else { "" };
        let held = if args.iter().any(|a| a.eq_ignore_ascii_case("HELD")) { " HELD" } else { "" };
        tally.add(format!("{}{precision}{unit}{held}: {outcome}", limiter.kind.command()));
    }
    eprintln!("{calls} calls, each on the module, FCALL and EVALSHA, all equal:");
    for (what, n) in &tally.calls {
        eprintln!("  {n:6}  {what}");
    }
    for kind in ALGORITHMS {
        let n: u64 = tally.calls.iter().filter(|(w, _)| w.starts_with(kind.command())).map(|(_, n)| n).sum();
        assert!(n as usize >= calls / 10, "{} was exercised: {n} calls", kind.command());
    }
    for must in [
        "denied",
        "peek",
        "refund",
        "admitted",
        "WRONGTYPE",
        "invalid state",
        "argument error",
        "PRECISION",
        " MS",
        "HELD: refund",
        "overdrawn (DEBIT)",
        "fitted (DEBIT)",
        "check (DEBIT 0)",
    ] {
        assert!(tally.calls.keys().any(|w| w.contains(must)), "the run covered `{must}`");
    }
    for kind in ALGORITHMS {
        let overdrawn = |w: &String| w.starts_with(kind.command()) && w.ends_with("overdrawn (DEBIT)");
        assert!(tally.calls.keys().any(overdrawn), "the run covered a {} debit that overdrew", kind.command());
    }
    let ring_debit = |w: &String| w.starts_with("CL.WINDOW PRECISION") && w.ends_with("overdrawn (DEBIT)");
    assert!(tally.calls.keys().any(ring_debit), "the run covered a debit that overdrew a ring");
    for must in [
        "CL.ALL (1 limiters)",
        "CL.ALL (4 limiters)",
        "denied (nothing written)",
        "DETAILS",
        "DEBIT overdrawn (every debit written)",
        "DEBIT fitted",
        "CL.EACH: some denied, the others written",
        "CL.EACH: DEBIT, some overdrawn (every debit written)",
        "CL.EACH: every limiter admitted",
    ] {
        assert!(tally.calls.keys().any(|w| w.contains(must)), "the run covered `{must}`");
    }
}

/// An exact log (layout 1) of `entries` with `head` dead entries in front.
fn log_bytes(head: u32, entries: &[i64]) -> Vec<u8> {
    let mut b = vec![1u8, 0, 0, 0];
    b.extend_from_slice(&head.to_le_bytes());
    entries.iter().for_each(|e| b.extend_from_slice(&e.to_le_bytes()));
    b
}

/// A ring (layout 2) of precision `p_ns`, newest bucket `newest`, with these counts.
fn ring_bytes(p_ns: i64, newest: i64, counts: &[i64]) -> Vec<u8> {
    let mut b = vec![2u8, 0, 0, 0, 0, 0, 0, 0];
    b.extend_from_slice(&p_ns.to_le_bytes());
    b.extend_from_slice(&newest.to_le_bytes());
    counts.iter().for_each(|c| b.extend_from_slice(&c.to_le_bytes()));
    b
}

/// A rig, and the instant its calls are pinned at: a day from now, 123,457 µs into a second.
fn rig_tomorrow() -> (Rig, i64) {
    let real_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    (Rig::start(), real_us + 86_400_000_000 + 123_457)
}

fn words(v: &[&str]) -> Vec<String> {
    v.iter().map(|a| a.to_string()).collect()
}

/// n instants spread evenly from `from` (included) to `to` (excluded).
fn spread(n: i64, from: i64, to: i64) -> Vec<i64> {
    (0..n).map(|i| from + (to - from) * i / n).collect()
}

/// What the sized paths of the twin read and write (long logs read in ranges and written in
/// pieces, a long log converted to buckets by search, a ring the module wrote under a raised
/// `throttle.max-buckets`), the GCRA at the last instants an i64 of nanoseconds holds, and which
/// error wins where the twin would refuse a call: the same replies, bytes and expiries as the
/// module's at pinned instants. (Sizes: a few thousand entries; bench/twin.sh measures the caps.)
#[test]
fn long_states_the_last_instants_and_error_precedence_match_the_module() {
    let (mut rig, now_us) = rig_tomorrow();
    let now = now_us * 1000;
    let s = words;
    let check = |rig: &mut Rig, what: &str, kind: Algorithm, plant: &Plant, args: &[String], at_us: i64| -> Value {
        let keys = Rig::keys(0);
        rig.plant(&keys, plant);
        let (before, replies, states) = rig.call(kind, &keys, args, at_us);
        let context = format!(
            "{what}: {} {args:?} at {at_us} µs on {} bytes",
            kind.command(),
            match &before.0 {
                Value::BulkString(b) => b.len(),
                _ => 0,
            }
        );
        assert_eq!(replies[1], replies[0], "FCALL reply: {context}");
        assert_eq!(replies[2], replies[0], "EVALSHA reply: {context}");
        assert_eq!(states[1], states[0], "FCALL stored bytes/expiry: {context}");
        assert_eq!(states[2], states[0], "EVALSHA stored bytes/expiry: {context}");
        replies[0].clone()
    };
    let expiry = |newest: i64, window_ms: i64| Some((newest + window_ms * MS).div_euclid(MS) + 1);

    // Long exact logs (3,000 entries, 24 KB: read in ranges), one window of 600 s.
    let window = 600_000;
    let live = spread(3000, now - (window - 1000) * MS, now - MS);
    let full = Plant::Value(log_bytes(0, &live), expiry(now, window));
    let mut dead_then_live = spread(4000, now - 3 * window * MS, now - window * MS - MS);
    dead_then_live.extend(spread(2000, now - (window - 1000) * MS, now - MS));
    let dead = Plant::Value(log_bytes(0, &dead_then_live), expiry(now, window));
    let mut stepped_entries = live[..2000].to_vec();
    stepped_entries.extend(std::iter::repeat_n(now + 3_600_000 * MS, 1000));
    let stepped = Plant::Value(log_bytes(0, &stepped_entries), expiry(now + 3_600_000 * MS, window));
    let with_head = Plant::Value(log_bytes(700, &live), expiry(now, window));
    for (what, plant) in
        [("full", &full), ("mostly dead", &dead), ("clock stepped back", &stepped), ("dead head", &with_head)]
    {
        for args in [
            s(&["3000", "600"]),
            s(&["5000", "600"]),
            s(&["5000", "600", "1500"]),
            s(&["3000", "600", "0"]),
            s(&["3000", "600", "-40"]),
            s(&["5000", "600", "-2500"]),
            s(&["3000", "600", "PRECISION", "1"]),
            s(&["2000", "600", "PRECISION", "7"]),
            s(&["1990", "600", "PRECISION", "7", "2"]),
            s(&["1000", "600", "PRECISION", "7", "1001"]),
            s(&["5000", "600000", "MS", "PRECISION", "60"]),
            s(&["5000", "600", "PRECISION", "600"]),
            s(&["3000", "300"]),
        ] {
            let reply = check(&mut rig, what, Algorithm::Window, plant, &args, now_us);
            assert!(matches!(reply, Value::Array(_)), "{what} {args:?}: {reply:?}");
        }
    }

    // A ring the module wrote with `throttle.max-buckets` raised (20,001 buckets of 30 ms over
    // the window): read with the twin's own precision (regrouped) and without (a log; runs of
    // buckets with equal counts, 1 and 3, become stepped runs of entries, and long runs of equal
    // counts are compared 64 buckets at a time).
    let p_ms = 30;
    let counts: Vec<i64> = (0..20_001)
        .map(|i| match i {
            1000..1300 => 1,
            1300..1500 => 2,
            _ => match i % 7 {
                0 => 0,
                3 | 4 => 3,
                _ => 1,
            },
        })
        .collect();
    let ring = Plant::Value(ring_bytes(p_ms * MS, now.div_euclid(p_ms * MS), &counts), expiry(now, window));
    for args in [
        s(&["30000", "600"]),
        s(&["20000", "600"]),
        s(&["20000", "600", "-5"]),
        s(&["30000", "600", "PRECISION", "1"]),
        s(&["20000", "600", "PRECISION", "1"]),
    ] {
        let reply = check(&mut rig, "20,001-bucket ring", Algorithm::Window, &ring, &args, now_us);
        assert!(matches!(reply, Value::Array(_)), "ring {args:?}: {reply:?}");
    }

    // CL.THROTTLE at the last instants: the TAT past 2^63 is refused as the module refuses it;
    // one that fits is stored exactly (pinned instants beyond 2^53 µs).
    let last_us = i64::MAX / 1000;
    for (at_us, args) in [
        (last_us - 500, s(&["15", "30", "60"])),
        (last_us - 10_000, s(&["0", "1", "5", "MS"])),
        (last_us - 10_000, s(&["2", "1", "1", "MS", "3"])),
        ((1 << 53) + 12_345, s(&["15", "30", "60"])),
    ] {
        check(&mut rig, "the last instants", Algorithm::Throttle, &Plant::Value(Vec::new(), None), &args, at_us);
        let _: () = redis::cmd("DEL").arg(&Rig::keys(0)[..]).query(&mut rig.c).unwrap();
    }
    // A debit that overdraws onto the last instants: its new TAT fits, and so does its retry
    // time (`new_TAT + q·EI − tolerance`, never past the new TAT), though `new_TAT + q·EI`
    // would not: the module stores it, and so must the twin.
    let at_us = last_us - 10_000;
    let tat = at_us * 1000 + 5 * MS;
    let plant = Plant::Value(tat.to_string().into_bytes(), Some(tat.div_euclid(MS) + 1));
    let reply = check(
        &mut rig,
        "a debit onto the last instants",
        Algorithm::Throttle,
        &plant,
        &s(&["0", "1", "5", "MS", "DEBIT"]),
        at_us,
    );
    assert_eq!(five_of(&reply), Some([1, 1, 0, 10, 10]), "{reply:?}");

    // Error precedence: the module's error over the twin's own refusal.
    let huge = "9007199254740993"; // above 2^53 − 1: the twin refuses to reply it
    let e = check(&mut rig, "a list", Algorithm::Counter, &Plant::List, &s(&[huge, "60"]), now_us);
    assert!(matches!(&e, Value::ServerError(err) if err.code() == "WRONGTYPE"), "{e:?}");
    let mut corrupt = counts[..100].to_vec();
    corrupt[7] = -1;
    let odd_precision =
        Plant::Value(ring_bytes(p_ms * MS + 1, now.div_euclid(p_ms * MS + 1), &corrupt), expiry(now, window));
    let e = check(
        &mut rig,
        "a corrupt ring",
        Algorithm::Window,
        &odd_precision,
        &s(&["9000", "600", "PRECISION", "1"]),
        now_us,
    );
    assert_eq!(server_error(&e).as_deref(), Some("ERR key does not hold valid CL.WINDOW state"));
    let e = check(
        &mut rig,
        "a corrupt ring",
        Algorithm::Window,
        &odd_precision,
        &s(&[huge, "600", "PRECISION", "1"]),
        now_us,
    );
    assert_eq!(server_error(&e).as_deref(), Some("ERR key does not hold valid CL.WINDOW state"));
    let _: () = redis::cmd("DEL").arg(&Rig::keys(0)[..]).arg(&Rig::keys(1)[..]).query(&mut rig.c).unwrap();
    let (_, replies, _) = rig.call_all(&[0, 1], &s(&["COUNTER", huge, "60", "COUNTER", "0", "60"]), now_us);
    assert_eq!(replies[1], replies[0], "cl_all: another limiter's argument error");
    assert_eq!(replies[2], replies[0], "cl_all (EVALSHA): another limiter's argument error");
    assert!(server_error(&replies[0]).is_some_and(|e| e.starts_with("ERR limiter 2:")), "{:?}", replies[0]);
    rig.plant(&Rig::keys(1), &Plant::List);
    let (_, replies, _) = rig.call_all(&[0, 1], &s(&["COUNTER", huge, "60", "COUNTER", "10", "60"]), now_us);
    assert_eq!(replies[1], replies[0], "cl_all: WRONGTYPE on another limiter's key");
    assert_eq!(replies[2], replies[0], "cl_all (EVALSHA): WRONGTYPE on another limiter's key");
}

/// The conversions and repairs at the caps (a 100,000-entry log read with `PRECISION` or
/// stepped an hour ahead, a 100,001-bucket ring the module writes under the largest
/// `throttle.max-buckets` read as a log or regrouped, a 10,000-bucket ring read as a log):
/// the twin's shortcuts there (a denial on a log read as buckets answered from the log, runs of
/// equal counts compared as bytes, a stepped tail rewritten at once) give the module's replies,
/// bytes and expiries. (bench/twin.sh measures these calls.)
#[test]
fn conversions_and_repairs_at_the_caps_match_the_module() {
    let (mut rig, now_us) = rig_tomorrow();
    let now = now_us * 1000;
    let s = words;
    let hour = 3_600_000 * MS;
    let expiry = |newest: i64| Some((newest + hour).div_euclid(MS) + 1);
    let mut check = |what: &str, plant: &Plant, args: &[String]| {
        let keys = Rig::keys(0);
        rig.plant(&keys, plant);
        let (_, replies, states) = rig.call(Algorithm::Window, &keys, args, now_us);
        assert!(matches!(replies[0], Value::Array(_)), "{what} {args:?}: {:?}", replies[0]);
        assert_eq!(replies[1], replies[0], "FCALL reply: {what} {args:?}");
        assert_eq!(replies[2], replies[0], "EVALSHA reply: {what} {args:?}");
        // (Compared without printing 800 KB values.)
        assert!(states[1] == states[0], "FCALL stored bytes/expiry: {what} {args:?}");
        assert!(states[2] == states[0], "EVALSHA stored bytes/expiry: {what} {args:?}");
    };
    let buckets = |q: &str| s(&["100000", "3600000", "MS", "PRECISION", "360", q]);

    let full = Plant::Value(log_bytes(0, &spread(100_000, now - hour + 60_000 * MS, now - MS)), expiry(now));
    for args in [
        buckets("1"),
        buckets("0"),
        buckets("100001"),
        buckets("-10"),
        s(&["100001", "3600000", "MS", "PRECISION", "360"]),
    ] {
        check("a full 100,000-entry log read as 10,000 buckets", &full, &args);
    }
    // Entries on and a few ns either side of every bucket boundary (the twin compares them as
    // doubles first, exactly when near).
    let edge = 360_000 * MS;
    let first_edge = (now - hour).div_euclid(edge) + 2;
    let edges: Vec<i64> = (first_edge..first_edge + 9_990).flat_map(|k| (-4..=4).map(move |o| k * edge + o)).collect();
    let edges = Plant::Value(log_bytes(0, &edges), expiry(now));
    for args in [buckets("1"), buckets("0"), s(&["50000", "3600000", "MS", "PRECISION", "360"])] {
        check("a long log on the bucket boundaries read as 10,000 buckets", &edges, &args);
    }
    // Buckets of 10 entries, one in two at random with an 11th a ns before its end (as a
    // double, the same as the end).
    let mut rng = StdRng::seed_from_u64(8);
    let bucket = 360 * MS;
    let first_bucket = (now - hour).div_euclid(bucket) + 2;
    let last_ns: Vec<i64> = (first_bucket..first_bucket + 9_000)
        .flat_map(|k| {
            (0..10).map(move |j| k * bucket + j * 20 * MS).chain(rng.random_bool(0.5).then_some((k + 1) * bucket - 1))
        })
        .collect();
    let last_ns = Plant::Value(log_bytes(0, &last_ns), expiry(now));
    for args in [buckets("1"), buckets("0")] {
        check("a long log with entries a ns before a bucket's end read as 10,000 buckets", &last_ns, &args);
    }
    // Gaps drawn at random: buckets of 0 to a few hundred entries, runs of empty buckets,
    // repeated instants, entries on a boundary and a ns either side (the twin predicts each
    // bucket's count from the last one and searches where the prediction fails).
    let (mut t, mut random) = (now - hour + 1, Vec::new());
    while random.len() < 100_000 && t < now {
        random.push(t);
        t += match rng.random_range(0..10) {
            0 => 0,
            1 => bucket - t.rem_euclid(bucket) + rng.random_range(-1..=1),
            2 if rng.random_range(0..50) == 0 => rng.random_range(0..3_000 * MS),
            2 => rng.random_range(0..3 * MS),
            _ => rng.random_range(0..60 * MS),
        }
        .max(0);
    }
    let random = Plant::Value(log_bytes(0, &random), expiry(now));
    for args in [buckets("1"), buckets("0"), buckets("-10"), s(&["50000", "3600000", "MS", "PRECISION", "360"])] {
        check("a long log of random gaps read as 10,000 buckets", &random, &args);
    }
    // A short log in descending order (no limiter writes one, a hostile state): read with
    // PRECISION by a call that writes nothing, the module's reply (the twin counts such a
    // log entry by entry, as the module does, and takes no shortcut from its order).
    let descending = Plant::Value(
        log_bytes(0, &(0..32).map(|i| now - 156_637_429 - i * 830_000_000).collect::<Vec<i64>>()),
        expiry(now),
    );
    for q in ["6", "0", "1"] {
        check("a short descending log read with PRECISION", &descending, &s(&["4", "14", q, "PRECISION", "1"]));
    }
    let mut ahead = spread(50_000, now - hour + 60_000 * MS, now - MS);
    ahead.extend(std::iter::repeat_n(now + hour, 50_000));
    let ahead = Plant::Value(log_bytes(0, &ahead), expiry(now + hour));
    for args in [s(&["100000", "3600"]), s(&["100000", "3600", "0"]), buckets("1")] {
        check("a full log, its newest 50,000 entries an hour ahead", &ahead, &args);
    }

    let p = 36 * MS;
    let ring = |counts: &[i64]| Plant::Value(ring_bytes(p, now.div_euclid(p), counts), expiry(now));
    let ones = ring(&vec![1; 100_001]);
    for args in [s(&["100000", "3600"]), s(&["99000", "3600", "0"]), buckets("1")] {
        check("a 100,001-bucket ring of ones", &ones, &args);
    }
    let mut two_empty = vec![1; 100_001];
    two_empty[99_999..].fill(0);
    check("a 100,001-bucket ring, two buckets empty, read as a log", &ring(&two_empty), &s(&["100000", "3600"]));
    let mut rng = StdRng::seed_from_u64(18);
    let mixed = ring(&(0..100_001).map(|_| rng.random_range(0..=2)).collect::<Vec<i64>>());
    for args in
        [s(&["100000", "3600"]), s(&["100000", "3600", "-7"]), s(&["50000", "3600"]), s(&["50000", "3600", "0"])]
    {
        check("a 100,001-bucket ring of counts 0-2 read as a log", &mixed, &args);
    }
    // (Uneven counts, some above 16 copies of an entry; the limit reached within a bucket.)
    let uneven: Vec<i64> = (0..100_001)
        .map(|_| if rng.random_range(0..4) == 0 { rng.random_range(17..40) } else { rng.random_range(0..=3) })
        .collect();
    for args in [s(&["100000", "3600"]), s(&["99999", "3600", "3"])] {
        check("a 100,001-bucket ring of uneven counts read as a log", &ring(&uneven), &args);
    }
    // (Its newest 500 buckets after now: their entries are logged at now.)
    let later = Plant::Value(ring_bytes(p, now.div_euclid(p) + 500, &uneven), expiry(now + 500 * p));
    for args in [s(&["100000", "3600"]), s(&["100000", "3600", "0"])] {
        check("a 100,001-bucket ring of uneven counts, its newest buckets after now, read as a log", &later, &args);
    }
    let tens = Plant::Value(ring_bytes(360 * MS, now.div_euclid(360 * MS), &[10; 10_001]), expiry(now));
    check("a full 10,000-bucket ring read as a log", &tens, &s(&["100000", "3600"]));
    // Debits at the caps: logged (or counted) past the limit, converted as an admission
    // converts, the retry time read from the state the debit leaves.
    let debit = |mut args: Vec<String>| {
        args.push("DEBIT".into());
        args
    };
    for args in [buckets("5"), buckets("0"), buckets("100001")] {
        check("a debit on a full 100,000-entry log read as 10,000 buckets", &full, &debit(args));
    }
    for q in ["7", "100000", "0"] {
        check("a debit on a full 100,000-entry log", &full, &debit(s(&["100000", "3600", q])));
    }
    check("a debit on a long log of random gaps read as buckets", &random, &debit(buckets("40000")));
    check("a debit on a full log with 50,000 entries ahead", &ahead, &debit(s(&["100000", "3600", "3"])));
    check("a debit on a 100,001-bucket ring of ones read as a log", &ones, &debit(s(&["100000", "3600", "5"])));
    check("a debit on a 100,001-bucket ring of ones", &ones, &debit(buckets("9")));
    check("a debit on a 100,001-bucket ring of 0-2 read as a log", &mixed, &debit(s(&["50000", "3600", "50000"])));
    check("a debit on a full 10,000-bucket ring read as a log", &tens, &debit(s(&["100000", "3600", "2"])));
    // More than an exact log takes in one call: the module's error, nothing written.
    let keys = Rig::keys(0);
    rig.plant(&keys, &full);
    let args = debit(s(&["100000", "3600", "100001"]));
    let (before, replies, states) = rig.call(Algorithm::Window, &keys, &args, now_us);
    assert!(matches!(replies[0], Value::ServerError(_)), "an exact debit of 100,001: {:?}", replies[0]);
    assert_eq!(replies[1], replies[0], "FCALL reply: an exact debit of 100,001");
    assert_eq!(replies[2], replies[0], "EVALSHA reply: an exact debit of 100,001");
    assert!(states.iter().all(|st| st.0 == before.0), "an exact debit of 100,001 wrote nothing");
    // A negative count among uneven ones: the module's error where a call reads it, none where
    // the limit is reached before it.
    let slot_of = |back: i64| (now.div_euclid(p) - back).rem_euclid(100_001) as usize;
    for (back, limit, refused) in
        [(100, "100000", true), (5_000, "100000", true), (20_000, "100000", false), (5_000, "1000", false)]
    {
        let mut bad = uneven.clone();
        bad[slot_of(back)] = -1;
        let keys = Rig::keys(0);
        rig.plant(&keys, &ring(&bad));
        let (_, replies, states) = rig.call(Algorithm::Window, &keys, &s(&[limit, "3600"]), now_us);
        assert_eq!(
            matches!(replies[0], Value::ServerError(_)),
            refused,
            "a negative count {back} buckets back, limit {limit}: {:?}",
            replies[0]
        );
        assert_eq!(replies[1], replies[0], "FCALL reply: a negative count {back} buckets back, limit {limit}");
        assert_eq!(replies[2], replies[0], "EVALSHA reply: a negative count {back} buckets back, limit {limit}");
        assert!(
            states[1] == states[0] && states[2] == states[0],
            "stored bytes/expiry: a negative count {back} buckets back, limit {limit}"
        );
    }
}

/// CL.QUOTA's words: a calendar the twin can compute (UTC or a fixed offset), sometimes
/// anchored, sometimes a bad word.
fn quota_words(g: &mut Gen, now_ms: i64) -> Vec<String> {
    let mut w = vec![
        if g.chance(0.05) {
            g.rng.random_range(0..20_000_000_000i64).to_string()
        } else {
            g.rng.random_range(1..12i64).to_string()
        },
        "PER".to_string(),
        if g.chance(0.02) {
            "Fortnight".to_string()
        } else {
            g.pick(&["MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "YEAR", "day"]).to_string()
        },
    ];
    if g.chance(0.6) {
        let zone = match g.rng.random_range(0..8) {
            0 => "UTC".to_string(),
            1 => "Z".to_string(),
            2 => "+05:30".to_string(),
            3 => "-0800".to_string(),
            4 => "+14".to_string(),
            5 if g.chance(0.1) => "+26:00".to_string(),
            5 => "-00:45".to_string(),
            _ => {
                let m = g.rng.random_range(0..=(25 * 60 + 59));
                format!("{}{:02}:{:02}", if g.chance(0.5) { '-' } else { '+' }, m / 60, m % 60)
            }
        };
        w.extend(["TZ".to_string(), zone]);
    }
    if g.chance(0.5) {
        let at = now_ms + g.rng.random_range(-3_000_000_000_000i64..3_000_000_000_000);
        let anchor = match g.rng.random_range(0..5) {
            0 => (at / 1000).to_string(),
            1 => at.to_string(),
            2 => {
                let (days, ms) = (at.div_euclid(86_400_000), at.rem_euclid(86_400_000));
                let (y, m, d) = redis_throttle_core::calendar::civil_from_days(days);
                format!(
                    "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
                    ms / 3_600_000,
                    ms / 60_000 % 60,
                    ms / 1000 % 60,
                    ms % 1000
                )
            }
            3 => {
                let (days, ms) = (at.div_euclid(86_400_000), at.rem_euclid(86_400_000));
                let (y, m, d) = redis_throttle_core::calendar::civil_from_days(days);
                format!(
                    "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}+01:00",
                    ms / 3_600_000,
                    ms / 60_000 % 60,
                    ms / 1000 % 60
                )
            }
            _ if g.chance(0.8) => (at / 1000).to_string(),
            _ => g
                .pick(&[
                    "2026-02-29T00:00:00Z",
                    "2026-01-31T09:00:00.0001Z",
                    "2026-01-31T09:00Z",
                    "yesterday",
                    "2028-02-29T23:59:59.999-12:00",
                ])
                .to_string(),
        };
        w.extend(["ANCHOR".to_string(), anchor]);
    }
    w
}

#[test]
fn the_twin_matches_the_module_on_calendar_quotas() {
    let calls: usize =
        std::env::var("THROTTLE_DIFF_CALLS").ok().and_then(|v| v.parse().ok()).map_or(3_000, |n: usize| n / 4);
    let seed: u64 = std::env::var("THROTTLE_DIFF_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("THROTTLE_DIFF_SEED={seed} THROTTLE_DIFF_CALLS={}", calls * 4);
    let mut g = Gen { rng: StdRng::seed_from_u64(seed), held: None, debit: false };
    let real_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    let mut now_us = real_us + 86_400_000_000;
    let mut rig = Rig::start();
    const SLOTS: usize = 6;
    // Each slot keeps its words for a while, so counts build up, then changes them on its live key.
    let mut words: Vec<Vec<String>> = (0..SLOTS).map(|_| quota_words(&mut g, now_us / 1000)).collect();
    let mut tally = Tally::default();
    for step in 0..calls {
        now_us += match g.rng.random_range(0..10) {
            0 => 0,
            1..=3 => g.rng.random_range(1..60_000_000),
            4..=6 => g.rng.random_range(1..3_600_000_000),
            7..=8 => g.rng.random_range(1..86_400_000_000 * 3),
            _ => -g.rng.random_range(1..3_600_000_000),
        };
        // Within a year ahead of real time: no key expires by the server's own clock meanwhile.
        now_us = now_us.clamp(real_us + 43_200_000_000, real_us + 300 * 86_400_000_000);
        let slot = g.rng.random_range(0..SLOTS);
        let keys = Rig::keys(slot);
        if g.chance(0.1) {
            words[slot] = quota_words(&mut g, now_us / 1000);
        }
        if g.chance(0.02) {
            let _: () = redis::cmd("DEL").arg(&keys).query(&mut rig.c).unwrap();
        }
        if g.chance(0.05) {
            // A planted count: any expiry (this period's end or not, none), or junk.
            let value =
                if g.chance(0.1) { g.pick(&["junk", "-1"]) } else { g.pick(&["0", "3", "11", "999999999999999999"]) }
                    .to_string();
            let expiry = match g.rng.random_range(0..3) {
                0 => None,
                _ => Some(now_us / 1000 + g.rng.random_range(1..40 * 86_400_000)),
            };
            rig.plant(&keys, &Plant::Value(value.into_bytes(), expiry));
        }
        let mut args = words[slot].clone();
        if g.chance(0.7) {
            let q = g.rng.random_range(-4..14i64);
            args.extend(["QUANTITY".to_string(), q.to_string()]);
            // A bounded refund: HELD at or near the key's expiry (the period's end, or another).
            if (q < 0 && g.chance(0.5)) || g.chance(0.02) {
                let expiry: i64 = redis::cmd("PEXPIRETIME").arg(&keys[0]).query(&mut rig.c).unwrap();
                let at = if expiry >= 0 { expiry } else { now_us / 1000 };
                args.extend(["HELD".to_string(), (at + *g.pick(&[0i64, 0, -1, 1, 86_400_000])).to_string()]);
            }
        }
        if g.chance(0.4) {
            args.push("MS".into());
        }
        if g.chance(0.1) {
            args.push("SHADOW".into());
        }
        if g.chance(0.25) {
            // A charge (issue 41): past the limit, and now and then up to the count's bound.
            if g.chance(0.1) && !args.iter().any(|a| a == "QUANTITY") {
                let q = 999_999_999_999_999_999 - g.rng.random_range(0..30i64);
                args.extend(["QUANTITY".to_string(), q.to_string()]);
            }
            args.push(g.pick(&["DEBIT", "debit"]).to_string());
        }
        if g.chance(0.2) {
            // The same quota as a CL.ALL spec (QUANTITY is the spec's; MS and SHADOW the call's).
            let (before, replies, states) = {
                let mut spec = vec!["QUOTA".to_string()];
                spec.extend(args.iter().cloned());
                rig.call_all(&[slot], &spec, now_us)
            };
            let context = format!(
                "step {step} (THROTTLE_DIFF_SEED={seed}): at {now_us} µs, CL.ALL QUOTA {} (before {before:?})",
                args.join(" ")
            );
            assert_eq!(replies[1], replies[0], "{context}");
            assert_eq!(replies[2], replies[0], "{context}");
            assert_eq!(states[1], states[0], "{context}");
            assert_eq!(states[2], states[0], "{context}");
            tally.add(format!("CL.ALL {}", if server_error(&replies[0]).is_some() { "error" } else { "decided" }));
            continue;
        }
        let (before, replies, states) = rig.call_named(("CL.QUOTA", "cl_quota"), &keys, &args, now_us);
        let context = format!(
            "step {step} (THROTTLE_DIFF_SEED={seed}): at {now_us} µs, CL.QUOTA {} (before {before:?})",
            args.join(" ")
        );
        assert_eq!(replies[1], replies[0], "FCALL cl_quota differs: {context}");
        assert_eq!(replies[2], replies[0], "EVALSHA cl_quota differs: {context}");
        assert_eq!(states[1], states[0], "FCALL cl_quota stored bytes/expiry differ: {context}");
        assert_eq!(states[2], states[0], "EVALSHA cl_quota stored bytes/expiry differ: {context}");
        let outcome = match &replies[0] {
            Value::Array(items) if matches!(items.first(), Some(Value::Int(1))) => "denied".to_string(),
            Value::Array(_) => "admitted".to_string(),
            v => format!(
                "error {}",
                server_error(v).unwrap_or_default().split(' ').take(3).collect::<Vec<_>>().join(" ")
            ),
        };
        tally.add(outcome);
    }
    eprintln!("{:#?}", tally.calls);
    assert!(
        tally.calls.get("admitted").is_some_and(|&n| n > 50) && tally.calls.get("denied").is_some_and(|&n| n > 20),
        "{:?}",
        tally.calls
    );
}

/// Cases the random run reaches rarely, pinned: CL.ALL ties as the reply shows them, and a
/// pacer's key (CL.PACE's `P` and TAT) under every limiter, single and in CL.ALL.
#[test]
fn ties_and_pacer_keys_match_the_module() {
    let mut rig = Rig::start();
    let real_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    let now_us = real_us + 86_400_000_000;
    let now_ns = now_us * 1000;
    let int = |v: &Value| match v {
        Value::Int(i) => *i,
        other => panic!("not an integer: {other:?}"),
    };
    // Two CL.THROTTLE keys (burst 1, one per 10 s) denying for 1.2 s and 1.9 s: both reply 2
    // seconds, and the first names the call; in milliseconds the second is the longer.
    for (slot, ahead_ms) in [(0, 11_200), (1, 11_900)] {
        let tat = now_ns + ahead_ms * MS;
        rig.plant(&Rig::keys(slot), &Plant::Value(tat.to_string().into_bytes(), Some(tat.div_euclid(MS) + 1)));
    }
    for (unit, want) in [(None, [2, 2, 1]), (Some("MS"), [1200, 1900, 2])] {
        let mut args: Vec<String> = "THROTTLE 1 1 10 THROTTLE 1 1 10 DETAILS".split(' ').map(String::from).collect();
        if let Some(unit) = unit {
            args.push(unit.into());
            args[3] = "10000".into();
            args[7] = "10000".into();
        }
        let (_, replies, _) = rig.call_all(&[0, 1], &args, now_us);
        assert_eq!(replies[1], replies[0], "cl_all (FCALL) {args:?}");
        assert_eq!(replies[2], replies[0], "cl_all (EVALSHA) {args:?}");
        let Value::Array(items) = &replies[0] else { panic!("{:?}", replies[0]) };
        let Value::Array(details) = &items[6] else { panic!("{items:?}") };
        let retry = |d: &Value| match d {
            Value::Array(five) => int(&five[3]),
            other => panic!("{other:?}"),
        };
        assert_eq!([retry(&details[0]), retry(&details[1]), int(&items[5])], want, "{args:?}");
    }
    // A pacer's key: WRONGTYPE for every limiter and every CL.ALL spec, and left as it was.
    let tat = now_ns + 5_000 * MS;
    let pacer = Plant::Value(format!("P{tat}").into_bytes(), Some(tat.div_euclid(MS) + 1));
    let calls: [(Algorithm, &str); 4] = [
        (Algorithm::Throttle, "9 10 1000 MS"),
        (Algorithm::Window, "5 1000 MS"),
        (Algorithm::Bucket, "5 1 1000 MS"),
        (Algorithm::Counter, "5 1000 MS"),
    ];
    for (kind, words) in calls {
        for quantity in ["1", "0", "-1"] {
            let keys = Rig::keys(2);
            rig.plant(&keys, &pacer);
            let args: Vec<String> = format!("{words} {quantity}").split(' ').map(String::from).collect();
            let (before, replies, states) = rig.call(kind, &keys, &args, now_us);
            for reply in &replies {
                assert_eq!(
                    server_error(reply).as_deref(),
                    Some("WRONGTYPE Operation against a key holding the wrong kind of value"),
                    "{kind:?} {args:?}"
                );
            }
            assert!(states.iter().all(|s| *s == before), "{kind:?} {args:?}: the pacer's key is left as it was");
        }
    }
    rig.plant(&Rig::keys(2), &pacer);
    let (before, replies, states) =
        rig.call_all(&[0, 2], &["COUNTER", "5", "10", "THROTTLE", "9", "10", "1"].map(String::from), now_us);
    for reply in &replies {
        assert_eq!(
            server_error(reply).as_deref(),
            Some("WRONGTYPE Operation against a key holding the wrong kind of value"),
            "CL.ALL"
        );
    }
    assert_eq!(states[0], before, "CL.ALL wrote nothing");
}

/// FCALL cl_throttle's hot path (words seen before, a tolerance below 2^52 ns, a key holding
/// nothing or a TAT: decided in plain numbers, not through `single`): calls repeated on the same
/// words and keys at pinned instants, through every branch (admitted, denied, the last unit,
/// peeks, refunds down to an empty key, a quantity above the limit, SHADOW, MS, the clock
/// stepped back, TATs of other texts and of other parameters, states the hot path leaves to
/// `single`: invalid, pacers, other kinds, lists) and words it never takes (a tolerance beyond
/// 2^52 ns): the same replies, bytes and expiries as the module's, call for call.
#[test]
fn cl_throttle_repeated_on_the_same_words_matches_the_module() {
    let (mut rig, start_us) = rig_tomorrow();
    let keys = Rig::keys(0);
    let sets: Vec<Vec<String>> = [
        &["0", "1", "10"][..],
        &["4", "1", "10"],
        &["4", "1", "10", "2"],
        &["4", "1", "10", "0"],
        &["4", "1", "10", "-3"],
        &["4", "1", "10", "7"],
        &["4", "1", "10", "SHADOW"],
        &["4", "1", "10", "3", "shadow"],
        &["9", "3", "1500", "MS"],
        &["9", "3", "1500", "ms", "2", "SHADOW"],
        &["99", "100000000", "1"],
        &["15", "30", "60"],
        &["2", "1", "100000000"],
        &["0", "1", "1000000000000", "MS"],
    ]
    .iter()
    .map(|w| words(w))
    .collect();
    // (µs from the previous call; a negative step is the clock stepped back)
    let steps: [i64; 16] =
        [0, 0, 1, 999, 1000, 500_000, 3_000_000, 0, 2_999_999, 10_000_000, -20_000_000, 0, 1, 3_600_000_000, 7, 0];
    let now_ns = |us: i64| us * 1000;
    let plants = |now_us: i64| -> Vec<(&'static str, Plant)> {
        let tat = |ns: i64| Plant::Value(ns.to_string().into_bytes(), Some(ns.div_euclid(MS) + 1));
        let now = now_ns(now_us);
        // (ahead by a whole ms or s, and 1 ns either side, and just past 1500 ms MS's tolerance less
        // one unit: the reply times' rounding)
        let mut v: Vec<(&'static str, Plant)> = [
            1,
            999_999,
            1_000_000,
            1_000_001,
            999_999_999,
            1_000_000_000,
            1_000_000_001,
            4_500_000_001,
            4_501_000_000,
            5_000_000_123,
        ]
        .into_iter()
        .map(|ahead| ("a TAT just ahead", tat(now + ahead)))
        .collect();
        v.extend([
            ("a TAT a day ahead", tat(now + 86_400_000_000_000)),
            ("a TAT 60 days ahead", tat(now + 60 * 86_400_000_000_000)),
            ("a TAT 60 days ago", Plant::Value((now - 60 * 86_400_000_000_000).to_string().into_bytes(), None)),
            ("a TAT in the past", Plant::Value((now - 1).to_string().into_bytes(), None)),
            ("a TAT before 2001 (18 digits)", Plant::Value(b"999999999999999999".to_vec(), None)),
            ("a leading zero", Plant::Value(format!("0{now}").into_bytes(), None)),
            ("a pacer", Plant::Value(format!("P{now}").into_bytes(), None)),
            ("a counter", Plant::Value(b"12".to_vec(), None)),
            ("junk", Plant::Value(b"12x".to_vec(), None)),
            ("a list", Plant::List),
        ]);
        v
    };
    let mut now_us = start_us;
    let mut checked = 0;
    let mut check = |rig: &mut Rig, what: &str, args: &[String], now_us: i64| {
        let (before, replies, states) = rig.call(Algorithm::Throttle, &keys, args, now_us);
        let context = format!("{what}: CL.THROTTLE {args:?} at {now_us} µs on {before:?}");
        assert_eq!(replies[1], replies[0], "FCALL reply: {context}");
        assert_eq!(replies[2], replies[0], "EVALSHA reply: {context}");
        assert_eq!(states[1], states[0], "FCALL stored bytes/expiry: {context}");
        assert_eq!(states[2], states[0], "EVALSHA stored bytes/expiry: {context}");
        checked += 1;
    };
    for args in &sets {
        let _: () = redis::cmd("DEL").arg(&keys[..]).query(&mut rig.c).unwrap();
        for step in steps {
            now_us += step;
            check(&mut rig, "a run", args, now_us);
        }
        for i in 0..plants(now_us).len() {
            // (planted relative to the instant of its first call)
            let (what, plant) = plants(now_us).swap_remove(i);
            rig.plant(&keys, &plant);
            for step in [0, 0, 1, 2_000_000] {
                now_us += step;
                check(&mut rig, what, args, now_us);
            }
        }
    }
    // Every set on one key in turn: each call reads a TAT another set's call wrote.
    let _: () = redis::cmd("DEL").arg(&keys[..]).query(&mut rig.c).unwrap();
    for round in 0..3 {
        for args in &sets {
            now_us += 250_000 * round;
            check(&mut rig, "sets in turn", args, now_us);
        }
    }
    assert!(checked > 400, "{checked} calls checked");
}

/// cl_window's and cl_counter's hot paths (words seen before: a ring of the call's own
/// precision, an exact log, a counter) and what they leave to `single`, called repeatedly with the same words
/// and keys at pinned instants through every branch (admitted into the same bucket, into a new
/// one, after the ring went stale; denied, peeks, a quantity above the limit, SHADOW, MS, the
/// clock stepped back; refunds; states they do not read: another precision or length, a ring
/// stamped ahead, invalid counts, logs, lists, counts without an expiry or at 2^53): the same
/// replies, bytes and expiries as the module's, call for call.
#[test]
fn cl_window_and_cl_counter_repeated_on_the_same_words_match_the_module() {
    let (mut rig, start_us) = rig_tomorrow();
    let keys = Rig::keys(0);
    let ring_sets: Vec<Vec<String>> = [
        &["10", "60", "PRECISION", "6"][..],
        &["10", "60000", "MS", "PRECISION", "6000", "2"],
        &["10", "60", "PRECISION", "6", "0"],
        &["3", "60", "PRECISION", "6", "5"],
        &["4", "60", "PRECISION", "6", "SHADOW"],
        &["4", "60", "PRECISION", "6", "2", "shadow"],
        &["10", "60", "PRECISION", "6", "-2"],
        &["1000000", "60000", "PRECISION", "6000", "1", "MS"],
        &["5", "1", "PRECISION", "1"],
        &["20", "100", "MS", "PRECISION", "1"],
        &["20", "1000", "MS", "PRECISION", "7"],
    ]
    .iter()
    .map(|w| words(w))
    .collect();
    let log_sets: Vec<Vec<String>> = [
        &["5", "10"][..],
        &["5", "10000", "MS", "2"],
        &["5", "10", "0"],
        &["3", "10", "4"],
        &["3", "10", "SHADOW"],
        &["5", "10", "-2"],
    ]
    .iter()
    .map(|w| words(w))
    .collect();
    let log_plants = |now_us: i64| -> Vec<(&'static str, Plant)> {
        let now = now_us * 1000;
        let at = Some(now_us / 1000 + 10_000);
        vec![
            ("a log", Plant::Value(log_bytes(0, &[now - 9_000 * MS, now - 5 * MS, now]), at)),
            (
                "a log of dead entries",
                Plant::Value(
                    log_bytes(1, &[now - 30_000 * MS, now - 20_000 * MS, now - 11_000 * MS, now - 2 * MS]),
                    at,
                ),
            ),
            ("a log stamped ahead", Plant::Value(log_bytes(0, &[now - MS, now + 3_000 * MS]), at)),
            ("a log out of order", Plant::Value(log_bytes(0, &[now, now - 8_000 * MS, now - 1_000 * MS]), at)),
            ("a ring", Plant::Value(ring_bytes(1000 * MS, now.div_euclid(1000 * MS), &[1; 11]), at)),
            ("a counter", Plant::Value(b"3".to_vec(), at)),
            ("an empty string", Plant::Value(Vec::new(), None)),
            ("a list", Plant::List),
        ]
    };
    let counter_sets: Vec<Vec<String>> = [
        &["5", "10"][..],
        &["5", "10", "2"],
        &["5", "10", "0"],
        &["5", "10", "7"],
        &["3", "10", "SHADOW"],
        &["5", "1500", "MS", "2"],
        &["5", "10", "-2"],
        &["100000000", "60000", "MS"],
    ]
    .iter()
    .map(|w| words(w))
    .collect();
    // (µs from the previous call; a negative step is the clock stepped back)
    let steps: [i64; 18] = [
        0,
        0,
        1,
        999,
        1000,
        500_000,
        3_000_000,
        0,
        2_999_999,
        6_000_000,
        10_000_000,
        -20_000_000,
        0,
        1,
        3_600_000_000,
        7,
        0,
        59_000_000,
    ];
    let text = |v: i64| v.to_string().into_bytes();
    let ring_plants = |args: &[String], now_us: i64| -> Vec<(&'static str, Plant)> {
        let millis = args.iter().any(|a| a.eq_ignore_ascii_case("MS"));
        let unit = if millis { 1 } else { 1000 };
        let window = args[1].parse::<i64>().unwrap() * unit;
        let p = args[args.iter().position(|a| a == "PRECISION").unwrap() + 1].parse::<i64>().unwrap() * unit;
        let now = now_us * 1000;
        let slots = (window + p - 1) / p + 1;
        let current = now.div_euclid(p * MS);
        let ring = |p_ms: i64, newest: i64, counts: &[i64]| {
            Plant::Value(ring_bytes(p_ms * MS, newest, counts), Some((newest + 1) * p_ms + window))
        };
        let counts = |f: &dyn Fn(i64) -> i64| (0..slots).map(f).collect::<Vec<i64>>();
        vec![
            ("a ring", ring(p, current, &counts(&|i| i % 3))),
            ("a ring a bucket behind", ring(p, current - 1, &counts(&|i| (i % 2) * 2))),
            ("a ring a window behind", ring(p, current - slots + 1, &counts(&|_| 1))),
            ("a stale ring", ring(p, current - slots - 3, &counts(&|_| 4))),
            ("a ring stamped ahead", ring(p, current + slots + 2, &counts(&|_| 1))),
            (
                "a ring of another precision",
                ring(p * 2, now.div_euclid(2 * p * MS), &counts(&|_| 1)[..(slots / 2 + 1) as usize]),
            ),
            ("a ring of another length", ring(p, current, &counts(&|_| 1)[..(slots - 1) as usize])),
            ("a large count", ring(p, current, &counts(&|i| if i == 0 { 1 << 50 } else { 0 }))),
            ("a count with its top bit set", ring(p, current, &counts(&|i| if i == 1 { -1 } else { 0 }))),
            ("a log", Plant::Value(log_bytes(0, &[now - MS, now]), Some(now_us / 1000 + window))),
            ("a counter", Plant::Value(text(3), Some(now_us / 1000 + 10_000))),
            ("an empty string", Plant::Value(Vec::new(), None)),
            ("a list", Plant::List),
        ]
    };
    let counter_plants = |now_us: i64| -> Vec<(&'static str, Plant)> {
        let now_ms = now_us / 1000;
        vec![
            ("a count", Plant::Value(text(3), Some(now_ms + 5_000))),
            ("a count closing now", Plant::Value(text(3), Some(now_ms))),
            ("a count closing in 1 ms", Plant::Value(text(4), Some(now_ms + 1))),
            ("a zero", Plant::Value(text(0), Some(now_ms + 5_000))),
            ("a count above the limit", Plant::Value(text(9), Some(now_ms + 5_000))),
            ("a count without expiry", Plant::Value(text(2), None)),
            ("a count beyond any ceiling", Plant::Value(text(2), Some(9_223_372_036_855))),
            ("a count a day ahead", Plant::Value(text(1), Some(now_ms + 86_400_000))),
            ("a count at 2^53", Plant::Value(text(9_007_199_254_740_993), Some(now_ms + 5_000))),
            ("a leading zero", Plant::Value(b"03".to_vec(), Some(now_ms + 5_000))),
            ("a TAT", Plant::Value(text(now_us * 1000), Some(now_ms + 1))),
            ("junk", Plant::Value(b"3x".to_vec(), Some(now_ms + 5_000))),
            ("a list", Plant::List),
        ]
    };
    let mut now_us = start_us;
    let mut checked = 0;
    let mut check = |rig: &mut Rig, kind: Algorithm, what: &str, args: &[String], now_us: i64| {
        let (before, replies, states) = rig.call(kind, &keys, args, now_us);
        let context = format!("{what}: {} {args:?} at {now_us} µs on {before:?}", kind.command());
        assert_eq!(replies[1], replies[0], "FCALL reply: {context}");
        assert_eq!(replies[2], replies[0], "EVALSHA reply: {context}");
        assert_eq!(states[1], states[0], "FCALL stored bytes/expiry: {context}");
        assert_eq!(states[2], states[0], "EVALSHA stored bytes/expiry: {context}");
        checked += 1;
    };
    for (kind, sets) in
        [(Algorithm::Window, &ring_sets), (Algorithm::Window, &log_sets), (Algorithm::Counter, &counter_sets)]
    {
        for args in sets {
            let _: () = redis::cmd("DEL").arg(&keys[..]).query(&mut rig.c).unwrap();
            for step in steps {
                now_us += step;
                check(&mut rig, kind, "a run", args, now_us);
            }
            let ring = args.iter().any(|a| a == "PRECISION");
            let plants = |now_us| match (kind, ring) {
                (Algorithm::Window, true) => ring_plants(args, now_us),
                (Algorithm::Window, false) => log_plants(now_us),
                _ => counter_plants(now_us),
            };
            for i in 0..plants(now_us).len() {
                let (what, plant) = plants(now_us).swap_remove(i);
                rig.plant(&keys, &plant);
                for step in [0, 0, 1, 2_000_000, 7_000_000] {
                    now_us += step;
                    check(&mut rig, kind, what, args, now_us);
                }
            }
        }
    }
    assert!(checked > 1000, "{checked} calls checked");
}

/// A long exact log read from its head (the first entries after it in one range, else a search
/// from there; a key known long read by length and header): repeated calls with the same words
/// while entries leave the window one or many at a time, with dead entries in front, the head
/// beyond the first 4 KB, a denial at the limit, the clock stepped back: the same replies, bytes
/// and expiries as the module's.
#[test]
fn a_long_log_read_from_its_head_matches_the_module() {
    let (mut rig, start_us) = rig_tomorrow();
    let keys = Rig::keys(0);
    let now = start_us * 1000;
    let window_ms = 60_000;
    // 3,000 entries over the window, 50 per second, then 700 dead ones in front of them.
    let live = spread(3000, now - (window_ms - 500) * MS, now - MS);
    let mut with_dead = spread(700, now - 3 * window_ms * MS, now - window_ms * MS);
    with_dead.extend(live.iter().copied());
    let plants = [
        ("no dead entry", log_bytes(0, &live)),
        ("700 dead entries", log_bytes(700, &with_dead)),
        ("dead entries the head has not passed", log_bytes(100, &with_dead)),
    ];
    let mut checked = 0;
    for (what, bytes) in &plants {
        for args in [words(&["3500", "60000", "MS"]), words(&["3000", "60000", "MS", "2"]), words(&["3800", "60"])] {
            let plant = Plant::Value(bytes.clone(), Some(now / MS + window_ms));
            rig.plant(&keys, &plant);
            let mut now_us = start_us;
            // (µs: entries leave 0, 1, a few, dozens, hundreds at a time; then a step back)
            for step in [
                0, 1, 20_000, 20_000, 100_000, 1_000_000, 0, 1_300_000, 5_000_000, 15_000, 9_000_000, -4_000_000,
                30_000, 25_000_000, 1,
            ] {
                now_us += step;
                let (before, replies, states) = rig.call(Algorithm::Window, &keys, &args, now_us);
                let context = format!(
                    "{what}: CL.WINDOW {args:?} at {now_us} µs on {} bytes",
                    match &before.0 {
                        Value::BulkString(b) => b.len(),
                        _ => 0,
                    }
                );
                assert_eq!(replies[1], replies[0], "FCALL reply: {context}");
                assert_eq!(replies[2], replies[0], "EVALSHA reply: {context}");
                assert_eq!(states[1], states[0], "FCALL stored bytes/expiry: {context}");
                assert_eq!(states[2], states[0], "EVALSHA stored bytes/expiry: {context}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 100, "{checked} calls checked");
}

/// The five integers of a limiter's reply (CL.ALL's first five), or `None` for an error.
fn five_of(v: &Value) -> Option<[i64; 5]> {
    let Value::Array(items) = v else { return None };
    let ints: Vec<i64> =
        items.iter().take(5).map(|i| if let Value::Int(n) = i { Some(*n) } else { None }).collect::<Option<_>>()?;
    ints.try_into().ok()
}

/// A call of the stray-call test: its words (after the key, the quantity last), whether it
/// is a CL.ALL spec, its limit, and its calendar (a quota) or nothing (a counter).
struct Stray {
    words: Vec<String>,
    all: bool,
    /// CL.QUOTA (else CL.COUNTER), when not a CL.ALL spec.
    quota: bool,
    limit: i64,
    calendar: Option<redis_throttle_core::calendar::Calendar>,
}

impl Stray {
    /// Runs it on slot 0 at `now_us`; checks the twin (FCALL and EVALSHA) replies and stores
    /// exactly as the module; returns the module's reply.
    fn run(&self, rig: &mut Rig, now_us: i64, context: &str) -> [i64; 5] {
        let (replies, states) = if self.all {
            let mut spec = self.words.clone();
            spec.push("MS".into());
            let (_, replies, states) = rig.call_all(&[0], &spec, now_us);
            (replies, states.into_iter().map(|s| s[0].clone()).collect::<Vec<_>>())
        } else {
            let names = if self.quota { ("CL.QUOTA", "cl_quota") } else { ("CL.COUNTER", "cl_counter") };
            let mut args = self.words.clone();
            args.push("MS".into());
            let (_, replies, states) = rig.call_named(names, &Rig::keys(0), &args, now_us);
            (replies, states.to_vec())
        };
        let what = format!("{context}: {}{}", if self.all { "CL.ALL " } else { "" }, self.words.join(" "));
        assert_eq!(replies[1], replies[0], "FCALL differs: {what}");
        assert_eq!(replies[2], replies[0], "EVALSHA differs: {what}");
        assert_eq!(states[1], states[0], "FCALL's key differs: {what}");
        assert_eq!(states[2], states[0], "EVALSHA's key differs: {what}");
        five_of(&replies[0]).unwrap_or_else(|| panic!("{what}: {:?}", replies[0]))
    }
}

/// A quota (UTC or a fixed offset, sometimes anchored) or a counter, single or as a CL.ALL spec.
fn stray(g: &mut Gen, now_ms: i64) -> Stray {
    use redis_throttle_core::calendar::{Calendar, Per, Zone};
    let limit = g.rng.random_range(1..10i64);
    let quantity = g.rng.random_range(0..5i64);
    let all = g.chance(0.25);
    if g.chance(0.25) {
        let window_ms = *g.pick(&[1_000i64, 60_000, 3_600_000, 86_400_000, 40 * 86_400_000]);
        let mut words = if all { vec!["COUNTER".to_string()] } else { vec![] };
        words.extend([limit.to_string(), window_ms.to_string()]);
        words.extend(if all {
            ["QUANTITY".to_string(), quantity.to_string()]
        } else {
            [quantity.to_string(), String::new()]
        });
        words.retain(|w| !w.is_empty());
        return Stray { words, all, quota: false, limit, calendar: None };
    }
    let per = *g.pick(&Per::ALL);
    let offset_min: i32 = if g.chance(0.5) { 0 } else { g.rng.random_range(-(14 * 60)..=(14 * 60)) };
    let anchor_ms = g.chance(0.4).then(|| now_ms + g.rng.random_range(-400 * 86_400_000i64..400 * 86_400_000));
    let mut words = if all { vec!["QUOTA".to_string()] } else { vec![] };
    words.extend([limit.to_string(), "PER".into(), per.word().into()]);
    if offset_min != 0 {
        let m = offset_min.abs();
        words.extend(["TZ".into(), format!("{}{:02}:{:02}", if offset_min < 0 { '-' } else { '+' }, m / 60, m % 60)]);
    }
    if let Some(a) = anchor_ms {
        words.extend(["ANCHOR".into(), a.to_string()]);
    }
    words.extend(["QUANTITY".into(), quantity.to_string()]);
    Stray {
        words,
        all,
        quota: true,
        limit,
        calendar: Some(Calendar { per, zone: Zone::Fixed(offset_min * 60), anchor_ms }),
    }
}

/// Stray calls on a quota's key (item 10 of issue 27): the cases that once over-admitted, then
/// random sequences of CL.QUOTA, CL.COUNTER and CL.ALL calls on one key (parameters changed
/// call by call, the clock stepping back and forth) on the module and the twin alike. Every
/// admitted call finds the units of every earlier admitted call whose period (a quota's
/// calendar period, a counter's window as its reply gave it) still holds, and through which
/// the clock never reached that period's end, counted: with its own, at most its limit.
#[test]
fn stray_calls_match_the_module_and_never_over_admit() {
    const ROUNDS: usize = 24;
    let calls: usize = std::env::var("THROTTLE_DIFF_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(125, |n: usize| (n / ROUNDS).max(1));
    let seed: u64 = std::env::var("THROTTLE_DIFF_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("THROTTLE_DIFF_SEED={seed} THROTTLE_DIFF_CALLS={}", calls * ROUNDS);
    let mut g = Gen { rng: StdRng::seed_from_u64(seed), held: None, debit: false };
    let mut rig = Rig::start();
    let real_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    // A UTC day ahead of real time (no key expires by the server's own clock meanwhile).
    let day = (real_ms / 86_400_000 + 2) * 86_400_000;
    let q = |words: &str| Stray {
        words: words.split(' ').map(String::from).collect(),
        all: words.starts_with("COUNTER") || words.starts_with("QUOTA"),
        quota: true,
        limit: 0,
        calendar: None,
    };
    let fill = |rig: &mut Rig, words: &str, at: i64| {
        (0..20).take_while(|_| q(words).run(rig, at * 1000, words)[0] == 0).count()
    };
    // The cases of the issue: a denied stray call under another TZ, PER or ANCHOR, a clock step
    // back across midnight, a counter (single and as a spec) on the quota's key.
    let strays = [
        "5 PER DAY TZ -12:00",
        "5 PER MINUTE",
        &format!("5 PER DAY ANCHOR {}", day + 11 * 3_600_000) as &str,
        "COUNTER 5 60000",
        "QUOTA 5 PER HOUR TZ +05:30",
    ]
    .map(String::from);
    for stray in &strays {
        let _: () = redis::cmd("DEL").arg(&Rig::keys(0)).query(&mut rig.c).unwrap();
        assert_eq!(fill(&mut rig, "5 PER DAY QUANTITY 1", day + 10 * 3_600_000), 5, "{stray}");
        let counter = stray.starts_with("COUNTER");
        let r = if counter {
            q(stray).run(&mut rig, (day + 10 * 3_600_000) * 1000, stray)
        } else {
            q(&format!("{stray} QUANTITY 1")).run(&mut rig, (day + 10 * 3_600_000) * 1000, stray)
        };
        assert_eq!(r[0], 1, "{stray}: denied");
        assert_eq!(
            fill(&mut rig, "5 PER DAY QUANTITY 1", day + 23 * 3_600_000),
            0,
            "{stray}: the UTC day has had its five"
        );
    }
    let _: () = redis::cmd("DEL").arg(&Rig::keys(0)).query(&mut rig.c).unwrap();
    let midnight = day + 86_400_000;
    assert_eq!(fill(&mut rig, "5 PER DAY QUANTITY 1", midnight), 5);
    assert_eq!(q("5 PER DAY QUANTITY 1").run(&mut rig, (midnight - 1000) * 1000, "a step back")[0], 1);
    assert_eq!(
        fill(&mut rig, "5 PER DAY QUANTITY 1", midnight + 1000),
        0,
        "the day after a step back of 1 s has had its five"
    );

    // Random sequences.
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let _: () = redis::cmd("DEL").arg(&Rig::keys(0)).query(&mut rig.c).unwrap();
        let mut now_ms = day + 3 * 86_400_000 + g.rng.random_range(0..86_400_000);
        let kinds: Vec<Stray> = (0..g.rng.random_range(1..4)).map(|_| stray(&mut g, now_ms)).collect();
        // (its period's end, units, the latest clock since), in ms.
        let mut admitted: Vec<(i64, i64, i64)> = Vec::new();
        for step in 0..calls {
            now_ms += match g.rng.random_range(0..10) {
                0 => 0,
                1..=3 => g.rng.random_range(1..120_000),
                4..=5 => g.rng.random_range(1..7_200_000),
                6..=7 => g.rng.random_range(1..3 * 86_400_000),
                8 => -g.rng.random_range(1..5_000),
                _ => -g.rng.random_range(1..2 * 86_400_000),
            };
            now_ms = now_ms.clamp(day, day + 250 * 86_400_000);
            for a in &mut admitted {
                a.2 = a.2.max(now_ms);
            }
            if g.chance(0.03) {
                // An operator's DEL forgets every count (the way to reset a key on purpose).
                let _: () = redis::cmd("DEL").arg(&Rig::keys(0)).query(&mut rig.c).unwrap();
                admitted.clear();
            }
            let mut call = if g.chance(0.15) {
                stray(&mut g, now_ms)
            } else {
                let k = &kinds[g.rng.random_range(0..kinds.len())];
                Stray { words: k.words.clone(), all: k.all, quota: k.quota, limit: k.limit, calendar: k.calendar }
            };
            // A fresh quantity for the kind's words (the last word is the quantity).
            let quantity = g.rng.random_range(0..5i64);
            *call.words.last_mut().unwrap() = quantity.to_string();
            let context = format!("round {round} step {step} (THROTTLE_DIFF_SEED={seed}) at {now_ms} ms");
            let r = call.run(&mut rig, now_ms * 1000, &context);
            tally.add(
                if r[0] == 1 {
                    "denied"
                } else if quantity == 0 {
                    "peek"
                } else {
                    "admitted"
                }
                .to_string(),
            );
            if r[0] == 1 || quantity == 0 {
                continue;
            }
            let end = match call.calendar {
                Some(c) => {
                    redis_throttle_core::calendar::compute(
                        &c,
                        redis_throttle_core::Instant::from_nanos(now_ms * 1_000_000),
                    )
                    .unwrap()
                    .end
                    .as_nanos()
                        / 1_000_000
                }
                None => now_ms + r[4],
            };
            let held: i64 =
                admitted.iter().filter(|&&(end, _, latest)| end > now_ms && latest < end).map(|a| a.1).sum();
            assert!(
                held + quantity <= call.limit,
                "{context}: {} admitted {quantity} with {held} of earlier periods held",
                call.words.join(" ")
            );
            admitted.push((end, quantity, now_ms));
        }
    }
    eprintln!("{:#?}", tally.calls);
    assert!(
        tally.calls.get("admitted").is_some_and(|&n| n > 50) && tally.calls.get("denied").is_some_and(|&n| n > 50),
        "{:?}",
        tally.calls
    );
}

/// Runs `CL.WINDOW key <args> q` with the module at each of `calls` (µs, q) and returns what it
/// stored, to plant for the three forms.
fn written_by_the_module(rig: &mut Rig, key: &str, args: &[&str], calls: &[(i64, i64)]) -> Plant {
    let mut pipe = redis::pipe();
    pipe.cmd("DEL").arg(key).ignore();
    for (us, q) in calls {
        pipe.cmd("CL.DEBUG").arg("CLOCK").arg(*us).ignore();
        pipe.cmd("CL.WINDOW").arg(key).arg(args).arg(*q).ignore();
    }
    pipe.query::<()>(&mut rig.c).unwrap();
    let (bytes, at): (Vec<u8>, i64) =
        redis::pipe().cmd("GET").arg(key).cmd("PEXPIRETIME").arg(key).query(&mut rig.c).unwrap();
    assert!(at > 0, "{key} expires");
    Plant::Value(bytes, Some(at))
}

/// CL.ALL over CL.WINDOW keys it reads in another layout or precision (rings the module wrote,
/// read as exact logs or regrouped; long exact logs read with PRECISION, one of them refunded):
/// when another limiter denies, the module's replies (every limiter's, DETAILS) and every key's
/// bytes and expiry left as they were (the twin decides such a call without converting any of
/// them: bench/twin.sh measures it); when all admit, the module's replies, bytes and expiries.
/// A ring of more than 10,000 buckets (the module's `throttle.max-buckets` raised), or more than
/// 8 keys to convert, are refused by the twin's cl_all, after the module's own errors, and
/// change nothing; cl_window reads such a ring.
#[test]
fn cl_all_over_converted_windows_matches_the_module_and_a_denial_writes_nothing() {
    let (mut rig, now_us) = rig_tomorrow();
    let s = words;
    let hour_us = 3_600_000_000;
    let mut rng = StdRng::seed_from_u64(27);
    // Module calls at random instants over the last hour (ascending), 1 to 3 units each.
    let mut calls = |n: usize| -> Vec<(i64, i64)> {
        let mut at: Vec<i64> = (0..n).map(|_| now_us - rng.random_range(1_000..hour_us - 60_000_000)).collect();
        at.sort_unstable();
        at.into_iter().map(|t| (t, rng.random_range(1..=3))).collect()
    };
    // 0: a 10,000-bucket ring of uneven counts (read as an exact log: thousands of runs);
    // 1: a 3,600-bucket ring (regrouped to 10,000); 2, 3: exact logs of thousands of entries
    // (read with PRECISION; 3 refunded); 4: a counter the call asks too much of (denied).
    let ring_calls = calls(4_000);
    let plants = [
        written_by_the_module(&mut rig, "w:0", &["1000000", "3600000", "MS", "PRECISION", "360"], &ring_calls),
        written_by_the_module(&mut rig, "w:1", &["1000000", "3600000", "MS", "PRECISION", "1000"], &calls(3_000)),
        written_by_the_module(&mut rig, "w:2", &["100000", "3600000", "MS"], &calls(2_500)),
        written_by_the_module(&mut rig, "w:3", &["100000", "3600000", "MS"], &calls(2_500)),
    ];
    let specs = |deny: bool| {
        let mut v = s(&[
            "WINDOW",
            "100000",
            "3600000",
            "WINDOW",
            "100000",
            "3600000",
            "PRECISION",
            "360",
            "WINDOW",
            "100000",
            "3600000",
            "PRECISION",
            "360",
            "QUANTITY",
            "2",
            "WINDOW",
            "100000",
            "3600000",
            "PRECISION",
            "360",
            "QUANTITY",
            "-5",
        ]);
        if deny {
            v.extend(s(&["COUNTER", "5", "60000", "QUANTITY", "6"]));
        }
        v.extend(s(&["MS", "DETAILS"]));
        v
    };
    for (i, plant) in plants.iter().enumerate() {
        rig.plant(&Rig::keys(i), plant);
    }
    let _: () = redis::cmd("DEL").arg(&Rig::keys(4)[..]).query(&mut rig.c).unwrap();
    let (before, replies, states) = rig.call_all(&[0, 1, 2, 3, 4], &specs(true), now_us);
    assert!(
        matches!(&replies[0], Value::Array(a) if a[0] == Value::Int(1) && a[5] == Value::Int(5)),
        "the counter denies: {:?}",
        replies[0]
    );
    assert_eq!(replies[1], replies[0], "FCALL cl_all, denied");
    assert_eq!(replies[2], replies[0], "EVALSHA cl_all, denied");
    for (form, after) in states.iter().enumerate() {
        assert!(after == &before, "a denied cl_all left form {form}'s keys as they were (bytes and expiries)");
    }
    // With DEBIT the same call (a charge, not a refund, on the fourth) writes every limiter's
    // units, the counter's overdraft too: each key converted and written as the module writes it.
    let mut charges = specs(true);
    if let Some(i) = charges.iter().position(|w| w == "-5") {
        charges[i] = "4".into();
    }
    charges.push("DEBIT".into());
    let (_, replies, states) = rig.call_all(&[0, 1, 2, 3, 4], &charges, now_us);
    assert!(
        matches!(&replies[0], Value::Array(a) if a[0] == Value::Int(1) && a[5] == Value::Int(5)),
        "the counter overdraws: {:?}",
        replies[0]
    );
    assert_eq!(replies[1], replies[0], "FCALL cl_all DEBIT");
    assert_eq!(replies[2], replies[0], "EVALSHA cl_all DEBIT");
    assert!(states[0] != before, "the module wrote every debit");
    assert!(states[1] == states[0] && states[2] == states[0], "cl_all DEBIT: the module's bytes and expiries");
    for (i, plant) in plants.iter().enumerate() {
        rig.plant(&Rig::keys(i), plant);
    }
    let _: () = redis::cmd("DEL").arg(&Rig::keys(4)[..]).query(&mut rig.c).unwrap();
    // The ring read as a log (its bytes would be built at once: thousands of runs) decides the
    // call itself: denied (the retry from the entry that must leave), never admittable, a peek;
    // its limit below the units it holds.
    for spec in [
        s(&["WINDOW", "100000", "3600000", "QUANTITY", "99000", "MS", "DETAILS"]),
        s(&["WINDOW", "5000", "3600000", "MS"]),
        s(&["WINDOW", "5000", "3600000", "QUANTITY", "4000", "MS"]),
        s(&["WINDOW", "5000", "3600000", "QUANTITY", "5001", "MS"]),
        s(&["WINDOW", "5000", "3600000", "QUANTITY", "0", "MS"]),
        s(&["WINDOW", "100000", "3600000", "QUANTITY", "0", "MS"]),
    ] {
        let (before, replies, states) = rig.call_all(&[0], &spec, now_us);
        assert!(matches!(&replies[0], Value::Array(_)), "{spec:?}: {:?}", replies[0]);
        assert_eq!(replies[1], replies[0], "FCALL cl_all {spec:?}");
        assert_eq!(replies[2], replies[0], "EVALSHA cl_all {spec:?}");
        assert!(states[0] == before && states[1] == before && states[2] == before, "{spec:?} wrote nothing");
    }
    // Each limiter admits: the same call without the counter converts and writes every key.
    let (_, replies, states) = rig.call_all(&[0, 1, 2, 3], &specs(false), now_us);
    assert!(matches!(&replies[0], Value::Array(a) if a[0] == Value::Int(0)), "admitted: {:?}", replies[0]);
    assert_eq!(replies[1], replies[0], "FCALL cl_all, admitted");
    assert_eq!(replies[2], replies[0], "EVALSHA cl_all, admitted");
    assert!(states[0] != before[..4], "the module converted the keys");
    assert!(states[1] == states[0] && states[2] == states[0], "admitted: the module's bytes and expiries");

    // More than 8 keys to convert: refused (after the module's errors); 8 are converted.
    let log = &plants[2];
    let converting = |n: usize, extra: &[&str]| {
        let mut v = Vec::new();
        for _ in 0..n {
            v.extend(s(&["WINDOW", "100000", "3600000", "PRECISION", "360"]));
        }
        v.extend(s(extra));
        v
    };
    let ten: Vec<usize> = (0..10).collect();
    for (slots, args, twin) in [
        (
            &ten[..9],
            converting(9, &["MS"]),
            Some(
                "ERR cl_all would convert the CL.WINDOW state of 9 keys (longer than 4 KB, another layout or precision than their specs): the Functions twin converts at most 8 in one call (call cl_window on such keys alone, or use the module)",
            ),
        ),
        // (the 10th key holds no counter: the module's error, found as it decides, comes first)
        (&ten[..], converting(9, &["COUNTER", "5", "60", "MS"]), None),
        (&ten[..8], converting(8, &["MS", "DETAILS"]), None),
    ] {
        for &slot in &slots[..9.min(slots.len())] {
            rig.plant(&Rig::keys(slot), log);
        }
        rig.plant(&Rig::keys(9), &Plant::Value(b"x".to_vec(), None));
        let (before, replies, states) = rig.call_all(slots, &args, now_us);
        if twin.is_none() && slots.len() == 10 {
            assert_eq!(
                server_error(&replies[0]).as_deref(),
                Some("ERR limiter 10: key does not hold valid CL.COUNTER state"),
                "the module's error"
            );
        }
        match twin {
            Some(e) => {
                assert!(matches!(replies[0], Value::Array(_)), "the module converts 9: {:?}", replies[0]);
                assert_eq!(server_error(&replies[1]).as_deref(), Some(e), "FCALL, 9 to convert");
                assert_eq!(server_error(&replies[2]).as_deref(), Some(e), "EVALSHA, 9 to convert");
                assert!(states[1] == before && states[2] == before, "the refused cl_all changed nothing");
            }
            None => {
                assert_eq!(replies[1], replies[0], "FCALL {args:?}");
                assert_eq!(replies[2], replies[0], "EVALSHA {args:?}");
                assert!(states[1] == states[0] && states[2] == states[0], "{args:?}: the module's bytes and expiries");
            }
        }
    }

    // A ring of 100,001 buckets, written by the module with `throttle.max-buckets` at its ceiling.
    let _: () = redis::cmd("CONFIG").arg("SET").arg("throttle.max-buckets").arg("100000").query(&mut rig.c).unwrap();
    let big = written_by_the_module(&mut rig, "w:big", &["1000000", "3600000", "MS", "PRECISION", "36"], &ring_calls);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("throttle.max-buckets").arg("10000").query(&mut rig.c).unwrap();
    assert!(matches!(&big, Plant::Value(b, _) if b.len() == 24 + 100_001 * 8), "a 100,001-bucket ring");
    rig.plant(&Rig::keys(0), &big);
    rig.plant(&Rig::keys(1), &Plant::Value(b"3".to_vec(), None));
    let refusal = "ERR limiter 1: key holds a CL.WINDOW ring of more than 10000 buckets (throttle.max-buckets raised for the module), which cl_all in the Functions twin does not read: call cl_window on that key alone, or use the module";
    for (spec, twin) in [
        (s(&["WINDOW", "100000", "3600", "COUNTER", "10", "60"]), Some(refusal)),
        (s(&["WINDOW", "100000", "3600", "PRECISION", "1", "COUNTER", "10", "60", "DETAILS"]), Some(refusal)),
        // the module's errors first: another limiter's argument, a value no counter holds
        (s(&["WINDOW", "100000", "3600", "COUNTER", "0", "60"]), None),
        (s(&["WINDOW", "100000", "3600", "BUCKET", "10", "1", "60"]), None),
    ] {
        let (before, replies, states) = rig.call_all(&[0, 1], &spec, now_us);
        match twin {
            Some(e) => {
                assert!(matches!(replies[0], Value::Array(_)), "the module reads it: {spec:?} {:?}", replies[0]);
                assert_eq!(server_error(&replies[1]).as_deref(), Some(e), "FCALL {spec:?}");
                assert_eq!(server_error(&replies[2]).as_deref(), Some(e), "EVALSHA {spec:?}");
            }
            None => {
                assert!(server_error(&replies[0]).is_some(), "the module refuses {spec:?}");
                assert_eq!(replies[1], replies[0], "FCALL {spec:?}");
                assert_eq!(replies[2], replies[0], "EVALSHA {spec:?}");
            }
        }
        assert!(states[1] == before && states[2] == before, "the twin's refused cl_all changed nothing: {spec:?}");
        rig.plant(&Rig::keys(0), &big);
        rig.plant(&Rig::keys(1), &Plant::Value(b"3".to_vec(), None));
    }
    let (_, replies, states) = rig.call(Algorithm::Window, &Rig::keys(0), &s(&["100000", "3600"]), now_us);
    assert!(matches!(replies[0], Value::Array(_)), "{:?}", replies[0]);
    assert_eq!(replies[1], replies[0], "FCALL cl_window reads the ring alone");
    assert_eq!(replies[2], replies[0], "EVALSHA cl_window reads the ring alone");
    assert!(states[1] == states[0] && states[2] == states[0], "cl_window: the module's bytes and expiries");
}

/// Issue 41's sequence, per algorithm, on the module and both forms of the twin side by side at
/// pinned instants: a check (DEBIT 0) admitted, a debit past the limit (counted, `limited` 1),
/// a check refused, a take refused until its retry time (a millisecond before it still refused),
/// admitted right at it; then the same inside one CL.ALL. Every reply, stored byte and expiry
/// equal to the module's.
#[test]
fn a_debit_past_the_limit_is_refused_until_repaid_alike_on_the_module_and_the_twin() {
    let (mut rig, start_us) = rig_tomorrow();
    let start_us = start_us - start_us % 1_000; // (whole ms: retry times in ms are then exact)
    let s = words;
    let single: [(&str, &str, Vec<String>); 6] = [
        ("CL.THROTTLE", "cl_throttle", s(&["4", "1", "10000"])),
        ("CL.WINDOW", "cl_window", s(&["5", "60000"])),
        ("CL.WINDOW", "cl_window", s(&["5", "60000", "PRECISION", "6000"])),
        ("CL.BUCKET", "cl_bucket", s(&["5", "1", "10000"])),
        ("CL.COUNTER", "cl_counter", s(&["5", "60000"])),
        ("CL.QUOTA", "cl_quota", s(&["5", "PER", "MINUTE"])),
    ];
    for (i, (command, function, params)) in single.iter().enumerate() {
        let keys = Rig::keys(100 + i);
        let quota = *command == "CL.QUOTA";
        let call = |rig: &mut Rig, q: &str, debit: bool, now_us: i64| -> [i64; 5] {
            let mut args = params.clone();
            if quota {
                args.extend(s(&["QUANTITY", q]));
            } else {
                args.push(q.to_string());
            }
            args.push("MS".into());
            if debit {
                args.push("DEBIT".into());
            }
            let (_, replies, states) = rig.call_named((command, function), &keys, &args, now_us);
            let what = format!("{command} {} at {now_us}", args.join(" "));
            assert_eq!(replies[1], replies[0], "FCALL: {what}");
            assert_eq!(replies[2], replies[0], "EVALSHA: {what}");
            assert!(states[1] == states[0] && states[2] == states[0], "stored bytes/expiry: {what}");
            five_of(&replies[0]).unwrap_or_else(|| panic!("{what}: {:?}", replies[0]))
        };
        let now = start_us;
        assert_eq!(call(&mut rig, "0", true, now)[0], 0, "{command}: a check of a full limiter is admitted");
        let r = call(&mut rig, "8", true, now);
        assert_eq!((r[0], r[2]), (1, 0), "{command}: a debit past the limit overdraws: {r:?}");
        let r = call(&mut rig, "0", true, now + 1_000);
        assert_eq!(r[0], 1, "{command}: a check of an overdrawn limiter is refused: {r:?}");
        let r = call(&mut rig, "1", false, now + 2_000);
        assert_eq!(r[0], 1, "{command}: a take is refused: {r:?}");
        let at = now + 2_000 + r[3] * 1_000;
        assert_eq!(call(&mut rig, "1", false, at - 1_000)[0], 1, "{command}: refused a ms before its retry time");
        assert_eq!(call(&mut rig, "1", false, at)[0], 0, "{command}: admitted at its retry time");
    }
    // The same inside one CL.ALL (a quota's minute is a calendar minute: left out).
    let slots: Vec<usize> = (200..205).collect();
    let specs = |q: &str| {
        let mut v = Vec::new();
        for (word, params) in [
            ("THROTTLE", &single[0].2),
            ("WINDOW", &single[1].2),
            ("WINDOW", &single[2].2),
            ("BUCKET", &single[3].2),
            ("COUNTER", &single[4].2),
        ] {
            v.push(word.to_string());
            v.extend(params.iter().cloned());
            v.extend(s(&["QUANTITY", q]));
        }
        v.extend(s(&["MS", "DETAILS"]));
        v
    };
    let all = |rig: &mut Rig, q: &str, debit: bool, now_us: i64| -> (i64, i64, Vec<[i64; 5]>) {
        let mut args = specs(q);
        if debit {
            args.push("DEBIT".into());
        }
        let (_, replies, states) = rig.call_all(&slots, &args, now_us);
        let what = format!("CL.ALL {} at {now_us}", args.join(" "));
        assert_eq!(replies[1], replies[0], "FCALL: {what}");
        assert_eq!(replies[2], replies[0], "EVALSHA: {what}");
        assert!(states[1] == states[0] && states[2] == states[0], "stored bytes/expiry: {what}");
        let Value::Array(items) = &replies[0] else { panic!("{what}: {:?}", replies[0]) };
        let Some(Value::Array(each)) = items.get(6) else { panic!("{what}: {:?}", replies[0]) };
        let five = five_of(&replies[0]).unwrap();
        (five[0], five[3], each.iter().map(|d| five_of(d).unwrap()).collect())
    };
    let now = start_us;
    assert_eq!(all(&mut rig, "0", true, now).0, 0, "CL.ALL: a check of full limiters is admitted");
    let (limited, _, each) = all(&mut rig, "8", true, now);
    assert_eq!(limited, 1, "CL.ALL: the debits overdraw");
    assert!(each.iter().all(|d| d[0] == 1 && d[2] == 0), "CL.ALL: every limiter overdrawn: {each:?}");
    assert_eq!(all(&mut rig, "0", true, now + 1_000).0, 1, "CL.ALL: a check is refused");
    let (limited, retry, _) = all(&mut rig, "1", false, now + 2_000);
    assert_eq!(limited, 1, "CL.ALL: a take is refused");
    let at = now + 2_000 + retry * 1_000;
    assert_eq!(all(&mut rig, "1", false, at - 1_000).0, 1, "CL.ALL: refused a ms before its retry time");
    assert_eq!(all(&mut rig, "1", false, at).0, 0, "CL.ALL: admitted at its retry time");
}

/// A debt on a ring read without `PRECISION` (a deployment dropping the option): the log it
/// converts to stays over its limit until the ring's units would have left, so a check is
/// refused and a debit adds to the debt, on the module and both forms of the twin alike.
#[test]
fn a_ring_in_debt_read_as_a_log_stays_in_debt_alike_on_the_module_and_the_twin() {
    let (mut rig, now_us) = rig_tomorrow();
    let keys = Rig::keys(300);
    let mut call = |args: &[&str], at_us: i64| -> [i64; 5] {
        let args = words(args);
        let (_, replies, states) = rig.call_named(("CL.WINDOW", "cl_window"), &keys, &args, at_us);
        let what = format!("CL.WINDOW {} at {at_us}", args.join(" "));
        assert_eq!(replies[1], replies[0], "FCALL: {what}");
        assert_eq!(replies[2], replies[0], "EVALSHA: {what}");
        assert!(states[1] == states[0] && states[2] == states[0], "stored bytes/expiry: {what}");
        five_of(&replies[0]).unwrap_or_else(|| panic!("{what}: {:?}", replies[0]))
    };
    let r = call(&["5", "60000", "MS", "PRECISION", "6000", "100", "DEBIT"], now_us);
    assert_eq!(r[..3], [1, 5, 0], "{r:?}");
    let r = call(&["5", "60000", "MS", "0"], now_us + 1_000);
    assert_eq!(r[..3], [1, 5, 0], "a check of the debt read as a log is refused: {r:?}");
    let r = call(&["5", "60000", "MS", "2", "DEBIT"], now_us + 2_000);
    assert_eq!(r[..3], [1, 5, 0], "a debit on it overdraws: {r:?}");
    let r = call(&["5", "60000", "MS", "0"], now_us + 3_000);
    assert_eq!(r[0], 1, "still in debt: {r:?}");
}

/// A refused check answered as admitted with `SHADOW` (single commands, CL.EACH, CL.ALL), a
/// refund across `PRECISION` giving back out of every unit (a ring read as a log, a log read as
/// buckets), and the bound of an exact log's debits (an error, nothing written): on the module
/// and both forms of the twin alike, replies, bytes and expiries.
#[test]
fn refused_checks_refunds_across_precision_and_the_exact_bound_match_the_module() {
    let (mut rig, now_us) = rig_tomorrow();
    let call = |rig: &mut Rig, slot: usize, command: (&str, &str), args: &[&str], at_us: i64| -> Value {
        let args = words(args);
        let (_, replies, states) = rig.call_named(command, &Rig::keys(slot), &args, at_us);
        let what = format!("{} {} at {at_us}", command.0, args.join(" "));
        assert_eq!(replies[1], replies[0], "FCALL: {what}");
        assert_eq!(replies[2], replies[0], "EVALSHA: {what}");
        assert!(states[1] == states[0] && states[2] == states[0], "stored bytes/expiry: {what}");
        replies[0].clone()
    };
    let five = |v: Value| five_of(&v).unwrap_or_else(|| panic!("{v:?}"));
    let window = ("CL.WINDOW", "cl_window");
    // A ring in debt, a refund without PRECISION: 97 of 100 still count.
    let r = five(call(&mut rig, 500, window, &["5", "60000", "MS", "PRECISION", "6000", "100", "DEBIT"], now_us));
    assert_eq!(r[..4], [1, 5, 0, -1]);
    let r = five(call(&mut rig, 500, window, &["5", "60000", "MS", "-3"], now_us + 1_000));
    assert_eq!(r[..4], [0, 5, 0, -1], "{r:?}");
    for at in [now_us + 1_000, now_us + 1_001] {
        // (twice: the twin's hot path takes the second)
        let r = five(call(&mut rig, 500, window, &["5", "60000", "MS", "0", "SHADOW"], at));
        assert_eq!(r[..4], [0, 5, 0, -1], "a refused check, shadowed: {r:?}");
    }
    let r = five(call(&mut rig, 500, window, &["5", "60000", "MS", "0"], now_us + 2_000));
    assert_eq!(r[..3], [1, 5, 0], "{r:?}");
    let r = five(call(&mut rig, 500, window, &["5", "60000", "MS", "-93"], now_us + 2_000));
    assert_eq!(r[..3], [0, 5, 1], "{r:?}");
    let r = five(call(&mut rig, 500, window, &["5", "60000", "MS", "1"], now_us + 3_000));
    assert_eq!(r[..3], [0, 5, 0], "a take converts: {r:?}");
    // An exact log: debits up to twice the cap, then an error; a refund read with PRECISION.
    call(&mut rig, 500, window, &["5", "60000", "MS", "100000", "DEBIT"], now_us + 4_000);
    let r = five(call(&mut rig, 500, window, &["5", "60000", "MS", "99995", "DEBIT"], now_us + 5_000));
    assert_eq!(r[..3], [1, 5, 0], "{r:?}");
    let e = call(&mut rig, 500, window, &["5", "60000", "MS", "1", "DEBIT"], now_us + 5_000);
    assert_eq!(
        server_error(&e).as_deref(),
        Some("ERR DEBIT is too large: an exact window holds at most 200000 units (use PRECISION for larger budgets)")
    );
    let r = five(call(&mut rig, 500, window, &["5", "60000", "MS", "-3", "PRECISION", "6000"], now_us + 6_000));
    assert_eq!(r[..4], [0, 5, 0, -1], "{r:?}");
    let r =
        five(call(&mut rig, 500, window, &["5", "60000", "MS", "0", "PRECISION", "6000", "SHADOW"], now_us + 6_000));
    assert_eq!(r[..4], [0, 5, 0, -1], "{r:?}");
    // Every single command's refused check, shadowed.
    for (i, (command, params)) in [
        (("CL.THROTTLE", "cl_throttle"), &["4", "1", "10000"][..]),
        (("CL.BUCKET", "cl_bucket"), &["5", "1", "10000"][..]),
        (("CL.COUNTER", "cl_counter"), &["5", "60000"][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let with = |extra: &[&'static str]| -> Vec<&'static str> { [params, &["MS"][..], extra].concat() };
        call(&mut rig, 510 + i, command, &with(&["8", "DEBIT"]), now_us);
        for at in [now_us + 1_000, now_us + 1_001] {
            let r = five(call(&mut rig, 510 + i, command, &with(&["0", "SHADOW"]), at));
            assert_eq!(r[..4], [0, 5, 0, -1], "{}: {r:?}", command.0);
        }
        assert_eq!(five(call(&mut rig, 510 + i, command, &with(&["0"]), now_us + 1_000))[0], 1);
    }
    // CL.EACH and CL.ALL of checks, the first limiter overdrawn.
    let specs = words(&["COUNTER", "5", "60000", "QUANTITY", "0", "WINDOW", "5", "60000", "QUANTITY", "0", "MS"]);
    for command in [("CL.EACH", "cl_each"), ("CL.ALL", "cl_all")] {
        let (_, replies, states) =
            rig.call_multi(command, &[512, 520], &[specs.clone(), words(&["SHADOW"])].concat(), now_us + 2_000);
        assert_eq!(replies[1], replies[0], "FCALL: {}", command.0);
        assert_eq!(replies[2], replies[0], "EVALSHA: {}", command.0);
        assert!(states[1] == states[0] && states[2] == states[0], "{}", command.0);
        let first = match &replies[0] {
            Value::Array(items) => five_of(&items[0]).or_else(|| five_of(&replies[0])),
            v => panic!("{v:?}"),
        };
        assert_eq!(first.map(|r| (r[0], r[3])), Some((0, -1)), "{}: {:?}", command.0, replies[0]);
    }
}
