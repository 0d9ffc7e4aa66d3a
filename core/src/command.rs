//! One table per command: its name, keys, arguments and documentation. Registration (arity,
//! key specs, `COMMAND DOCS`), argument parsing and the most arguments a call can have all
//! derive from it, so a command's shape is stated once.

use crate::args::integer;
use crate::error::{Error, Result};
use crate::time::Unit;

/// A command as the server knows it.
#[derive(Debug)]
pub struct Command {
    /// Lower case, as registered: `cl.throttle`.
    pub name: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
    pub since: &'static str,
    /// Command flags for `RedisModule_CreateCommand`.
    pub flags: &'static str,
    /// ACL categories (applied on servers that support them, 7.2+).
    pub acl_categories: &'static str,
    pub keys: Keys,
    /// The arguments after the key (or after `numkeys` and the keys).
    pub args: &'static [Arg],
}

/// Where a command's keys are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No key.
    None,
    /// Argument 1 is the key.
    One,
    /// Argument 1 is `numkeys` (1 to `max`), then the keys (like `ZINTERCARD`).
    Counted { max: usize },
}

/// One documented argument.
#[derive(Debug)]
pub struct Arg {
    /// As the manual and the error messages name it.
    pub name: &'static str,
    pub kind: ArgKind,
    pub optional: bool,
    /// May be repeated (a CL.ALL spec).
    pub multiple: bool,
}

#[derive(Debug)]
pub enum ArgKind {
    /// An integer (a count, a limit).
    Integer,
    /// A duration in the call's unit (seconds, or milliseconds with `MS`).
    Duration,
    /// A byte string (an id).
    String,
    /// The bare, optional quantity of a limiter command: an integer in any position of the tail.
    Quantity,
    /// A literal word (`MS`, `DETAILS`).
    Flag(&'static str),
    /// A word followed by an integer or duration (`PRECISION p`, `QUANTITY q`).
    Option(&'static str),
    /// A word followed by a word that is not a number (`PER unit`, `TZ zone`, `ANCHOR instant`).
    Text(&'static str),
    /// A CL.ALL limiter spec: one of these commands' (the algorithms'), by its word, then
    /// that command's parameters and options (from its table) and `[QUANTITY q]`.
    Spec(&'static [&'static Command]),
}

impl Arg {
    pub const fn integer(name: &'static str) -> Arg {
        Arg { name, kind: ArgKind::Integer, optional: false, multiple: false }
    }
    pub const fn duration(name: &'static str) -> Arg {
        Arg { name, kind: ArgKind::Duration, optional: false, multiple: false }
    }
    pub const fn string(name: &'static str) -> Arg {
        Arg { name, kind: ArgKind::String, optional: false, multiple: false }
    }
    pub const fn flag(name: &'static str, token: &'static str) -> Arg {
        Arg { name, kind: ArgKind::Flag(token), optional: true, multiple: false }
    }
    pub const fn option(name: &'static str, token: &'static str) -> Arg {
        Arg { name, kind: ArgKind::Option(token), optional: true, multiple: false }
    }
    pub const QUANTITY: Arg = Arg { name: "quantity", kind: ArgKind::Quantity, optional: true, multiple: false };
    /// `QUANTITY q`: the quantity as an option only (a CL.ALL spec, CL.PACE, CL.QUOTA).
    pub const QUANTITY_OPTION: Arg = Arg::option("quantity", "QUANTITY");
    pub const MS: Arg = Arg::flag("ms", "MS");
    /// `HELD t` of a refund: the Unix-milliseconds instant at which the limiter would have been
    /// full again right after the call that took the units (`PEXPIRETIME key` then); the refund
    /// gives back at most what the limiter still holds of them (see `Limiter::decide_held`).
    pub const HELD: Arg = Arg::option("held", "HELD");
    /// `DEBIT`: count the quantity whatever the limit says (a charge for what was already
    /// used); the reply says whether it fitted. See [`crate::Charge::Debit`].
    pub const DEBIT: Arg = Arg::flag("debit", "DEBIT");
    /// Answer a denial as an admission (and count it as a shadow denial), for this call only.
    pub const SHADOW: Arg = Arg::flag("shadow", "SHADOW");

    /// Words this argument takes at least (`min`) and at most (`max`, `None`: unbounded).
    fn words(&self) -> (usize, Option<usize>) {
        let (min, max) = match self.kind {
            ArgKind::Integer | ArgKind::Duration | ArgKind::String | ArgKind::Quantity | ArgKind::Flag(_) => {
                (1, Some(1))
            }
            ArgKind::Option(_) | ArgKind::Text(_) => (2, Some(2)),
            ArgKind::Spec(tables) => {
                let words = |t: &Command| (1 + t.param_words(), 1 + t.param_words() + 2 * t.options().count() + 2);
                let min = tables.iter().map(|t| words(t).0).min().unwrap_or(0);
                let max = tables.iter().map(|t| words(t).1).max();
                (min, max)
            }
        };
        match (self.optional, self.multiple) {
            (true, false) => (0, max),
            (_, true) => (if self.optional { 0 } else { min }, None),
            (false, false) => (min, max),
        }
    }
}

impl Command {
    /// Its positional parameters.
    pub fn params(&self) -> impl Iterator<Item = &'static Arg> + Clone + use<> {
        self.args.iter().filter(|a| !a.optional)
    }

    /// Its options other than the shared quantity and unit (`PRECISION p`, `TZ zone`).
    pub fn options(&self) -> impl Iterator<Item = &'static Arg> + Clone + use<> {
        self.args
            .iter()
            .filter(|a| a.optional && matches!(a.kind, ArgKind::Option(t) | ArgKind::Text(t) if t != "QUANTITY"))
    }

    /// The words its positional parameters take (`PER unit` takes two).
    pub fn param_words(&self) -> usize {
        self.params().map(|a| if matches!(a.kind, ArgKind::Option(_) | ArgKind::Text(_)) { 2 } else { 1 }).sum()
    }

    /// The server's arity: the exact word count (command name included), negative when it is a
    /// minimum.
    pub fn arity(&self) -> i32 {
        let key_words = match self.keys {
            Keys::None => 0,
            Keys::One => 1,
            Keys::Counted { .. } => 2,
        };
        let (min, max) = self.args.iter().fold((0, Some(0)), |(min, max): (usize, Option<usize>), a| {
            let (a_min, a_max) = a.words();
            (min + a_min, max.zip(a_max).map(|(m, a)| m + a))
        });
        let min = i32::try_from(1 + key_words + min).unwrap_or(i32::MAX);
        let exact = max == Some(min as usize - 1 - key_words) && !matches!(self.keys, Keys::Counted { .. });
        if exact { min } else { -min }
    }

    /// The most words a call can have after the command name, when bounded.
    pub fn max_words(&self) -> Option<usize> {
        let keys = match self.keys {
            Keys::None => Some(0),
            Keys::One => Some(1),
            Keys::Counted { .. } => None,
        };
        self.args.iter().try_fold(keys?, |m, a| a.words().1.map(|w| m + w))
    }

    /// The positional (required, single-word) arguments after the key, in order. Every table
    /// lists them first (a test checks it), so the walk stops at the first option.
    fn positional(&self) -> impl Iterator<Item = &Arg> {
        self.args.iter().take_while(|a| !a.optional && !a.multiple)
    }
}

/// A single-key command's arguments, split and checked against its table: the key, the
/// positional arguments (integers and durations as integers in the call's unit, strings as
/// they are) and the options of its tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<'a> {
    pub key: &'a [u8],
    positional: [Value<'a>; MAX_POSITIONAL],
    pub tail: Tail,
}

/// The most positional arguments any command has after its key.
const MAX_POSITIONAL: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value<'a> {
    None,
    Integer(i64),
    String(&'a [u8]),
}

impl<'a> Parsed<'a> {
    /// Splits `args` (the words after the command name) by `command`'s table.
    pub fn parse(command: &Command, args: &[&'a [u8]]) -> Result<Parsed<'a>> {
        let arity = || Error::WrongArity(command.name);
        let (&key, rest) = args.split_first().ok_or_else(arity)?;
        let count = command.positional().count();
        // (The longest call the table allows matters only for a call of more words than the
        // table has arguments: each takes at least one word.)
        if rest.len() < count
            || (args.len() > 1 + command.args.len() && command.max_words().is_some_and(|max| args.len() > max))
        {
            return Err(arity());
        }
        let (fixed, tail) = rest.split_at(count);
        let mut positional = [Value::None; MAX_POSITIONAL];
        for ((slot, arg), &word) in positional.iter_mut().zip(command.positional()).zip(fixed) {
            *slot = match arg.kind {
                ArgKind::String => Value::String(word),
                _ => Value::Integer(integer(word)?),
            };
        }
        let tail = Tail::parse(tail, command.args.iter().filter(|a| a.optional))?;
        Ok(Parsed { key, positional, tail })
    }

    /// The `i`-th positional integer (0 after the key).
    pub fn integer(&self, i: usize) -> i64 {
        match self.positional.get(i) {
            Some(Value::Integer(v)) => *v,
            _ => 0,
        }
    }

    /// The `i`-th positional string.
    pub fn string(&self, i: usize) -> &'a [u8] {
        match self.positional.get(i) {
            Some(Value::String(s)) => s,
            _ => &[],
        }
    }
}

/// The optional words after a command's positional arguments, in any order, each at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    /// The bare quantity, or `QUANTITY q`.
    pub quantity: Option<i64>,
    pub unit: Unit,
    /// Flags present, by token (`SHADOW`, `BLOCK`, `DETAILS`): see [`Tail::has`].
    flags: [Option<&'static str>; 3],
    /// Options given with their integer, by token (`PRECISION`, `MAXWAIT`).
    values: [Option<(&'static str, i64)>; 2],
}

impl Tail {
    pub const EMPTY: Tail = Tail { quantity: None, unit: Unit::Seconds, flags: [None; 3], values: [None; 2] };

    /// Parses `words` against the optional arguments `accepted` (from a table). An unknown or
    /// repeated word is a syntax error.
    pub fn parse<'t>(words: &[&[u8]], accepted: impl Iterator<Item = &'t Arg> + Clone) -> Result<Tail> {
        let mut tail = Tail::EMPTY;
        let mut rest = words.iter();
        while let Some(&word) = rest.next() {
            let arg = accepted.clone().find(|a| match a.kind {
                ArgKind::Flag(token) | ArgKind::Option(token) => word.eq_ignore_ascii_case(token.as_bytes()),
                // A word that does not start with a letter is the bare quantity.
                ArgKind::Quantity => !word.first().is_some_and(u8::is_ascii_alphabetic),
                _ => false,
            });
            match arg.map(|a| &a.kind) {
                Some(ArgKind::Quantity) if tail.quantity.is_none() => tail.quantity = Some(integer(word)?),
                Some(ArgKind::Flag("MS")) if tail.unit == Unit::Seconds => tail.unit = Unit::Millis,
                Some(&ArgKind::Flag(token)) if token != "MS" && !tail.has(token) => {
                    let slot = tail.flags.iter_mut().find(|f| f.is_none()).ok_or_else(|| Error::Syntax)?;
                    *slot = Some(token);
                }
                Some(ArgKind::Option("QUANTITY")) if tail.quantity.is_none() => {
                    tail.quantity = Some(integer(rest.next().ok_or_else(|| Error::Syntax)?)?);
                }
                Some(&ArgKind::Option(token)) if token != "QUANTITY" && tail.value(token).is_none() => {
                    let value = integer(rest.next().ok_or_else(|| Error::Syntax)?)?;
                    let slot = tail.values.iter_mut().find(|v| v.is_none()).ok_or_else(|| Error::Syntax)?;
                    *slot = Some((token, value));
                }
                _ => return Err(Error::Syntax),
            }
        }
        Ok(tail)
    }

    /// Whether the flag `token` was given.
    pub fn has(&self, token: &str) -> bool {
        self.flags.iter().flatten().any(|&t| t == token)
    }

    /// The integer given with the option `token`, if any.
    pub fn value(&self, token: &str) -> Option<i64> {
        self.values.iter().flatten().find(|(t, _)| *t == token).map(|&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Command = Command {
        name: "cl.x",
        summary: "",
        complexity: "",
        since: "",
        flags: "",
        acl_categories: "",
        keys: Keys::One,
        args: &[
            Arg::integer("limit"),
            Arg::duration("window"),
            Arg::QUANTITY,
            Arg::MS,
            Arg::option("precision", "PRECISION"),
        ],
    };

    #[test]
    fn arity_and_max_words_derive_from_the_table() {
        assert_eq!(PLAIN.arity(), -4);
        assert_eq!(PLAIN.max_words(), Some(1 + 2 + 1 + 1 + 2));
        const EXACT: Command = Command { args: &[Arg::string("id")], ..PLAIN };
        assert_eq!(EXACT.arity(), 3);
    }

    #[test]
    fn parses_positional_and_tail_in_any_order() {
        let p = Parsed::parse(&PLAIN, &[b"k", b"10", b"60", b"ms", b"PRECISION", b"5", b"-3"]).unwrap();
        assert_eq!((p.key, p.integer(0), p.integer(1)), (&b"k"[..], 10, 60));
        assert_eq!((p.tail.quantity, p.tail.unit, p.tail.value("PRECISION")), (Some(-3), Unit::Millis, Some(5)));
    }

    #[test]
    fn rejects_what_the_table_does_not_allow() {
        let parse = |words: &[&[u8]]| Parsed::parse(&PLAIN, words).map(|_| ());
        assert_eq!(parse(&[b"k", b"1"]), Err(Error::WrongArity("cl.x")));
        assert_eq!(parse(&[b"k", b"1", b"1", b"1", b"MS", b"PRECISION", b"1", b"x"]), Err(Error::WrongArity("cl.x")));
        assert_eq!(parse(&[b"k", b"1", b"1", b"MS", b"MS"]), Err(Error::Syntax));
        assert_eq!(parse(&[b"k", b"1", b"1", b"1", b"2"]), Err(Error::Syntax));
        assert_eq!(parse(&[b"k", b"1", b"1", b"PRECISION"]), Err(Error::Syntax));
        assert_eq!(parse(&[b"k", b"1", b"1", b"BLOCK"]), Err(Error::Syntax));
        assert_eq!(parse(&[b"k", b"1.5", b"1"]), Err(Error::NotAnInteger));
        assert_eq!(parse(&[b"k", b"1", b"1", b"1.5"]), Err(Error::NotAnInteger));
    }
}
