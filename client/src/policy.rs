//! Typed policies: one per algorithm, built by constructors whose names cannot be misread, or
//! parsed from a short spec string. Every policy is validated by `throttle-core`, the same code
//! the module runs, so a policy the client accepts is one the server accepts (within the
//! server's configured caps).
//!
//! # The spec-string grammar
//!
//! ```text
//! spec      := rate [word ...]                 words in any order, each at most once
//! rate      := COUNT "/" [AMOUNT] UNIT          20/s   1000/h   5/10s   100/500ms
//! UNIT      := ms | s | sec | m | min | h | hour | d | day   (plurals accepted)
//! word      := throttle | window | bucket | counter         the algorithm (default: throttle)
//!            | burst N                          throttle: units admitted at once (default COUNT)
//!                                               bucket: its capacity (default COUNT)
//!            | precision AMOUNT UNIT            window only: count per bucket of this length
//! ```
//!
//! | spec | policy |
//! |---|---|
//! | `20/s` | GCRA, 20 per second, 20 at once (`CL.THROTTLE k 19 20 1000 MS`) |
//! | `20/s burst 5` | GCRA, 20 per second, 5 at once (`CL.THROTTLE k 4 20 1000 MS`) |
//! | `1000/h window` | sliding window, at most 1000 in any hour (`CL.WINDOW k 1000 3600000 MS`) |
//! | `1000000/h window precision 1m` | the same, counted per minute |
//! | `10/s bucket burst 100` | token bucket of 100, refilled by 10 every second |
//! | `5000/d counter` | fixed window of a day |
//!
//! Words are case-insensitive. An error names the word it could not use.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use throttle_core::caps::Caps;
use throttle_core::limiter::{Algorithm, Limiter, Request};

/// A rate: `count` units per `period`. `Rate::per_second(20)` is twenty per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: i64,
    period: Duration,
}

impl Rate {
    /// `count` units per `period` (a whole number of milliseconds, as every time argument is).
    pub const fn per(count: i64, period: Duration) -> Rate {
        Rate { count, period }
    }
    /// `count` units per second.
    pub const fn per_second(count: i64) -> Rate {
        Rate::per(count, Duration::from_secs(1))
    }
    /// `count` units per minute.
    pub const fn per_minute(count: i64) -> Rate {
        Rate::per(count, Duration::from_secs(60))
    }
    /// `count` units per hour.
    pub const fn per_hour(count: i64) -> Rate {
        Rate::per(count, Duration::from_secs(3600))
    }
    /// `count` units per day (24 hours).
    pub const fn per_day(count: i64) -> Rate {
        Rate::per(count, Duration::from_secs(86_400))
    }
    pub const fn count(&self) -> i64 {
        self.count
    }
    pub const fn period(&self) -> Duration {
        self.period
    }
}

/// A policy's algorithm and parameters, exactly as they are sent (times in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Params {
    /// `CL.THROTTLE key max_burst count period MS` (GCRA).
    Throttle { max_burst: i64, count: i64, period_ms: i64 },
    /// `CL.WINDOW key limit window MS [PRECISION p]` (sliding window).
    Window { limit: i64, window_ms: i64, precision_ms: Option<i64> },
    /// `CL.BUCKET key capacity tokens interval MS` (token bucket).
    Bucket { capacity: i64, tokens: i64, interval_ms: i64 },
    /// `CL.COUNTER key limit window MS` (fixed window).
    Counter { limit: i64, window_ms: i64 },
}

/// A validated policy. Two policies are equal exactly when their parameters are, and the deny
/// cache keys on them: changing a policy's parameters changes its cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    params: Params,
    #[doc(hidden)]
    limiter: LimiterKey,
}

/// `throttle_core`'s limiter, compared and hashed through the parameters it was built from.
#[derive(Debug, Clone, Copy)]
struct LimiterKey(Limiter);

impl PartialEq for LimiterKey {
    fn eq(&self, _: &Self) -> bool {
        true // equal parameters build equal limiters; `Policy` compares its `params`
    }
}
impl Eq for LimiterKey {}
impl std::hash::Hash for LimiterKey {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// A policy that cannot be built: its parameters are out of range, or its spec string does not
/// follow the grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    /// Parameters `throttle-core` refuses (the text is the server's own message).
    Invalid(String),
    /// A spec string that does not parse: the word it could not use and why.
    Spec { spec: String, word: String, reason: String },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Invalid(text) => write!(f, "invalid policy: {text}"),
            PolicyError::Spec { spec, word, reason } if word.is_empty() => write!(f, "policy {spec:?}: {reason}"),
            PolicyError::Spec { spec, word, reason } => write!(f, "policy {spec:?}: {word:?}: {reason}"),
        }
    }
}

impl std::error::Error for PolicyError {}

fn millis(d: Duration, name: &str) -> Result<i64, PolicyError> {
    if !d.subsec_nanos().is_multiple_of(1_000_000) || d.is_zero() {
        return Err(PolicyError::Invalid(format!("{name} must be a positive whole number of milliseconds, got {d:?}")));
    }
    i64::try_from(d.as_millis()).map_err(|_| PolicyError::Invalid(format!("{name} is too long: {d:?}")))
}

impl Policy {
    /// Builds a policy from its exact parameters, validated as the module validates them.
    pub fn from_params(params: Params) -> Result<Policy, PolicyError> {
        let (algorithm, words): (Algorithm, Vec<String>) = match params {
            Params::Throttle { max_burst, count, period_ms } => (Algorithm::Throttle, vec![max_burst.to_string(), count.to_string(), period_ms.to_string()]),
            Params::Window { limit, window_ms, precision_ms } => {
                let mut w = vec![limit.to_string(), window_ms.to_string()];
                if let Some(p) = precision_ms {
                    w.extend(["PRECISION".to_string(), p.to_string()]);
                }
                (Algorithm::Window, w)
            }
            Params::Bucket { capacity, tokens, interval_ms } => (Algorithm::Bucket, vec![capacity.to_string(), tokens.to_string(), interval_ms.to_string()]),
            Params::Counter { limit, window_ms } => (Algorithm::Counter, vec![limit.to_string(), window_ms.to_string()]),
        };
        let mut args: Vec<&[u8]> = vec![b"k"];
        args.extend(words.iter().map(String::as_bytes));
        args.push(b"MS");
        // The widest caps a server can be configured with: the server itself is the judge
        // of its own (narrower) caps.
        let request = Request::parse(algorithm, &args, &Caps::CEILING).map_err(|e| PolicyError::Invalid(strip_code(&e.to_string())))?;
        Ok(Policy { params, limiter: LimiterKey(request.limiter) })
    }

    /// GCRA (`CL.THROTTLE`): `rate`, with as many units at once as the rate's count.
    pub fn throttle(rate: Rate) -> Result<Policy, PolicyError> {
        Policy::throttle_with_burst(rate, rate.count)
    }

    /// GCRA (`CL.THROTTLE`): `rate`, with at most `burst` units at once (`max_burst = burst − 1`).
    pub fn throttle_with_burst(rate: Rate, burst: i64) -> Result<Policy, PolicyError> {
        let period_ms = millis(rate.period, "the rate's period")?;
        if burst < 1 {
            return Err(PolicyError::Invalid(format!("burst must be at least 1, got {burst}")));
        }
        Policy::from_params(Params::Throttle { max_burst: burst - 1, count: rate.count, period_ms })
    }

    /// Sliding window (`CL.WINDOW`): at most `rate.count()` units in any span of `rate.period()`.
    pub fn window(rate: Rate) -> Result<Policy, PolicyError> {
        Policy::from_params(Params::Window { limit: rate.count, window_ms: millis(rate.period, "the window")?, precision_ms: None })
    }

    /// Sliding window counted per bucket of `precision` (for large limits).
    pub fn window_with_precision(rate: Rate, precision: Duration) -> Result<Policy, PolicyError> {
        let precision_ms = Some(millis(precision, "precision")?);
        Policy::from_params(Params::Window { limit: rate.count, window_ms: millis(rate.period, "the window")?, precision_ms })
    }

    /// Token bucket (`CL.BUCKET`) of `capacity`, refilled by `rate.count()` every `rate.period()`.
    pub fn bucket(rate: Rate, capacity: i64) -> Result<Policy, PolicyError> {
        Policy::from_params(Params::Bucket { capacity, tokens: rate.count, interval_ms: millis(rate.period, "the refill interval")? })
    }

    /// Fixed window (`CL.COUNTER`): at most `rate.count()` units per window of `rate.period()`.
    pub fn counter(rate: Rate) -> Result<Policy, PolicyError> {
        Policy::from_params(Params::Counter { limit: rate.count, window_ms: millis(rate.period, "the window")? })
    }

    /// Parses a spec string (see the module documentation for the grammar).
    pub fn parse(spec: &str) -> Result<Policy, PolicyError> {
        spec.parse()
    }

    pub fn params(&self) -> Params {
        self.params
    }

    pub fn algorithm(&self) -> Algorithm {
        self.limiter.0.algorithm()
    }

    /// `throttle-core`'s limiter for these parameters (what the module builds from them).
    pub fn limiter(&self) -> &Limiter {
        &self.limiter.0
    }

    /// The most units a full limiter admits at once (the reply's `limit`).
    pub fn limit(&self) -> i64 {
        match self.params {
            Params::Throttle { max_burst, .. } => max_burst + 1,
            Params::Window { limit, .. } | Params::Counter { limit, .. } => limit,
            Params::Bucket { capacity, .. } => capacity,
        }
    }

    /// The same algorithm with every amount divided by `share` (at least 1 each): what one of
    /// `share` instances admits so that together they admit about this policy's limit.
    pub fn divided(&self, share: u32) -> Result<Policy, PolicyError> {
        let share = i64::from(share.max(1));
        let part = |n: i64| (n / share).max(1);
        Policy::from_params(match self.params {
            Params::Throttle { max_burst, count, period_ms } => Params::Throttle { max_burst: part(max_burst + 1) - 1, count: part(count), period_ms },
            Params::Window { limit, window_ms, precision_ms } => Params::Window { limit: part(limit), window_ms, precision_ms },
            Params::Bucket { capacity, tokens, interval_ms } => Params::Bucket { capacity: part(capacity), tokens: part(tokens), interval_ms },
            Params::Counter { limit, window_ms } => Params::Counter { limit: part(limit), window_ms },
        })
    }

    /// The command's name and its positional parameters (times in milliseconds).
    pub(crate) fn command(&self) -> (&'static str, Vec<i64>) {
        match self.params {
            Params::Throttle { max_burst, count, period_ms } => ("THROTTLE", vec![max_burst, count, period_ms]),
            Params::Window { limit, window_ms, .. } => ("WINDOW", vec![limit, window_ms]),
            Params::Bucket { capacity, tokens, interval_ms } => ("BUCKET", vec![capacity, tokens, interval_ms]),
            Params::Counter { limit, window_ms } => ("COUNTER", vec![limit, window_ms]),
        }
    }

    /// `PRECISION p` of a window, in milliseconds.
    pub(crate) fn precision_ms(&self) -> Option<i64> {
        match self.params {
            Params::Window { precision_ms, .. } => precision_ms,
            _ => None,
        }
    }
}

fn strip_code(text: &str) -> String {
    text.strip_prefix("ERR ").unwrap_or(text).to_string()
}

/// A duration word of the grammar (`AMOUNT UNIT`, the amount optional when `amount_optional`):
/// its milliseconds.
fn duration_word(word: &str, amount_optional: bool) -> Option<i64> {
    let split = word.find(|c: char| !c.is_ascii_digit()).unwrap_or(word.len());
    let (amount, unit) = word.split_at(split);
    let amount: i64 = match amount {
        "" if amount_optional => 1,
        a => a.parse().ok().filter(|&a| a > 0)?,
    };
    let unit_ms: i64 = match unit.to_ascii_lowercase().as_str() {
        "ms" | "msec" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    };
    amount.checked_mul(unit_ms)
}

impl FromStr for Policy {
    type Err = PolicyError;

    fn from_str(spec: &str) -> Result<Policy, PolicyError> {
        let error = |word: &str, reason: &str| PolicyError::Spec { spec: spec.to_string(), word: word.to_string(), reason: reason.to_string() };
        let mut words = spec.split_whitespace();
        let rate = words.next().ok_or_else(|| error("", "empty: expected a rate such as 20/s"))?;
        let (count, period) = rate.split_once('/').ok_or_else(|| error(rate, "expected a rate COUNT/UNIT such as 20/s or 1000/h"))?;
        let count: i64 = count.parse().ok().filter(|&c| c > 0).ok_or_else(|| error(rate, "the count before '/' must be a positive integer"))?;
        let period_ms = duration_word(period, true).ok_or_else(|| error(rate, "the period after '/' must be a unit (ms, s, m, h, d), optionally after an amount (10s)"))?;

        let mut algorithm: Option<Algorithm> = None;
        let mut burst: Option<i64> = None;
        let mut precision_ms: Option<i64> = None;
        while let Some(word) = words.next() {
            match word.to_ascii_lowercase().as_str() {
                name @ ("throttle" | "gcra" | "window" | "bucket" | "counter") => {
                    if algorithm.is_some() {
                        return Err(error(word, "a second algorithm: give one of throttle, window, bucket, counter"));
                    }
                    algorithm = Some(match name {
                        "window" => Algorithm::Window,
                        "bucket" => Algorithm::Bucket,
                        "counter" => Algorithm::Counter,
                        _ => Algorithm::Throttle,
                    });
                }
                "burst" => {
                    if burst.is_some() {
                        return Err(error(word, "given twice"));
                    }
                    let n = words.next().ok_or_else(|| error(word, "expects a number after it"))?;
                    burst = Some(n.parse().ok().filter(|&b| b > 0).ok_or_else(|| error(n, "burst must be a positive integer"))?);
                }
                "precision" => {
                    if precision_ms.is_some() {
                        return Err(error(word, "given twice"));
                    }
                    let d = words.next().ok_or_else(|| error(word, "expects a duration after it, such as 1s"))?;
                    precision_ms = Some(duration_word(d, false).ok_or_else(|| error(d, "precision must be a duration such as 500ms, 1s or 1m"))?);
                }
                _ => return Err(error(word, "unknown word: expected throttle, window, bucket, counter, burst or precision")),
            }
        }
        let algorithm = algorithm.unwrap_or(Algorithm::Throttle);
        if burst.is_some() && !matches!(algorithm, Algorithm::Throttle | Algorithm::Bucket) {
            return Err(error("burst", "applies to throttle and bucket only"));
        }
        if precision_ms.is_some() && algorithm != Algorithm::Window {
            return Err(error("precision", "applies to window only"));
        }
        let params = match algorithm {
            Algorithm::Throttle => Params::Throttle { max_burst: burst.unwrap_or(count) - 1, count, period_ms },
            Algorithm::Window => Params::Window { limit: count, window_ms: period_ms, precision_ms },
            Algorithm::Bucket => Params::Bucket { capacity: burst.unwrap_or(count), tokens: count, interval_ms: period_ms },
            Algorithm::Counter => Params::Counter { limit: count, window_ms: period_ms },
            // Not a word of this grammar yet (a calendar quota needs PER, TZ and ANCHOR).
            Algorithm::Quota => return Err(error("quota", "calendar quotas are not in the spec grammar yet")),
        };
        Policy::from_params(params).map_err(|e| match e {
            PolicyError::Invalid(text) => error("", &text),
            e => e,
        })
    }
}

/// A duration in the grammar's shortest form, its amount always written (`1s`, `10m`).
fn duration_text(ms: i64) -> String {
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// A rate's period: its amount left out when it is one unit (`/s`, `/10s`).
fn period_text(ms: i64) -> String {
    let text = duration_text(ms);
    text.strip_prefix('1').filter(|rest| rest.starts_with(|c: char| c.is_ascii_alphabetic())).map_or(text.clone(), str::to_string)
}

impl fmt::Display for Policy {
    /// The policy as a spec string that parses back to it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.params {
            Params::Throttle { max_burst, count, period_ms } => {
                write!(f, "{count}/{}", period_text(period_ms))?;
                if max_burst + 1 != count {
                    write!(f, " burst {}", max_burst + 1)?;
                }
                Ok(())
            }
            Params::Window { limit, window_ms, precision_ms } => {
                write!(f, "{limit}/{} window", period_text(window_ms))?;
                match precision_ms {
                    Some(p) => write!(f, " precision {}", duration_text(p)),
                    None => Ok(()),
                }
            }
            Params::Bucket { capacity, tokens, interval_ms } => {
                write!(f, "{tokens}/{} bucket", period_text(interval_ms))?;
                if capacity != tokens {
                    write!(f, " burst {capacity}")?;
                }
                Ok(())
            }
            Params::Counter { limit, window_ms } => write!(f, "{limit}/{} counter", period_text(window_ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_mean_what_they_say() {
        let p = Policy::throttle(Rate::per_second(20)).unwrap();
        assert_eq!(p.params(), Params::Throttle { max_burst: 19, count: 20, period_ms: 1000 });
        assert_eq!(p.limit(), 20);
        let p = Policy::throttle_with_burst(Rate::per_second(20), 5).unwrap();
        assert_eq!(p.params(), Params::Throttle { max_burst: 4, count: 20, period_ms: 1000 });
        assert_eq!(Policy::window(Rate::per_hour(1000)).unwrap().params(), Params::Window { limit: 1000, window_ms: 3_600_000, precision_ms: None });
        assert_eq!(Policy::bucket(Rate::per_second(10), 100).unwrap().params(), Params::Bucket { capacity: 100, tokens: 10, interval_ms: 1000 });
        assert_eq!(Policy::counter(Rate::per_day(5000)).unwrap().params(), Params::Counter { limit: 5000, window_ms: 86_400_000 });
    }

    #[test]
    fn specs_parse_to_the_constructors() {
        let cases = [
            ("20/s", Policy::throttle(Rate::per_second(20))),
            ("20/s burst 5", Policy::throttle_with_burst(Rate::per_second(20), 5)),
            ("20/S BURST 5 THROTTLE", Policy::throttle_with_burst(Rate::per_second(20), 5)),
            ("1000/h window", Policy::window(Rate::per_hour(1000))),
            ("1000000/h window precision 1m", Policy::window_with_precision(Rate::per_hour(1_000_000), Duration::from_secs(60))),
            ("10/s bucket burst 100", Policy::bucket(Rate::per_second(10), 100)),
            ("5000/d counter", Policy::counter(Rate::per_day(5000))),
            ("5/10s", Policy::throttle(Rate::per(5, Duration::from_secs(10)))),
            ("100/500ms counter", Policy::counter(Rate::per(100, Duration::from_millis(500)))),
            ("3/minute", Policy::throttle(Rate::per_minute(3))),
        ];
        for (spec, expected) in cases {
            let parsed = Policy::parse(spec).unwrap();
            assert_eq!(parsed, expected.unwrap(), "{spec}");
            assert_eq!(Policy::parse(&parsed.to_string()).unwrap(), parsed, "{spec} displays as {parsed}, which parses back");
        }
    }

    #[test]
    fn errors_name_the_bad_word() {
        let err = |spec: &str| Policy::parse(spec).unwrap_err().to_string();
        assert_eq!(err("20/s brust 5"), r#"policy "20/s brust 5": "brust": unknown word: expected throttle, window, bucket, counter, burst or precision"#);
        assert!(err("20/fortnight").contains(r#""20/fortnight": the period"#), "{}", err("20/fortnight"));
        assert!(err("x/s").contains(r#""x/s": the count"#));
        assert!(err("20").contains(r#""20": expected a rate"#));
        assert!(err("20/s burst").contains(r#""burst": expects a number"#));
        assert!(err("20/s burst 0").contains(r#""0": burst must be a positive integer"#));
        assert!(err("20/s window precision 1fortnight").contains(r#""1fortnight": precision must be"#));
        assert!(err("20/s counter burst 3").contains(r#""burst": applies to throttle and bucket only"#));
        assert!(err("20/s precision 1s").contains(r#""precision": applies to window only"#));
        assert!(err("20/s window counter").contains(r#""counter": a second algorithm"#));
        assert_eq!(err(""), r#"policy "": empty: expected a rate such as 20/s"#);
        // Out of range for the module: its own message.
        assert_eq!(err("20/s window precision 2s"), r#"policy "20/s window precision 2s": precision must be an integer from 1 to 1000 (milliseconds)"#);
        assert!(err("2000000000000000000/s counter").contains("limit must be an integer from 1 to 999999999999999999"));
    }

    #[test]
    fn a_period_finer_than_a_millisecond_is_refused() {
        assert!(Policy::throttle(Rate::per(1, Duration::from_micros(1500))).is_err());
        assert!(Policy::throttle(Rate::per(0, Duration::from_secs(1))).is_err());
    }

    #[test]
    fn division_keeps_the_algorithm_and_at_least_one() {
        let p = Policy::parse("100/s burst 50").unwrap().divided(4).unwrap();
        assert_eq!(p.params(), Params::Throttle { max_burst: 11, count: 25, period_ms: 1000 });
        let p = Policy::parse("3/s window").unwrap().divided(10).unwrap();
        assert_eq!(p.limit(), 1);
    }
}
