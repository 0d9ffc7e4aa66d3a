//! Response fields (the IETF RateLimit fields, their older drafts, GitHub's) and refusals as
//! RFC 9457 problem details.

use std::time::{Duration, SystemTime};

use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use crate::policy::{Params, Per, Policy};

/// Which rate-limit fields responses carry; combine with `|`. The default is
/// `DRAFT_11 | GITHUB`. The drafts name their fields alike with different syntax, so at most
/// one of `DRAFT_6`, `DRAFT_7`, `DRAFT_11` may be chosen (the layer refuses to build otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers(u8);

impl Headers {
    pub const NONE: Headers = Headers(0);
    /// draft-ietf-httpapi-ratelimit-headers-11: `RateLimit-Policy: "per-ip";q=10;w=1` and
    /// `RateLimit: "per-ip";r=3;t=1`, one list member per enforced limit.
    pub const DRAFT_11: Headers = Headers(1);
    /// draft-06: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (seconds) and
    /// `RateLimit-Policy: 10;w=1`, for the binding rate limit.
    pub const DRAFT_6: Headers = Headers(2);
    /// draft-07: `RateLimit: limit=10, remaining=3, reset=1` and `RateLimit-Policy: 10;w=1`.
    pub const DRAFT_7: Headers = Headers(4);
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds), as
    /// GitHub sends them, for the binding rate limit.
    pub const GITHUB: Headers = Headers(8);

    pub fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    pub(crate) fn drafts(self) -> u32 {
        (self.0 & 7).count_ones()
    }
}

impl Default for Headers {
    fn default() -> Self {
        Headers::DRAFT_11 | Headers::GITHUB
    }
}

impl std::ops::BitOr for Headers {
    type Output = Headers;
    fn bitor(self, rhs: Headers) -> Headers {
        Headers(self.0 | rhs.0)
    }
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000).try_into().unwrap_or(u64::MAX)
}

/// The window a rate policy's quota is for, in whole seconds (at least 1): how long an empty
/// limiter takes to be full again.
pub(crate) fn window_secs(policy: &Policy) -> u64 {
    let u = |v: i64| u64::try_from(v).unwrap_or(0).max(1);
    let ms = match policy.params() {
        Params::Throttle { max_burst, count, period_ms } => {
            u(max_burst + 1).saturating_mul(u(period_ms)).div_ceil(u(count))
        }
        Params::Window { window_ms, .. } | Params::Counter { window_ms, .. } => u(window_ms),
        Params::Bucket { capacity, tokens, interval_ms } => {
            u(capacity).div_ceil(u(tokens)).saturating_mul(u(interval_ms))
        }
        // A calendar period's length varies (DST days, months, leap years): its nominal length,
        // a month and a year at their Gregorian averages (30.436875 and 365.2425 days).
        Params::Quota(quota) => match quota.period() {
            Per::Minute => 60_000,
            Per::Hour => 3_600_000,
            Per::Day => 86_400_000,
            Per::Week => 604_800_000,
            Per::Month => 2_629_746_000,
            Per::Year => 31_556_952_000,
        },
    };
    ms.div_ceil(1000).max(1)
}

/// One enforced limit's numbers for the fields.
#[derive(Debug, Clone)]
pub(crate) struct Entry<'a> {
    pub name: &'a str,
    pub limit: i64,
    /// `Some(window seconds)` for a rate limit; `None` for a concurrency limit.
    pub window: Option<u64>,
    pub remaining: i64,
    pub reset_after: Duration,
    pub key: &'a [u8],
}

fn value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Writes the chosen fields for `entries` (`binding`: the one the single-valued forms describe).
pub(crate) fn write(
    map: &mut HeaderMap,
    style: Headers,
    entries: &[Entry<'_>],
    binding: Option<usize>,
    partition_keys: bool,
) {
    if entries.is_empty() {
        return;
    }
    if style.contains(Headers::DRAFT_11) {
        let pk = |e: &Entry<'_>| {
            if partition_keys {
                format!(";pk=:{}:", base64::engine::general_purpose::STANDARD.encode(e.key))
            } else {
                String::new()
            }
        };
        let policy: Vec<String> = entries
            .iter()
            .map(|e| match e.window {
                Some(w) => format!("\"{}\";q={};w={w}{}", e.name, e.limit.max(0), pk(e)),
                None => format!("\"{}\";q={};qu=\"concurrent-requests\"{}", e.name, e.limit.max(0), pk(e)),
            })
            .collect();
        let current: Vec<String> = entries
            .iter()
            .map(|e| match e.window {
                Some(_) => format!("\"{}\";r={};t={}{}", e.name, e.remaining.max(0), ceil_secs(e.reset_after), pk(e)),
                None => format!("\"{}\";r={}{}", e.name, e.remaining.max(0), pk(e)),
            })
            .collect();
        map.insert(HeaderName::from_static("ratelimit-policy"), value(policy.join(", ")));
        map.insert(HeaderName::from_static("ratelimit"), value(current.join(", ")));
    }
    let Some(b) = binding.and_then(|i| entries.get(i)) else { return };
    let (limit, remaining, reset) = (b.limit.max(0), b.remaining.max(0), ceil_secs(b.reset_after));
    let window = b.window.unwrap_or(1);
    if style.contains(Headers::DRAFT_6) {
        map.insert(HeaderName::from_static("ratelimit-limit"), limit.into());
        map.insert(HeaderName::from_static("ratelimit-remaining"), remaining.into());
        map.insert(HeaderName::from_static("ratelimit-reset"), reset.into());
        map.insert(HeaderName::from_static("ratelimit-policy"), value(format!("{limit};w={window}")));
    }
    if style.contains(Headers::DRAFT_7) {
        map.insert(
            HeaderName::from_static("ratelimit"),
            value(format!("limit={limit}, remaining={remaining}, reset={reset}")),
        );
        map.insert(HeaderName::from_static("ratelimit-policy"), value(format!("{limit};w={window}")));
    }
    if style.contains(Headers::GITHUB) {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        map.insert(HeaderName::from_static("x-ratelimit-limit"), limit.into());
        map.insert(HeaderName::from_static("x-ratelimit-remaining"), remaining.into());
        map.insert(HeaderName::from_static("x-ratelimit-reset"), ceil_secs(now + b.reset_after).into());
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// A limit denied it: 429, `quota-exceeded`.
    QuotaExceeded,
    /// The server could not be asked and the failure policy refuses: 503,
    /// `temporary-reduced-capacity`.
    ReducedCapacity,
    /// The request has no key for a limit and [`MissingKey::Refuse`](super::MissingKey) applies: 400.
    NoKey,
    /// The layer cannot decide (the server refused the call, or a peer-IP key without
    /// `ConnectInfo`): 500.
    Error,
}

/// A refusal, for a custom response ([`RateLimit::respond_with`](super::RateLimit::respond_with)).
#[derive(Debug, Clone)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// The default status of `kind`.
    pub status: StatusCode,
    /// The limits that refused (for CL.ALL, the binding one).
    pub violated: Vec<String>,
    /// The `Retry-After` the response carries (whole seconds, at least 1), when it carries one.
    pub retry_after: Option<u64>,
    /// What went wrong, for `NoKey` and `Error`.
    pub detail: Option<String>,
    /// The request is a gRPC call (`content-type: application/grpc…`): the default response is
    /// [`Refusal::grpc_response`], since gRPC clients do not read HTTP statuses or bodies.
    pub grpc: bool,
}

/// The problem types of draft-ietf-httpapi-ratelimit-headers-11 §5.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Refusal {
    /// The default response: an RFC 9457 `application/problem+json` body.
    pub fn problem(&self) -> Response<Bytes> {
        let (kind, title) = match self.kind {
            RefusalKind::QuotaExceeded => {
                (QUOTA_EXCEEDED, "Request cannot be satisfied as assigned quota has been exceeded")
            }
            RefusalKind::ReducedCapacity => {
                (TEMPORARY_REDUCED_CAPACITY, "Request cannot be satisfied due to temporary server capacity constraints")
            }
            RefusalKind::NoKey => ("about:blank", "Bad Request"),
            RefusalKind::Error => ("about:blank", "Internal Server Error"),
        };
        let mut body = format!(
            "{{\"type\":{},\"title\":{},\"status\":{}",
            json_string(kind),
            json_string(title),
            self.status.as_u16()
        );
        if let Some(detail) = &self.detail {
            body.push_str(&format!(",\"detail\":{}", json_string(detail)));
        }
        if !self.violated.is_empty() {
            let names: Vec<String> = self.violated.iter().map(|n| json_string(n)).collect();
            body.push_str(&format!(",\"violated-policies\":[{}]", names.join(",")));
        }
        body.push('}');
        let mut response = Response::new(Bytes::from(body));
        *response.status_mut() = self.status;
        response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        response
    }
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII, and `%`.
fn grpc_percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Refusal {
    /// The gRPC status of `kind`: `RESOURCE_EXHAUSTED` (8) for a limit's refusal, `UNAVAILABLE`
    /// (14) when the server cannot answer and the failure policy refuses, `INVALID_ARGUMENT` (3)
    /// for a call without a key, `INTERNAL` (13) when the layer cannot decide.
    pub fn grpc_code(&self) -> u16 {
        match self.kind {
            RefusalKind::QuotaExceeded => 8,
            RefusalKind::ReducedCapacity => 14,
            RefusalKind::NoKey => 3,
            RefusalKind::Error => 13,
        }
    }

    /// The refusal of a gRPC call: a trailers-only response (HTTP 200, `content-type:
    /// application/grpc`, `grpc-status`, `grpc-message`, no body), which every gRPC client reads
    /// as the call's status. `Retry-After` (and the rate-limit fields the layer adds) reach the
    /// client as metadata; `grpc-retry-pushback-ms` carries the same wait for gRPC clients whose
    /// retry policy retries that status (gRFC A6).
    pub fn grpc_response(&self) -> Response<Bytes> {
        let message = match (self.kind, &self.detail) {
            (RefusalKind::QuotaExceeded, _) => format!("quota exceeded: {}", self.violated.join(", ")),
            (RefusalKind::ReducedCapacity, _) => {
                "temporary reduced capacity: the rate limit cannot be decided".to_string()
            }
            (_, Some(detail)) => detail.clone(),
            (_, None) => "the rate limit cannot be decided".to_string(),
        };
        let mut response = Response::new(Bytes::new());
        let headers = response.headers_mut();
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(HeaderName::from_static("grpc-status"), self.grpc_code().into());
        headers.insert(HeaderName::from_static("grpc-message"), value(grpc_percent_encode(&message)));
        if let Some(secs) = self.retry_after {
            headers.insert(HeaderName::from_static("grpc-retry-pushback-ms"), secs.saturating_mul(1000).into());
        }
        response
    }
}

/// A gRPC call: `content-type: application/grpc`, `application/grpc+proto`, `application/grpc;…`
/// (gRPC-Web's `application/grpc-web…` excluded: its statuses travel in the body).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| {
        ct.strip_prefix("application/grpc")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('+') || rest.starts_with(';'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_each_draft() {
        let entries = [
            Entry {
                name: "per-ip",
                limit: 10,
                window: Some(1),
                remaining: 3,
                reset_after: Duration::from_millis(700),
                key: b"1.2.3.4",
            },
            Entry {
                name: "per-tenant",
                limit: 10_000,
                window: Some(3600),
                remaining: 9000,
                reset_after: Duration::from_secs(360),
                key: b"t",
            },
            Entry { name: "in-flight", limit: 4, window: None, remaining: 2, reset_after: Duration::ZERO, key: b"t" },
        ];
        let mut m = HeaderMap::new();
        write(&mut m, Headers::DRAFT_11, &entries, Some(0), false);
        assert_eq!(
            m["ratelimit-policy"],
            r#""per-ip";q=10;w=1, "per-tenant";q=10000;w=3600, "in-flight";q=4;qu="concurrent-requests""#
        );
        assert_eq!(m["ratelimit"], r#""per-ip";r=3;t=1, "per-tenant";r=9000;t=360, "in-flight";r=2"#);
        let mut m = HeaderMap::new();
        write(&mut m, Headers::DRAFT_11, &entries[..1], Some(0), true);
        assert_eq!(m["ratelimit"], r#""per-ip";r=3;t=1;pk=:MS4yLjMuNA==:"#);
        let mut m = HeaderMap::new();
        write(&mut m, Headers::DRAFT_6, &entries, Some(0), false);
        assert_eq!(
            (&m["ratelimit-limit"], &m["ratelimit-remaining"], &m["ratelimit-reset"], &m["ratelimit-policy"]),
            (
                &"10".parse::<HeaderValue>().unwrap(),
                &"3".parse().unwrap(),
                &"1".parse().unwrap(),
                &"10;w=1".parse().unwrap()
            )
        );
        let mut m = HeaderMap::new();
        write(&mut m, Headers::DRAFT_7, &entries, Some(1), false);
        assert_eq!(m["ratelimit"], "limit=10000, remaining=9000, reset=360");
        assert_eq!(m["ratelimit-policy"], "10000;w=3600");
    }

    #[test]
    fn windows_are_the_time_to_refill() {
        assert_eq!(window_secs(&Policy::parse("10/s").unwrap()), 1);
        assert_eq!(window_secs(&Policy::parse("20/s burst 5").unwrap()), 1, "250 ms rounds up to a second");
        assert_eq!(window_secs(&Policy::parse("10000/h window").unwrap()), 3600);
        assert_eq!(window_secs(&Policy::parse("10/m bucket burst 25").unwrap()), 180);
        assert_eq!(window_secs(&Policy::parse("1/h burst 10").unwrap()), 36_000);
        assert_eq!(
            window_secs(&Policy::parse("1000/day quota tz Europe/Berlin").unwrap()),
            86_400,
            "a day's nominal length, DST or not"
        );
        assert_eq!(window_secs(&Policy::parse("100000/month quota").unwrap()), 2_629_746, "a Gregorian average month");
    }

    #[test]
    fn a_problem_names_its_type_and_policies() {
        let r = Refusal {
            kind: RefusalKind::QuotaExceeded,
            status: StatusCode::TOO_MANY_REQUESTS,
            violated: vec!["per-\"ip".into()],
            retry_after: Some(1),
            detail: None,
            grpc: false,
        };
        let p = r.problem();
        assert_eq!(p.status(), 429);
        assert_eq!(p.headers()["content-type"], "application/problem+json");
        let body = String::from_utf8(p.body().to_vec()).unwrap();
        assert_eq!(
            body,
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"violated-policies":["per-\"ip"]}"#
        );
    }

    #[test]
    fn a_grpc_refusal_is_a_trailers_only_status() {
        let r = Refusal {
            kind: RefusalKind::QuotaExceeded,
            status: StatusCode::TOO_MANY_REQUESTS,
            violated: vec!["per-key".into()],
            retry_after: Some(3),
            detail: None,
            grpc: true,
        };
        let g = r.grpc_response();
        assert_eq!(g.status(), 200, "gRPC statuses travel in grpc-status, over HTTP 200");
        assert_eq!(
            (&g.headers()["content-type"], &g.headers()["grpc-status"]),
            (&HeaderValue::from_static("application/grpc"), &HeaderValue::from_static("8"))
        );
        assert_eq!(g.headers()["grpc-message"], "quota exceeded: per-key");
        assert_eq!(g.headers()["grpc-retry-pushback-ms"], "3000");
        assert!(g.body().is_empty(), "trailers-only: no message");
        let down = Refusal { kind: RefusalKind::ReducedCapacity, status: StatusCode::SERVICE_UNAVAILABLE, ..r.clone() };
        assert_eq!(down.grpc_response().headers()["grpc-status"], "14");
        let keyless = Refusal {
            kind: RefusalKind::NoKey,
            status: StatusCode::BAD_REQUEST,
            retry_after: None,
            detail: Some("no key for \"per-key\" (100% é)".into()),
            ..r
        };
        let g = keyless.grpc_response();
        assert_eq!(g.headers()["grpc-status"], "3");
        assert_eq!(
            g.headers()["grpc-message"],
            "no key for \"per-key\" (100%25 %C3%A9)",
            "percent-encoded as gRPC says"
        );
        assert!(!g.headers().contains_key("grpc-retry-pushback-ms"));

        let ct = |v: &'static str| HeaderMap::from_iter([(http::header::CONTENT_TYPE, HeaderValue::from_static(v))]);
        assert!(is_grpc(&ct("application/grpc")) && is_grpc(&ct("application/grpc+proto")));
        assert!(
            !is_grpc(&ct("application/grpc-web")) && !is_grpc(&ct("application/json")) && !is_grpc(&HeaderMap::new())
        );
    }
}
