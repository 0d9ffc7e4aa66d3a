//! `POST /json`: a `RateLimitRequest` in protobuf's JSON mapping in, the `RateLimitResponse` out
//! (field names in lowerCamelCase, defaults omitted, enums by name, durations as `"12s"`), as
//! upstream's protojson handler answers.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{Entry, RateLimitOverride};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{self as pbt, value::Kind};
use serde_json::{Map, Value, json};

use crate::config::Unit;

/// `name` or its lowerCamelCase form (protojson accepts both).
fn field<'v>(o: &'v Map<String, Value>, snake: &str, camel: &str) -> Option<&'v Value> {
    o.get(camel).or_else(|| o.get(snake)).filter(|v| !v.is_null())
}

fn check_fields(o: &Map<String, Value>, known: &[&str], what: &str) -> Result<(), String> {
    for k in o.keys() {
        if !known.contains(&k.as_str()) {
            return Err(format!("unknown field \"{k}\" in {what}"));
        }
    }
    Ok(())
}

/// An unsigned integer as protojson takes it: a number or a decimal string.
fn unsigned(v: &Value, what: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => n.as_u64().ok_or_else(|| format!("{what}: expected an unsigned integer, got {n}")),
        Value::String(s) => s.parse().map_err(|_| format!("{what}: expected an unsigned integer, got {s:?}")),
        other => Err(format!("{what}: expected an unsigned integer, got {other}")),
    }
}

fn text(v: Option<&Value>, what: &str) -> Result<String, String> {
    match v {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("{what}: expected a string, got {other}")),
    }
}

/// Parses a request body.
pub fn request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let Value::Object(o) = v else { return Err("expected a JSON object".into()) };
    check_fields(&o, &["domain", "descriptors", "hits_addend", "hitsAddend"], "RateLimitRequest")?;
    let mut req = RateLimitRequest { domain: text(o.get("domain"), "domain")?, ..Default::default() };
    if let Some(h) = field(&o, "hits_addend", "hitsAddend") {
        req.hits_addend =
            u32::try_from(unsigned(h, "hitsAddend")?).map_err(|_| "hitsAddend: out of range".to_string())?;
    }
    if let Some(ds) = o.get("descriptors").filter(|v| !v.is_null()) {
        let Value::Array(ds) = ds else { return Err("descriptors: expected a list".into()) };
        for d in ds {
            let Value::Object(d) = d else { return Err("descriptors: expected objects".into()) };
            check_fields(
                d,
                &["entries", "limit", "hits_addend", "hitsAddend", "is_negative_hits", "isNegativeHits"],
                "RateLimitDescriptor",
            )?;
            let mut out = RateLimitDescriptor::default();
            if let Some(es) = d.get("entries").filter(|v| !v.is_null()) {
                let Value::Array(es) = es else { return Err("entries: expected a list".into()) };
                for e in es {
                    let Value::Object(e) = e else { return Err("entries: expected objects".into()) };
                    check_fields(e, &["key", "value"], "Entry")?;
                    out.entries.push(Entry { key: text(e.get("key"), "key")?, value: text(e.get("value"), "value")? });
                }
            }
            if let Some(Value::Object(l)) = d.get("limit") {
                check_fields(l, &["requests_per_unit", "requestsPerUnit", "unit"], "RateLimitOverride")?;
                let rpu = field(l, "requests_per_unit", "requestsPerUnit")
                    .map(|v| unsigned(v, "requestsPerUnit"))
                    .transpose()?
                    .unwrap_or(0);
                let unit = match l.get("unit") {
                    None | Some(Value::Null) => 0,
                    Some(Value::String(s)) => Unit::parse(s).map_or(0, Unit::proto),
                    Some(Value::Number(n)) => i32::try_from(n.as_i64().unwrap_or(0)).unwrap_or(0),
                    Some(other) => return Err(format!("unit: expected a unit name, got {other}")),
                };
                out.limit = Some(RateLimitOverride {
                    requests_per_unit: u32::try_from(rpu).map_err(|_| "requestsPerUnit: out of range".to_string())?,
                    unit,
                });
            }
            if let Some(h) = field(d, "hits_addend", "hitsAddend") {
                out.hits_addend = Some(pbt::UInt64Value { value: unsigned(h, "hitsAddend")? });
            }
            if let Some(n) = field(d, "is_negative_hits", "isNegativeHits") {
                out.is_negative_hits = n.as_bool().ok_or("isNegativeHits: expected true or false")?;
            }
            req.descriptors.push(out);
        }
    }
    Ok(req)
}

fn code_name(c: i32) -> &'static str {
    match Code::try_from(c) {
        Ok(Code::Ok) => "OK",
        Ok(Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// A protobuf `Value` as JSON.
pub fn value_to_json(v: &pbt::Value) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_to_json).collect()),
    }
}

pub fn struct_to_json(s: &pbt::Struct) -> Value {
    let mut keys: Vec<_> = s.fields.keys().collect();
    keys.sort();
    Value::Object(keys.into_iter().map(|k| (k.clone(), value_to_json(&s.fields[k]))).collect())
}

/// The response in protobuf's JSON mapping.
pub fn response(r: &RateLimitResponse) -> Value {
    let mut o = Map::new();
    if r.overall_code != 0 {
        o.insert("overallCode".into(), json!(code_name(r.overall_code)));
    }
    if !r.statuses.is_empty() {
        let statuses = r
            .statuses
            .iter()
            .map(|s| {
                let mut so = Map::new();
                if s.code != 0 {
                    so.insert("code".into(), json!(code_name(s.code)));
                }
                if let Some(l) = &s.current_limit {
                    let mut lo = Map::new();
                    if !l.name.is_empty() {
                        lo.insert("name".into(), json!(l.name));
                    }
                    if l.requests_per_unit != 0 {
                        lo.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                    }
                    if l.unit != 0 {
                        lo.insert("unit".into(), json!(Unit::from_proto(l.unit).map_or("UNKNOWN", Unit::name)));
                    }
                    so.insert("currentLimit".into(), Value::Object(lo));
                }
                if s.limit_remaining != 0 {
                    so.insert("limitRemaining".into(), json!(s.limit_remaining));
                }
                if let Some(d) = &s.duration_until_reset {
                    so.insert("durationUntilReset".into(), json!(format!("{}s", d.seconds)));
                }
                Value::Object(so)
            })
            .collect();
        o.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        o.insert(
            "responseHeadersToAdd".into(),
            Value::Array(r.response_headers_to_add.iter().map(|h| json!({"key": h.key, "value": h.value})).collect()),
        );
    }
    if let Some(m) = &r.dynamic_metadata {
        o.insert("dynamicMetadata".into(), struct_to_json(m));
    }
    Value::Object(o)
}
