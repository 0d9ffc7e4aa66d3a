//! Typed requests: a command's arguments (after the command name) parsed and validated.
//! Pure, so the parsing of every command can be tested and fuzzed without a server.

use crate::args::{Tail, non_negative, positive};
use crate::error::{Error, Result};
use crate::gcra;
use crate::time::Unit;

/// `CL.THROTTLE key max_burst count period [quantity] [MS]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Throttle<'a> {
    pub key: &'a [u8],
    pub params: gcra::Params,
    pub quantity: i64,
    pub unit: Unit,
}

impl<'a> Throttle<'a> {
    pub fn parse(args: &[&'a [u8]]) -> Result<Self> {
        let [key, max_burst, count, period, tail @ ..] = args else {
            return Err(Error::WrongArity("cl.throttle"));
        };
        if tail.len() > 2 {
            return Err(Error::WrongArity("cl.throttle"));
        }
        let max_burst = non_negative(max_burst, "max_burst")?;
        let count = positive(count, "count")?;
        let period = positive(period, "period")?;
        let tail = Tail::parse(tail, false)?;
        let params = gcra::Params::new(max_burst, count, tail.duration(period)?)?;
        Ok(Throttle { key, params, quantity: tail.quantity, unit: tail.unit })
    }
}
