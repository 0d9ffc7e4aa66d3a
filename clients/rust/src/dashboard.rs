//! Readers for dashboards: `CL.TOP` (the keys denied most) and `INFO throttle` (the module's
//! counters). Both are per node; on a cluster they read one primary.

use std::collections::BTreeMap;

use redis::Value;

use crate::client::Throttle;
use crate::error::Error;
use crate::wire::Backend;

impl Throttle {
    /// The `count` keys denied most since the last reset, with their denial counts, highest
    /// first (`CL.TOP count`). Needs the module.
    pub async fn top(&self, count: u32) -> Result<Vec<(Vec<u8>, i64)>, Error> {
        if self.backend() != Backend::Module {
            return Err(Error::Invalid("CL.TOP needs the module".into()));
        }
        let value = self.send_any(redis::cmd("CL.TOP").arg(count).clone()).await?;
        let bad = || Error::Invalid(format!("CL.TOP replied {value:?}"));
        let Value::Array(items) = &value else { return Err(bad()) };
        items
            .chunks(2)
            .map(|pair| match pair {
                [Value::BulkString(key), Value::Int(n)] => Ok((key.clone(), *n)),
                _ => Err(bad()),
            })
            .collect()
    }

    /// `INFO throttle` as field → value, the `throttle_` prefix removed (`mode`,
    /// `cl_throttle_calls`, `cl_throttle_denied`, …). Needs the module.
    pub async fn info(&self) -> Result<BTreeMap<String, String>, Error> {
        if self.backend() != Backend::Module {
            return Err(Error::Invalid("INFO throttle needs the module".into()));
        }
        let value = self.send_any(redis::cmd("INFO").arg("throttle").clone()).await?;
        let text = match &value {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::VerbatimString { text, .. } => text.clone(),
            other => return Err(Error::Invalid(format!("INFO replied {other:?}"))),
        };
        Ok(text
            .lines()
            .filter_map(|l| l.strip_prefix("throttle_")?.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect())
    }
}
