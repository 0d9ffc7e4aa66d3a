//! CL.QUOTA as plainly as the contract states it: the calendar through `jiff`'s own civil
//! arithmetic (not the module's day-number arithmetic), and a count on a key expiring at its
//! period's end, in i128 milliseconds/nanoseconds.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, ToSpan};

use crate::calendar::{Calendar, Per, Zone};

fn tz(zone: Zone) -> TimeZone {
    match zone {
        Zone::Fixed(s) => TimeZone::fixed(jiff::tz::Offset::from_seconds(s).expect("offset")),
        Zone::Named(name) => TimeZone::get(name).expect("bundled zone"),
    }
}

fn clamp_day(y: i16, m: i8, d: i8) -> Date {
    let first = Date::new(y, m, 1).expect("date");
    Date::new(y, m, d.min(first.days_in_month())).expect("date")
}

/// The period `[start, end)` (Unix ms) of `calendar` holding `now_ms`.
pub fn period(calendar: &Calendar, now_ms: i64) -> (i64, i64) {
    let tz = tz(calendar.zone);
    let local = Timestamp::from_millisecond(now_ms).unwrap().to_zoned(tz.clone()).datetime();
    let anchor = match calendar.anchor_ms {
        Some(a) => Timestamp::from_millisecond(a).unwrap().to_zoned(tz.clone()).datetime(),
        None => DateTime::new(2001, 1, 1, 0, 0, 0, 0).unwrap(), // a Monday, January 1st
    };
    let time = anchor.time();
    if let Some(unit) = match calendar.per {
        Per::Minute => Some(60_000),
        Per::Hour => Some(3_600_000),
        _ => None,
    } {
        return real_time(&tz, unit, time, now_ms);
    }
    // The unit holding `local`, as its first civil instant, and one unit as a span.
    let (base, unit): (DateTime, Span) = match calendar.per {
        Per::Minute => (local.date().at(local.hour(), local.minute(), 0, 0), 1.minute()),
        Per::Hour => (local.date().at(local.hour(), 0, 0, 0), 1.hour()),
        Per::Day => (local.date().at(0, 0, 0, 0), 1.day()),
        Per::Week => {
            let back = i64::from(local.date().weekday().to_monday_zero_offset());
            (local.date().checked_sub(back.days()).unwrap().at(0, 0, 0, 0), 1.week())
        }
        Per::Month => (local.date().first_of_month().at(0, 0, 0, 0), 1.month()),
        Per::Year => (Date::new(local.year(), 1, 1).unwrap().at(0, 0, 0, 0), 1.year()),
    };
    let start_of = |k: i64| -> i64 {
        let u = base.checked_add(unit.checked_mul(k).unwrap()).unwrap();
        let civil = match calendar.per {
            Per::Minute => u.date().at(u.hour(), u.minute(), time.second(), time.subsec_nanosecond()),
            Per::Hour => u.date().at(u.hour(), time.minute(), time.second(), time.subsec_nanosecond()),
            Per::Day => u.date().to_datetime(time),
            Per::Week => {
                let d = u.date().checked_add(i64::from(anchor.weekday().to_monday_zero_offset()).days()).unwrap();
                d.to_datetime(time)
            }
            Per::Month => clamp_day(u.year(), u.month(), anchor.day()).to_datetime(time),
            Per::Year => clamp_day(u.year(), anchor.month(), anchor.day()).to_datetime(time),
        };
        tz.to_ambiguous_zoned(civil).compatible().unwrap().timestamp().as_millisecond()
    };
    let mut k = 0;
    while start_of(k) > now_ms {
        k -= 1;
    }
    while start_of(k + 1) <= now_ms {
        k += 1;
    }
    (start_of(k), start_of(k + 1))
}

/// A minute or hour as the contract states it, by brute force: a period begins at every
/// instant the zone's clock reads the anchor's position within the unit, and at every
/// change of offset by other than whole units; no other instant begins one.
fn real_time(tz: &TimeZone, unit: i64, time: jiff::civil::Time, now_ms: i64) -> (i64, i64) {
    let ms_in_unit = |t: jiff::civil::Time| {
        let ms = i64::from(t.second()) * 1000 + i64::from(t.subsec_nanosecond()) / 1_000_000;
        if unit == 60_000 { ms } else { i64::from(t.minute()) * 60_000 + ms }
    };
    let position = ms_in_unit(time);
    let offset = |t: i64| i64::from(tz.to_offset(Timestamp::from_millisecond(t).unwrap()).seconds()) * 1000;
    let begins = |t: i64| {
        let reads =
            ms_in_unit(Timestamp::from_millisecond(t).unwrap().to_zoned(tz.clone()).datetime().time()) == position;
        reads || (offset(t) - offset(t - 1)).rem_euclid(unit) != 0
    };
    // Offsets are whole seconds: readings fall on the position's millisecond of a second,
    // changes of offset on whole seconds. Both kinds of candidates, down from now and up.
    let sub = position % 1000;
    let candidates = |t: i64| [t - (t - sub).rem_euclid(1000), t - t.rem_euclid(1000)];
    let mut start = i64::MIN;
    let mut t = now_ms;
    while start == i64::MIN {
        assert!(now_ms - t <= unit, "a period longer than its unit");
        start = candidates(t).into_iter().filter(|&c| c <= now_ms && begins(c)).max().unwrap_or(i64::MIN);
        t -= 1000;
    }
    let mut end = i64::MAX;
    let mut t = now_ms + 1;
    while end == i64::MAX {
        assert!(t - now_ms <= unit + 1000, "a period longer than its unit");
        end = candidates(t + 999).into_iter().filter(|&c| c > now_ms && begins(c)).min().unwrap_or(i64::MAX);
        t += 1000;
    }
    (start, end)
}

/// A quota's key: its count and expiry in ns (`expires_at` 0: no key).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Model {
    pub count: i128,
    pub expires_at: i128,
}

impl Model {
    /// A call at `now` (ns) under a quota of `limit` whose current period ends at `end` (ns):
    /// a take, or a `debit`.
    pub fn call(&mut self, now: i128, limit: i128, end: i128, q: i128, debit: bool) -> [i128; 5] {
        if self.expires_at <= now {
            *self = Model::default();
        }
        let live = self.expires_at > now;
        // A live key's later expiry stands: the count ends at the later of the two.
        let end = if live { end.max(self.expires_at) } else { end };
        let count = if live { self.count } else { 0 };
        let moved = live && self.expires_at != end;
        let reply = |limited: bool, count: i128, retry: i128| {
            [limited as i128, limit, (limit - count).clamp(0, limit), retry, if count > 0 { end - now } else { 0 }]
        };
        let store = |m: &mut Model, count: i128| *m = Model { count, expires_at: end };
        if q < 0 {
            if !live {
                return reply(false, 0, -1);
            }
            let c = (count + q).max(0);
            if c == 0 {
                *self = Model::default()
            } else {
                store(self, c)
            }
            return reply(false, c, -1);
        }
        if debit && q > 0 {
            // Counted whatever the limit says.
            let fitted = count + q <= limit;
            store(self, count + q);
            return reply(!fitted, count + q, if fitted || q > limit { -1 } else { end - now });
        }
        if q > limit || count + q > limit {
            if moved && q != 0 {
                store(self, count);
            }
            return reply(true, count, if q > limit { -1 } else { end - now });
        }
        if q == 0 {
            return reply(false, count, -1);
        }
        store(self, count + q);
        reply(false, count + q, -1)
    }
}
