//! Typed requests: a command's arguments (after the command name) parsed and validated.
//! Pure, so the parsing of every command can be tested and fuzzed without a server.

use crate::args::{Tail, integer, non_negative, positive};
use crate::error::{Error, Result};
use crate::{bucket, counter, gcra, window};
use crate::time::Unit;

/// A parsed call of one limiter: its key, validated parameters, the units it consumes and
/// the unit of its times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a, P> {
    pub key: &'a [u8],
    pub params: P,
    pub quantity: i64,
    pub unit: Unit,
}

/// `CL.THROTTLE key max_burst count period [quantity] [MS]`
pub type Throttle<'a> = Request<'a, gcra::Params>;

impl<'a> Throttle<'a> {
    pub fn parse(args: &[&'a [u8]]) -> Result<Self> {
        let (key, [max_burst, count, period], tail) = positional(args, 2, "cl.throttle")?;
        let max_burst = non_negative(max_burst, "max_burst")?;
        let count = positive(count, "count")?;
        let period = positive(period, "period")?;
        let tail = Tail::parse(tail, false)?;
        let params = gcra::Params::new(max_burst, count, tail.duration(period)?)?;
        Ok(Request { key, params, quantity: tail.quantity, unit: tail.unit })
    }
}

/// `CL.WINDOW key limit window [quantity] [MS] [PRECISION p]`
pub type Window<'a> = Request<'a, window::Params>;

impl<'a> Window<'a> {
    pub fn parse(args: &[&'a [u8]]) -> Result<Self> {
        let (key, [limit, window], tail) = positional(args, 4, "cl.window")?;
        // The limit's range depends on PRECISION: window::Params checks it.
        let limit = integer(limit)?;
        let window = positive(window, "window")?;
        let tail = Tail::parse(tail, true)?;
        let precision = tail.precision.map(|p| tail.duration(p)).transpose()?;
        let params = window::Params::new(limit, tail.duration(window)?, precision)?;
        Ok(Request { key, params, quantity: tail.quantity, unit: tail.unit })
    }
}

/// `CL.BUCKET key capacity tokens interval [quantity] [MS]`
pub type Bucket<'a> = Request<'a, bucket::Params>;

impl<'a> Bucket<'a> {
    pub fn parse(args: &[&'a [u8]]) -> Result<Self> {
        let (key, [capacity, tokens, interval], tail) = positional(args, 2, "cl.bucket")?;
        let capacity = positive(capacity, "capacity")?;
        let tokens = positive(tokens, "tokens")?;
        let interval = positive(interval, "interval")?;
        let tail = Tail::parse(tail, false)?;
        let params = bucket::Params::new(capacity, tokens, tail.duration(interval)?)?;
        Ok(Request { key, params, quantity: tail.quantity, unit: tail.unit })
    }
}

/// `CL.COUNTER key limit window [quantity] [MS]`
pub type Counter<'a> = Request<'a, counter::Params>;

impl<'a> Counter<'a> {
    pub fn parse(args: &[&'a [u8]]) -> Result<Self> {
        let (key, [limit, window], tail) = positional(args, 2, "cl.counter")?;
        let limit = integer(limit)?; // counter::Params checks its range

        let window = positive(window, "window")?;
        let tail = Tail::parse(tail, false)?;
        let params = counter::Params::new(limit, tail.duration(window)?)?;
        Ok(Request { key, params, quantity: tail.quantity, unit: tail.unit })
    }
}

/// A command's key, its `N` positional arguments and its optional tail.
type Split<'a, 'b, const N: usize> = (&'a [u8], [&'a [u8]; N], &'b [&'a [u8]]);

/// Splits a command's arguments into its key, its `N` positional arguments and the
/// optional tail of at most `max_tail` words; any other count is a wrong arity.
fn positional<'a, 'b, const N: usize>(
    args: &'b [&'a [u8]],
    max_tail: usize,
    command: &'static str,
) -> Result<Split<'a, 'b, N>> {
    let arity = Error::WrongArity(command);
    let (&key, rest) = args.split_first().ok_or(arity.clone())?;
    if rest.len() < N || rest.len() - N > max_tail {
        return Err(arity);
    }
    let (fixed, tail) = rest.split_at(N);
    let fixed: [&'a [u8]; N] = fixed.try_into().map_err(|_| arity)?;
    Ok((key, fixed, tail))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC, Nanos};

    fn args(s: &str) -> Vec<&[u8]> {
        s.split(' ').filter(|w| !w.is_empty()).map(str::as_bytes).collect()
    }

    fn name(e: Error) -> &'static str {
        match e {
            Error::OutOfRange { name, .. } => name,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn window_parses_its_arguments() {
        let w = Window::parse(&args("k 10 60")).unwrap();
        assert_eq!((w.key, w.quantity, w.unit), (&b"k"[..], 1, Unit::Seconds));
        assert_eq!(w.params, window::Params::new(10, Nanos::new(60 * NANOS_PER_SEC).unwrap(), None).unwrap());
        let w = Window::parse(&args("k 10 600 PRECISION 5 3 MS")).unwrap();
        assert_eq!((w.quantity, w.unit), (3, Unit::Millis));
        assert_eq!(w.params.precision(), Nanos::new(5 * NANOS_PER_MILLI));
        assert_eq!(w.params.window(), Nanos::new(600 * NANOS_PER_MILLI).unwrap());
    }

    #[test]
    fn window_rejects_bad_arguments() {
        for bad in ["", "k", "k 1", "k 1 1 1 MS PRECISION 1 x"] {
            assert_eq!(Window::parse(&args(bad)), Err(Error::WrongArity("cl.window")), "{bad:?}");
        }
        assert_eq!(name(Window::parse(&args("k 0 1")).unwrap_err()), "limit");
        assert_eq!(name(Window::parse(&args("k 1 -1")).unwrap_err()), "window");
        assert_eq!(name(Window::parse(&args("k 1 1 PRECISION 2")).unwrap_err()), "precision");
        assert_eq!(name(Window::parse(&args("k 1 1 PRECISION 0")).unwrap_err()), "precision");
        assert_eq!(name(Window::parse(&args("k 100001 1")).unwrap_err()), "limit");
        assert!(Window::parse(&args("k 100001 1 PRECISION 1")).is_ok());
        assert_eq!(Window::parse(&args("k 1 1.5")), Err(Error::NotAnInteger));
        assert_eq!(Window::parse(&args("k 1 1 FOO")), Err(Error::Syntax));
        assert_eq!(Window::parse(&args("k 1 9223372036854775807")), Err(Error::TooLarge));
    }

    #[test]
    fn bucket_parses_its_arguments() {
        let b = Bucket::parse(&args("k 10 2 500 -4 MS")).unwrap();
        assert_eq!((b.key, b.quantity, b.unit), (&b"k"[..], -4, Unit::Millis));
        assert_eq!(b.params, bucket::Params::new(10, 2, Nanos::new(500 * NANOS_PER_MILLI).unwrap()).unwrap());
    }

    #[test]
    fn bucket_rejects_bad_arguments() {
        for bad in ["k 1 1", "k 1 1 1 1 MS x", "k"] {
            assert_eq!(Bucket::parse(&args(bad)), Err(Error::WrongArity("cl.bucket")), "{bad:?}");
        }
        assert_eq!(name(Bucket::parse(&args("k 0 1 1")).unwrap_err()), "capacity");
        assert_eq!(name(Bucket::parse(&args("k 1 0 1")).unwrap_err()), "tokens");
        assert_eq!(name(Bucket::parse(&args("k 1 1 0")).unwrap_err()), "interval");
        assert_eq!(Bucket::parse(&args("k 1 1 1 PRECISION 1")), Err(Error::Syntax));
        assert_eq!(Bucket::parse(&args("k 9223372036854775807 1 1")), Err(Error::TooLarge));
    }

    #[test]
    fn counter_parses_its_arguments() {
        let c = Counter::parse(&args("k 100 60 0")).unwrap();
        assert_eq!((c.key, c.quantity, c.unit), (&b"k"[..], 0, Unit::Seconds));
        assert_eq!(c.params, counter::Params::new(100, Nanos::new(60 * NANOS_PER_SEC).unwrap()).unwrap());
    }

    #[test]
    fn counter_rejects_bad_arguments() {
        for bad in ["k 1", "k 1 1 1 MS x", ""] {
            assert_eq!(Counter::parse(&args(bad)), Err(Error::WrongArity("cl.counter")), "{bad:?}");
        }
        assert_eq!(name(Counter::parse(&args("k 0 1")).unwrap_err()), "limit");
        assert_eq!(name(Counter::parse(&args("k 1 0")).unwrap_err()), "window");
        assert_eq!(Counter::parse(&args("k 1 1 MS MS")), Err(Error::Syntax));
        assert_eq!(Counter::parse(&args("k 1 9223372036854775807")), Err(Error::TooLarge));
    }
}
