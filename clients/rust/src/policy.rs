//! Typed policies: one per algorithm, built by constructors whose names cannot be misread, or
//! parsed from a short spec string. Every policy is validated by `redis-throttle-core`, the same code
//! the module runs, so a policy the client accepts is one the server accepts (within the
//! server's configured caps).
//!
//! # The spec-string grammar
//!
//! ```text
//! spec      := rate [word ...]                 words in any order, each at most once
//! rate      := COUNT "/" [AMOUNT] UNIT          20/s   1000/h   5/10s   100/500ms   100000/month
//! UNIT      := ms | s | sec | m | min | h | hour | d | day | w | wk | week   (plurals accepted)
//!            | mo | month | y | yr | year       calendar units: quota only
//! word      := throttle | window | bucket | counter | quota   the algorithm (default: throttle)
//!            | burst N                          throttle: units admitted at once (default COUNT)
//!                                               bucket: its capacity (default COUNT)
//!            | precision AMOUNT UNIT            window only: count per bucket of this length
//!            | tz ZONE                          quota only: an IANA name (Europe/Berlin) or a
//!                                               fixed offset (+05:30); default UTC
//!            | anchor INSTANT                   quota only: the billing instant periods start
//!                                               from, RFC 3339 (2026-01-31T09:00:00Z) or Unix ms
//!            | debit                            calls charge what was used (`DEBIT`): counted
//!                                               whatever the limit says, over when they overdraw
//! ```
//!
//! A `w` is 7 days of 24 hours for the other algorithms; a `quota`'s period is one calendar
//! unit (`min`, `h`, `d`, `w`, `mo`, `y`: no amount, no `ms` or `s`), following the calendar in
//! its zone (a day from local midnight, 23 or 25 hours across DST; a week from Monday; a month
//! from the 1st), as `CL.QUOTA` does.
//!
//! | spec | policy |
//! |---|---|
//! | `20/s` | GCRA, 20 per second, 20 at once (`CL.THROTTLE k 19 20 1000 MS`) |
//! | `20/s burst 5` | GCRA, 20 per second, 5 at once (`CL.THROTTLE k 4 20 1000 MS`) |
//! | `1000/h window` | sliding window, at most 1000 in any hour (`CL.WINDOW k 1000 3600000 MS`) |
//! | `1000000/h window precision 1m` | the same, counted per minute |
//! | `10/s bucket burst 100` | token bucket of 100, refilled by 10 every second |
//! | `5000/d counter` | fixed window of a day |
//! | `100000/month quota` | calendar quota, per UTC month (`CL.QUOTA k 100000 PER MONTH … MS`) |
//! | `1000/day quota tz Europe/Berlin` | per day from Berlin's midnight |
//! | `1000/month quota anchor 2026-01-31T09:00:00Z` | per month from the 31st (the last day of shorter months), 09:00 UTC |
//! | `100000/m window debit` | a token budget: each call charges its tokens (`CL.WINDOW k 100000 60000 Q MS DEBIT`) |
//!
//! Words are case-insensitive. An error names the word it could not use.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use redis_throttle_core::calendar::{Per, Zone};
use redis_throttle_core::caps::Caps;
use redis_throttle_core::limiter::{Algorithm, Limiter, Request};
use redis_throttle_core::time::Unit;

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

/// A calendar quota (`CL.QUOTA`): at most `limit` units per calendar period.
/// `Quota::per_month(100_000)` is a hundred thousand per UTC calendar month;
/// `.tz("Europe/Berlin")?` follows Berlin's calendar, `.anchor("2026-01-31T09:00:00Z")?`
/// starts each period at the billing instant's position in it. Build the policy with
/// [`Policy::quota`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: i64,
    per: Per,
    zone: Zone,
    anchor_ms: Option<i64>,
}

impl Quota {
    /// `limit` units per calendar `per` (UTC, no anchor).
    pub const fn per(limit: i64, per: Per) -> Quota {
        Quota { limit, per, zone: Zone::UTC, anchor_ms: None }
    }
    /// `limit` units per calendar minute.
    pub const fn per_minute(limit: i64) -> Quota {
        Quota::per(limit, Per::Minute)
    }
    /// `limit` units per calendar hour.
    pub const fn per_hour(limit: i64) -> Quota {
        Quota::per(limit, Per::Hour)
    }
    /// `limit` units per calendar day (local midnight to local midnight).
    pub const fn per_day(limit: i64) -> Quota {
        Quota::per(limit, Per::Day)
    }
    /// `limit` units per ISO week (from Monday).
    pub const fn per_week(limit: i64) -> Quota {
        Quota::per(limit, Per::Week)
    }
    /// `limit` units per calendar month (from the 1st).
    pub const fn per_month(limit: i64) -> Quota {
        Quota::per(limit, Per::Month)
    }
    /// `limit` units per calendar year.
    pub const fn per_year(limit: i64) -> Quota {
        Quota::per(limit, Per::Year)
    }
    /// Periods follow the calendar of `zone`: an IANA name (`Europe/Berlin`, from the tz
    /// database compiled into `redis-throttle-core`, as the module's), `UTC`, or a fixed offset
    /// (`+05:30`).
    pub fn tz(self, zone: &str) -> Result<Quota, PolicyError> {
        let zone = Zone::parse(zone.as_bytes()).map_err(|e| PolicyError::Invalid(strip_code(&e.to_string())))?;
        Ok(Quota { zone, ..self })
    }
    /// Periods start at the billing instant's position in them (an RFC 3339 instant such as
    /// `2026-01-31T09:00:00Z`, on a whole millisecond).
    pub fn anchor(self, instant: &str) -> Result<Quota, PolicyError> {
        let ms = redis_throttle_core::calendar::parse_anchor(instant.as_bytes(), Unit::Millis)
            .map_err(|e| PolicyError::Invalid(strip_code(&e.to_string())))?;
        Ok(self.anchor_unix_ms(ms))
    }
    /// As [`Quota::anchor`], the instant in Unix milliseconds.
    pub const fn anchor_unix_ms(self, unix_ms: i64) -> Quota {
        Quota { anchor_ms: Some(unix_ms), ..self }
    }
    pub const fn limit(&self) -> i64 {
        self.limit
    }
    pub const fn period(&self) -> Per {
        self.per
    }
    pub const fn zone(&self) -> Zone {
        self.zone
    }
    pub const fn anchor_ms(&self) -> Option<i64> {
        self.anchor_ms
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
    /// `CL.QUOTA key limit PER unit [TZ zone] [ANCHOR unix_ms] MS` (calendar quota).
    Quota(Quota),
}

/// A validated policy. Two policies are equal exactly when their parameters (and whether they
/// debit) are; the deny cache keys on the parameters: changing them changes its cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    params: Params,
    /// Calls charge what was used (`DEBIT`) instead of asking to be admitted.
    debit: bool,
    #[doc(hidden)]
    limiter: LimiterKey,
}

/// `redis_throttle_core`'s limiter, compared and hashed through the parameters it was built from.
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
    /// Parameters `redis-throttle-core` refuses (the text is the server's own message).
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
        let (algorithm, words) = command_words(&params);
        let mut args: Vec<&[u8]> = vec![b"k"];
        args.extend(words.iter().map(String::as_bytes));
        args.push(b"MS");
        // The widest caps a server can be configured with: the server itself is the judge
        // of its own (narrower) caps.
        let request = Request::parse(algorithm, &args, &Caps::CEILING)
            .map_err(|e| PolicyError::Invalid(strip_code(&e.to_string())))?;
        Ok(Policy { params, debit: false, limiter: LimiterKey(request.limiter) })
    }

    /// This policy, its calls charging what was used (`DEBIT`, the spec word `debit`): a call's
    /// units are counted whatever the limit says (the window logs them, the bucket goes into
    /// debt, GCRA's TAT passes the burst, a counter or quota passes its limit); the decision is
    /// denied when they overdrew, and later calls are refused until time has repaid the
    /// overdraft. For a charge made after the fact: the tokens an LLM call used, bytes sent.
    /// A refund (a negative quantity) is never a debit; a quantity of 0 checks, as a peek does.
    pub fn debiting(self) -> Policy {
        Policy { debit: true, ..self }
    }

    /// Whether calls with this policy charge what was used ([`Policy::debiting`]).
    pub fn debits(&self) -> bool {
        self.debit
    }

    /// A calendar quota (`CL.QUOTA`): `Policy::quota(Quota::per_month(100_000))`.
    pub fn quota(quota: Quota) -> Result<Policy, PolicyError> {
        Policy::from_params(Params::Quota(quota))
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
        Policy::from_params(Params::Window {
            limit: rate.count,
            window_ms: millis(rate.period, "the window")?,
            precision_ms: None,
        })
    }

    /// Sliding window counted per bucket of `precision` (for large limits).
    pub fn window_with_precision(rate: Rate, precision: Duration) -> Result<Policy, PolicyError> {
        let precision_ms = Some(millis(precision, "precision")?);
        Policy::from_params(Params::Window {
            limit: rate.count,
            window_ms: millis(rate.period, "the window")?,
            precision_ms,
        })
    }

    /// Token bucket (`CL.BUCKET`) of `capacity`, refilled by `rate.count()` every `rate.period()`.
    pub fn bucket(rate: Rate, capacity: i64) -> Result<Policy, PolicyError> {
        Policy::from_params(Params::Bucket {
            capacity,
            tokens: rate.count,
            interval_ms: millis(rate.period, "the refill interval")?,
        })
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

    /// `redis-throttle-core`'s limiter for these parameters (what the module builds from them).
    pub fn limiter(&self) -> &Limiter {
        &self.limiter.0
    }

    /// The most units a full limiter admits at once (the reply's `limit`).
    pub fn limit(&self) -> i64 {
        match self.params {
            Params::Throttle { max_burst, .. } => max_burst + 1,
            Params::Window { limit, .. } | Params::Counter { limit, .. } => limit,
            Params::Bucket { capacity, .. } => capacity,
            Params::Quota(q) => q.limit,
        }
    }

    /// What one of `share` instances admits so that together they admit at most this policy's
    /// limit: the **rate** is divided, not the count. Each amount is divided by `share` but kept
    /// at least 1, and the time it is counted over is stretched so that `share` instances admit
    /// no more per unit of time than the policy (a share of `1/s` among 8 is one per 8 s; of
    /// `10/s` among 3, 3 per 900 ms). A calendar quota whose limit is below the share becomes a
    /// fixed window counter of `share / limit` periods at their longest (a day of 25 hours, a
    /// month of 31 days and an hour). The same algorithm otherwise, decided by `redis-throttle-core`.
    pub fn divided(&self, share: u32) -> Result<Policy, PolicyError> {
        let debit = self.debit;
        self.divided_params(share).map(|p| Policy { debit, ..p })
    }

    fn divided_params(&self, share: u32) -> Result<Policy, PolicyError> {
        let share = i64::from(share.max(1));
        // `amount` divided (at least 1), and `span_ms` stretched by `share · part / amount`,
        // rounded up: `share` instances then admit at most `amount` per `span_ms`.
        let split = |amount: i64, span_ms: i64| -> (i64, i64) {
            let part = (amount / share).max(1);
            let stretched =
                ceil_div(i128::from(span_ms) * i128::from(share) * i128::from(part), i128::from(amount.max(1)));
            (part, i64::try_from(stretched).unwrap_or(i64::MAX))
        };
        Policy::from_params(match self.params {
            Params::Throttle { max_burst, count, period_ms } => {
                // The rate: `count` per `share` periods; the burst: a share of it.
                let period_ms = i64::try_from(i128::from(period_ms) * i128::from(share)).unwrap_or(i64::MAX);
                Params::Throttle { max_burst: ((max_burst + 1) / share).max(1) - 1, count, period_ms }
            }
            Params::Window { limit, window_ms, precision_ms } => {
                let (limit, stretched) = split(limit, window_ms);
                // Buckets as many as before: the precision stretches with the window.
                let precision_ms = precision_ms
                    .map(|p| ceil_div(i128::from(p) * i128::from(stretched), i128::from(window_ms.max(1))))
                    .map(|p| i64::try_from(p).unwrap_or(i64::MAX).min(stretched));
                Params::Window { limit, window_ms: stretched, precision_ms }
            }
            Params::Bucket { capacity, tokens, interval_ms } => {
                let (tokens, interval_ms) = split(tokens, interval_ms);
                Params::Bucket { capacity: (capacity / share).max(1), tokens, interval_ms }
            }
            Params::Counter { limit, window_ms } => {
                let (limit, window_ms) = split(limit, window_ms);
                Params::Counter { limit, window_ms }
            }
            Params::Quota(q) if q.limit >= share => Params::Quota(Quota { limit: q.limit / share, ..q }),
            Params::Quota(q) => {
                let longest: i64 = match q.per {
                    Per::Minute => 60_000,
                    Per::Hour => 3_600_000,
                    Per::Day => 25 * 3_600_000,
                    Per::Week => 7 * 86_400_000 + 3_600_000,
                    Per::Month => 31 * 86_400_000 + 3_600_000,
                    Per::Year => 366 * 86_400_000 + 3_600_000,
                };
                let (limit, window_ms) = split(q.limit, longest);
                Params::Counter { limit, window_ms }
            }
        })
    }

    /// The command's word (`THROTTLE`, … as in CL.ALL specs) and its parameter words after
    /// the key (times in milliseconds), before the quantity and `MS`.
    pub(crate) fn command(&self) -> (&'static str, Vec<String>) {
        let (algorithm, words) = command_words(&self.params);
        (algorithm.word(), words)
    }

    /// The IANA zone a quota names (which the Functions twin cannot follow).
    pub fn named_zone(&self) -> Option<&'static str> {
        match self.params {
            Params::Quota(Quota { zone: Zone::Named(name), .. }) => Some(name),
            _ => None,
        }
    }
}

/// `a / b` rounded up, for `a ≥ 0`, `b ≥ 1`.
fn ceil_div(a: i128, b: i128) -> i128 {
    a / b + i128::from(a % b != 0)
}

/// A policy's algorithm and its command's words after the key (times in milliseconds).
fn command_words(params: &Params) -> (Algorithm, Vec<String>) {
    match *params {
        Params::Throttle { max_burst, count, period_ms } => {
            (Algorithm::Throttle, vec![max_burst.to_string(), count.to_string(), period_ms.to_string()])
        }
        Params::Window { limit, window_ms, precision_ms } => {
            let mut w = vec![limit.to_string(), window_ms.to_string()];
            if let Some(p) = precision_ms {
                w.extend(["PRECISION".to_string(), p.to_string()]);
            }
            (Algorithm::Window, w)
        }
        Params::Bucket { capacity, tokens, interval_ms } => {
            (Algorithm::Bucket, vec![capacity.to_string(), tokens.to_string(), interval_ms.to_string()])
        }
        Params::Counter { limit, window_ms } => (Algorithm::Counter, vec![limit.to_string(), window_ms.to_string()]),
        Params::Quota(q) => {
            let mut w = vec![q.limit.to_string(), "PER".into(), q.per.word().into()];
            if let Some(zone) = zone_text(q.zone) {
                w.extend(["TZ".into(), zone]);
            }
            if let Some(ms) = q.anchor_ms {
                w.extend(["ANCHOR".into(), ms.to_string()]);
            }
            (Algorithm::Quota, w)
        }
    }
}

/// A zone as `TZ` takes it; `None` for UTC (the default).
fn zone_text(zone: Zone) -> Option<String> {
    match zone {
        Zone::Fixed(0) => None,
        Zone::Fixed(s) => {
            let (sign, a) = (if s < 0 { '-' } else { '+' }, s.unsigned_abs());
            let (h, m, sec) = (a / 3600, a / 60 % 60, a % 60);
            Some(if sec == 0 { format!("{sign}{h:02}:{m:02}") } else { format!("{sign}{h:02}:{m:02}:{sec:02}") })
        }
        Zone::Named(name) => Some(name.to_string()),
    }
}

/// An instant in Unix ms as RFC 3339 in UTC (`2026-01-31T09:00:00Z`, `.123` when not on a
/// whole second), as `anchor` takes it.
fn instant_text(ms: i64) -> String {
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, mo, d) = redis_throttle_core::calendar::civil_from_days(days);
    let (h, mi, s, milli) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60, in_day % 1000);
    let fraction = if milli == 0 { String::new() } else { format!(".{milli:03}") };
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{fraction}Z")
}

fn strip_code(text: &str) -> String {
    text.strip_prefix("ERR ").unwrap_or(text).to_string()
}

/// A span of the grammar, `[AMOUNT] UNIT`: its amount, its length in milliseconds when the
/// unit has a fixed one, and the calendar unit it names, if any.
struct Span {
    amount: i64,
    unit_ms: Option<i64>,
    per: Option<Per>,
}

fn span(word: &str, amount_optional: bool) -> Option<Span> {
    let split = word.find(|c: char| !c.is_ascii_digit()).unwrap_or(word.len());
    let (amount, unit) = word.split_at(split);
    let amount: i64 = match amount {
        "" if amount_optional => 1,
        a => a.parse().ok().filter(|&a| a > 0)?,
    };
    let (unit_ms, per) = match unit.to_ascii_lowercase().as_str() {
        "ms" | "msec" | "millisecond" | "milliseconds" => (Some(1), None),
        "s" | "sec" | "secs" | "second" | "seconds" => (Some(1_000), None),
        "m" | "min" | "mins" | "minute" | "minutes" => (Some(60_000), Some(Per::Minute)),
        "h" | "hr" | "hour" | "hours" => (Some(3_600_000), Some(Per::Hour)),
        "d" | "day" | "days" => (Some(86_400_000), Some(Per::Day)),
        "w" | "wk" | "week" | "weeks" => (Some(7 * 86_400_000), Some(Per::Week)),
        "mo" | "month" | "months" => (None, Some(Per::Month)),
        "y" | "yr" | "year" | "years" => (None, Some(Per::Year)),
        _ => return None,
    };
    Some(Span { amount, unit_ms, per })
}

/// A duration word of the grammar (`AMOUNT UNIT`, the amount optional when `amount_optional`):
/// its milliseconds (`None` for a calendar unit of no fixed length).
fn duration_word(word: &str, amount_optional: bool) -> Option<i64> {
    let s = span(word, amount_optional)?;
    s.amount.checked_mul(s.unit_ms?)
}

impl FromStr for Policy {
    type Err = PolicyError;

    fn from_str(spec: &str) -> Result<Policy, PolicyError> {
        let error = |word: &str, reason: &str| PolicyError::Spec {
            spec: spec.to_string(),
            word: word.to_string(),
            reason: reason.to_string(),
        };
        let mut words = spec.split_whitespace();
        let rate = words.next().ok_or_else(|| error("", "empty: expected a rate such as 20/s"))?;
        let (count, period) =
            rate.split_once('/').ok_or_else(|| error(rate, "expected a rate COUNT/UNIT such as 20/s or 1000/h"))?;
        let count: i64 = count
            .parse()
            .ok()
            .filter(|&c| c > 0)
            .ok_or_else(|| error(rate, "the count before '/' must be a positive integer"))?;
        let period = span(period, true)
            .ok_or_else(|| error(rate, "the period after '/' must be a unit (ms, s, m, h, d, w; mo, y for a quota), optionally after an amount (10s)"))?;

        let mut algorithm: Option<Algorithm> = None;
        let mut burst: Option<i64> = None;
        let mut precision_ms: Option<i64> = None;
        let mut zone: Option<(&str, Zone)> = None;
        let mut anchor: Option<(&str, i64)> = None;
        let mut debit = false;
        while let Some(word) = words.next() {
            match word.to_ascii_lowercase().as_str() {
                name @ ("throttle" | "gcra" | "window" | "bucket" | "counter" | "quota") => {
                    if algorithm.is_some() {
                        return Err(error(
                            word,
                            "a second algorithm: give one of throttle, window, bucket, counter, quota",
                        ));
                    }
                    algorithm = Some(match name {
                        "window" => Algorithm::Window,
                        "bucket" => Algorithm::Bucket,
                        "counter" => Algorithm::Counter,
                        "quota" => Algorithm::Quota,
                        _ => Algorithm::Throttle,
                    });
                }
                "burst" => {
                    if burst.is_some() {
                        return Err(error(word, "given twice"));
                    }
                    let n = words.next().ok_or_else(|| error(word, "expects a number after it"))?;
                    burst = Some(
                        n.parse()
                            .ok()
                            .filter(|&b| b > 0)
                            .ok_or_else(|| error(n, "burst must be a positive integer"))?,
                    );
                }
                "precision" => {
                    if precision_ms.is_some() {
                        return Err(error(word, "given twice"));
                    }
                    let d = words.next().ok_or_else(|| error(word, "expects a duration after it, such as 1s"))?;
                    precision_ms = Some(
                        duration_word(d, false)
                            .ok_or_else(|| error(d, "precision must be a duration such as 500ms, 1s or 1m"))?,
                    );
                }
                "tz" => {
                    if zone.is_some() {
                        return Err(error(word, "given twice"));
                    }
                    let z = words
                        .next()
                        .ok_or_else(|| error(word, "expects a zone after it, such as Europe/Berlin or +05:30"))?;
                    zone = Some((z, Zone::parse(z.as_bytes()).map_err(|e| error(z, &strip_code(&e.to_string())))?));
                }
                "anchor" => {
                    if anchor.is_some() {
                        return Err(error(word, "given twice"));
                    }
                    let a = words
                        .next()
                        .ok_or_else(|| error(word, "expects an instant after it, such as 2026-01-31T09:00:00Z"))?;
                    let ms = redis_throttle_core::calendar::parse_anchor(a.as_bytes(), Unit::Millis)
                        .map_err(|e| error(a, &strip_code(&e.to_string())))?;
                    anchor = Some((a, ms));
                }
                "debit" => {
                    if debit {
                        return Err(error(word, "given twice"));
                    }
                    debit = true;
                }
                _ => {
                    return Err(error(
                        word,
                        "unknown word: expected throttle, window, bucket, counter, quota, burst, precision, tz, anchor or debit",
                    ));
                }
            }
        }
        let algorithm = algorithm.unwrap_or(Algorithm::Throttle);
        if burst.is_some() && !matches!(algorithm, Algorithm::Throttle | Algorithm::Bucket) {
            return Err(error("burst", "applies to throttle and bucket only"));
        }
        if precision_ms.is_some() && algorithm != Algorithm::Window {
            return Err(error("precision", "applies to window only"));
        }
        if algorithm != Algorithm::Quota {
            if let Some((z, _)) = zone {
                return Err(error(z, "tz applies to quota only (a calendar quota: add the word quota)"));
            }
            if let Some((a, _)) = anchor {
                return Err(error(a, "anchor applies to quota only (a calendar quota: add the word quota)"));
            }
        }
        let period_ms = match (algorithm, period.unit_ms) {
            (Algorithm::Quota, _) => 0,
            (_, Some(unit_ms)) => {
                period.amount.checked_mul(unit_ms).ok_or_else(|| error(rate, "the period is too long"))?
            }
            (_, None) => {
                return Err(error(
                    rate,
                    "a month or a year has no fixed length: add the word quota for a calendar period",
                ));
            }
        };
        let params = match algorithm {
            Algorithm::Throttle => Params::Throttle { max_burst: burst.unwrap_or(count) - 1, count, period_ms },
            Algorithm::Window => Params::Window { limit: count, window_ms: period_ms, precision_ms },
            Algorithm::Bucket => {
                Params::Bucket { capacity: burst.unwrap_or(count), tokens: count, interval_ms: period_ms }
            }
            Algorithm::Counter => Params::Counter { limit: count, window_ms: period_ms },
            Algorithm::Quota => {
                let per = period
                    .per
                    .filter(|_| period.amount == 1)
                    .ok_or_else(|| error(rate, "a quota's period is one calendar unit: min, h, d, w, mo or y, without an amount (1000/d quota)"))?;
                let mut quota = Quota::per(count, per);
                quota.zone = zone.map_or(Zone::UTC, |(_, z)| z);
                quota.anchor_ms = anchor.map(|(_, ms)| ms);
                Params::Quota(quota)
            }
        };
        let policy = Policy::from_params(params).map_err(|e| match e {
            PolicyError::Invalid(text) => error("", &text),
            e => e,
        })?;
        Ok(if debit { policy.debiting() } else { policy })
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
    text.strip_prefix('1')
        .filter(|rest| rest.starts_with(|c: char| c.is_ascii_alphabetic()))
        .map_or(text.clone(), str::to_string)
}

impl fmt::Display for Policy {
    /// The policy as a spec string that parses back to it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_params(f)?;
        if self.debit { f.write_str(" debit") } else { Ok(()) }
    }
}

impl Policy {
    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
            Params::Quota(q) => {
                let unit = match q.per {
                    Per::Minute => "min",
                    Per::Hour => "h",
                    Per::Day => "day",
                    Per::Week => "week",
                    Per::Month => "month",
                    Per::Year => "year",
                };
                write!(f, "{}/{unit} quota", q.limit)?;
                if let Some(zone) = zone_text(q.zone) {
                    write!(f, " tz {zone}")?;
                }
                match q.anchor_ms {
                    Some(ms) => write!(f, " anchor {}", instant_text(ms)),
                    None => Ok(()),
                }
            }
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
        assert_eq!(
            Policy::window(Rate::per_hour(1000)).unwrap().params(),
            Params::Window { limit: 1000, window_ms: 3_600_000, precision_ms: None }
        );
        assert_eq!(
            Policy::bucket(Rate::per_second(10), 100).unwrap().params(),
            Params::Bucket { capacity: 100, tokens: 10, interval_ms: 1000 }
        );
        assert_eq!(
            Policy::counter(Rate::per_day(5000)).unwrap().params(),
            Params::Counter { limit: 5000, window_ms: 86_400_000 }
        );
    }

    #[test]
    fn specs_parse_to_the_constructors() {
        let cases = [
            ("20/s", Policy::throttle(Rate::per_second(20))),
            ("20/s burst 5", Policy::throttle_with_burst(Rate::per_second(20), 5)),
            ("20/S BURST 5 THROTTLE", Policy::throttle_with_burst(Rate::per_second(20), 5)),
            ("1000/h window", Policy::window(Rate::per_hour(1000))),
            (
                "1000000/h window precision 1m",
                Policy::window_with_precision(Rate::per_hour(1_000_000), Duration::from_secs(60)),
            ),
            ("10/s bucket burst 100", Policy::bucket(Rate::per_second(10), 100)),
            ("5000/d counter", Policy::counter(Rate::per_day(5000))),
            ("5/10s", Policy::throttle(Rate::per(5, Duration::from_secs(10)))),
            ("100/500ms counter", Policy::counter(Rate::per(100, Duration::from_millis(500)))),
            ("3/minute", Policy::throttle(Rate::per_minute(3))),
        ];
        for (spec, expected) in cases {
            let parsed = Policy::parse(spec).unwrap();
            assert_eq!(parsed, expected.unwrap(), "{spec}");
            assert_eq!(
                Policy::parse(&parsed.to_string()).unwrap(),
                parsed,
                "{spec} displays as {parsed}, which parses back"
            );
        }
    }

    #[test]
    fn debit_is_a_word_of_the_grammar() {
        let p = Policy::parse("100000/m window debit").unwrap();
        assert!(p.debits());
        assert_eq!(p, Policy::window(Rate::per_minute(100_000)).unwrap().debiting());
        assert_ne!(p, Policy::window(Rate::per_minute(100_000)).unwrap(), "a debiting policy is another policy");
        assert_eq!(p.params(), Policy::window(Rate::per_minute(100_000)).unwrap().params(), "the same limiter");
        assert_eq!(p.to_string(), "100000/m window debit");
        assert_eq!(Policy::parse(&p.to_string()).unwrap(), p);
        assert_eq!(
            Policy::parse("DEBIT 5/s").map_err(|e| e.to_string()),
            Err(r#"policy "DEBIT 5/s": "DEBIT": expected a rate COUNT/UNIT such as 20/s or 1000/h"#.into())
        );
        assert!(Policy::parse("5/s debit debit").unwrap_err().to_string().contains("given twice"));
        assert!(Policy::parse("5/s debit").unwrap().divided(2).unwrap().debits(), "a share debits too");
    }

    #[test]
    fn errors_name_the_bad_word() {
        let err = |spec: &str| Policy::parse(spec).unwrap_err().to_string();
        assert_eq!(
            err("20/s brust 5"),
            r#"policy "20/s brust 5": "brust": unknown word: expected throttle, window, bucket, counter, quota, burst, precision, tz, anchor or debit"#
        );
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
        assert_eq!(
            err("20/s window precision 2s"),
            r#"policy "20/s window precision 2s": precision must be an integer from 1 to 1000 (milliseconds)"#
        );
        assert!(err("2000000000000000000/s counter").contains("limit must be an integer from 1 to 999999999999999999"));
    }

    #[test]
    fn a_period_finer_than_a_millisecond_is_refused() {
        assert!(Policy::throttle(Rate::per(1, Duration::from_micros(1500))).is_err());
        assert!(Policy::throttle(Rate::per(0, Duration::from_secs(1))).is_err());
    }

    #[test]
    fn division_divides_the_rate_not_the_count() {
        let p = Policy::parse("100/s burst 50").unwrap().divided(4).unwrap();
        assert_eq!(p.params(), Params::Throttle { max_burst: 11, count: 100, period_ms: 4000 });
        let p = Policy::parse("3/s window").unwrap().divided(10).unwrap();
        assert_eq!(p.params(), Params::Window { limit: 1, window_ms: 3334, precision_ms: None });
        // A share of 1/s among 8: one per 8 s.
        assert_eq!(
            Policy::parse("1/s counter").unwrap().divided(8).unwrap().params(),
            Params::Counter { limit: 1, window_ms: 8000 }
        );
        assert_eq!(
            Policy::parse("4/s counter").unwrap().divided(8).unwrap().params(),
            Params::Counter { limit: 1, window_ms: 2000 }
        );
        assert_eq!(
            Policy::parse("10/s counter").unwrap().divided(3).unwrap().params(),
            Params::Counter { limit: 3, window_ms: 900 }
        );
        assert_eq!(
            Policy::parse("1/s bucket burst 4").unwrap().divided(8).unwrap().params(),
            Params::Bucket { capacity: 1, tokens: 1, interval_ms: 8000 }
        );
        assert_eq!(
            Policy::parse("100/m window precision 1s").unwrap().divided(200).unwrap().params(),
            Params::Window { limit: 1, window_ms: 120_000, precision_ms: Some(2000) }
        );
        // A calendar limit below the share: a counter over the longest periods it spans.
        assert_eq!(
            Policy::parse("3/day quota").unwrap().divided(6).unwrap().params(),
            Params::Counter { limit: 1, window_ms: 2 * 25 * 3_600_000 }
        );
    }

    /// A degraded fleet (`Local { share }`): `share` instances, each deciding alone with its
    /// divided policy, all trying every 5 ms for 40 windows, admit at most the policy's rate:
    /// `limit` per window over the run, plus at most one divided burst per instance at the start
    /// (each instance starts full). Dividing the count (at least 1 each) admitted 2× a 4/s limit
    /// among 8 and 8× a 1/s one.
    #[test]
    fn a_degraded_fleet_admits_at_most_the_global_rate() {
        use crate::memory::Store;
        use redis_throttle_core::Instant;
        let t0 = 1_700_000_000_000_000_000i64;
        for (spec, share, window_ms) in [
            ("4/s counter", 8, 1000),
            ("1/s counter", 8, 1000),
            ("10/m counter", 16, 60_000),
            ("4/s window", 8, 1000),
            ("3/s window precision 100ms", 8, 1000),
            ("4/s burst 4", 8, 1000),
            ("1/s burst 1", 8, 1000),
            ("4/s bucket burst 4", 8, 1000),
            ("2/min quota", 16, 60_000),
            ("100/s counter", 8, 1000),
        ] {
            let policy = Policy::parse(spec).unwrap();
            let local = policy.divided(share).unwrap();
            let limiter = local.limiter();
            let mut fleet: Vec<Store> = (0..share).map(|_| Store::new(16)).collect();
            let (span_ms, step_ms) = (40 * window_ms, (window_ms / 200).max(5));
            let mut admitted = 0i64;
            for t in (0..span_ms).step_by(step_ms as usize) {
                for (i, store) in fleet.iter_mut().enumerate() {
                    let now = Instant::from_nanos(t0 + (t + i as i64 % step_ms) * 1_000_000);
                    let (numbers, _) = store.decide(&[(limiter, b"k", 1)], now, false).unwrap();
                    admitted += i64::from(numbers[0].verdict == crate::Verdict::Allowed);
                }
            }
            let limit = policy.limit();
            let most = limit * (span_ms / window_ms) + i64::from(share) * local.limit();
            assert!(admitted <= most, "{spec} among {share}: {admitted} admitted in {span_ms} ms (at most {most})");
            assert!(admitted >= limit * (span_ms / window_ms) / 2, "{spec} among {share}: only {admitted} admitted");
        }
    }

    #[test]
    fn quotas_follow_the_calendar_words() {
        let q = |spec: &str| Policy::parse(spec).unwrap();
        assert_eq!(q("100000/month quota"), Policy::quota(Quota::per_month(100_000)).unwrap());
        assert_eq!(q("100000/mo QUOTA"), Policy::quota(Quota::per_month(100_000)).unwrap());
        assert_eq!(
            q("1000/day quota tz Europe/Berlin"),
            Policy::quota(Quota::per_day(1000).tz("Europe/Berlin").unwrap()).unwrap()
        );
        assert_eq!(q("5/min quota tz +05:30"), Policy::quota(Quota::per_minute(5).tz("+05:30").unwrap()).unwrap());
        assert_eq!(q("7/w quota"), Policy::quota(Quota::per_week(7)).unwrap());
        assert_eq!(q("9/y quota"), Policy::quota(Quota::per_year(9)).unwrap());
        let anchored = Policy::quota(Quota::per_month(1000).anchor("2026-01-31T09:00:00Z").unwrap()).unwrap();
        assert_eq!(q("1000/month quota anchor 2026-01-31T09:00:00Z"), anchored);
        assert_eq!(q("1000/month quota anchor 2026-01-31T10:00:00+01:00"), anchored, "the same instant");
        assert_eq!(q("1000/month quota anchor 1769850000000"), anchored, "Unix ms");
        // What is sent: the command's own words, times in ms.
        assert_eq!(
            anchored.command(),
            ("QUOTA", vec!["1000".into(), "PER".into(), "MONTH".into(), "ANCHOR".into(), "1769850000000".into()])
        );
        assert_eq!(q("1000/day quota tz Europe/Berlin").command().1[3..], ["TZ".to_string(), "Europe/Berlin".into()]);
        assert_eq!(q("5/min quota tz -00:30").command().1[3..], ["TZ".to_string(), "-00:30".into()]);
        assert_eq!(q("1000/day quota tz Europe/Berlin").named_zone(), Some("Europe/Berlin"));
        assert_eq!(q("1000/day quota tz +01:00").named_zone(), None);
        // A week is seven days for the other algorithms.
        assert_eq!(q("3/w counter").params(), Params::Counter { limit: 3, window_ms: 604_800_000 });
        for spec in [
            "100000/month quota",
            "1000/day quota tz Europe/Berlin",
            "5/min quota tz +05:30",
            "1/h quota anchor 2026-02-03T04:05:06.789Z",
            "2/week quota tz -03:00 anchor 2026-01-01T00:00:00Z",
        ] {
            let p = q(spec);
            assert_eq!(p.to_string(), spec.replace("/mo ", "/month "));
            assert_eq!(Policy::parse(&p.to_string()).unwrap(), p, "{spec}");
        }
        assert_eq!(q("1000/month quota").divided(4).unwrap(), q("250/month quota"));
    }

    #[test]
    fn quota_errors_name_the_bad_word() {
        let err = |spec: &str| Policy::parse(spec).unwrap_err().to_string();
        assert!(
            err("1000/month").contains(r#""1000/month": a month or a year has no fixed length: add the word quota"#),
            "{}",
            err("1000/month")
        );
        assert!(err("1000/2d quota").contains(r#""1000/2d": a quota's period is one calendar unit"#));
        assert!(err("1000/s quota").contains(r#""1000/s": a quota's period is one calendar unit"#));
        assert!(
            err("1000/d quota tz Mars/Olympus").contains(r#""Mars/Olympus": unknown time zone 'Mars/Olympus' for TZ"#),
            "{}",
            err("1000/d quota tz Mars/Olympus")
        );
        assert!(err("1000/d quota anchor yesterday").contains(r#""yesterday": bad ANCHOR 'yesterday'"#));
        assert!(err("1000/d tz +01:00").contains(r#""+01:00": tz applies to quota only"#));
        assert!(err("1000/d counter anchor 0").contains(r#""0": anchor applies to quota only"#));
        assert!(err("1000/d quota tz").contains(r#""tz": expects a zone"#));
        assert!(err("1000/d quota tz UTC tz UTC").contains(r#""tz": given twice"#));
        assert!(err("1000/d quota burst 5").contains("applies to throttle and bucket only"));
        assert!(Policy::quota(Quota::per_day(0)).unwrap_err().to_string().contains("limit must be"));
        assert!(Quota::per_day(1).tz("Nowhere").is_err());
    }
}
