//! `INFO throttle`: the mode, the tz database's version, each command's counters and the
//! most-denied keys' sketch.

use std::ffi::{CString, c_char};
use std::os::raw::c_int;

use redis_module::raw::{self, RedisModuleInfoCtx};

use crate::api::api;
use crate::counters::Class;
use crate::operate::{top, try_top};

/// `INFO throttle` (also in `INFO modules` and `INFO everything`): the mode, each counted
/// command's counters as `throttle_<command>_<counter>` (`cl.throttle` → `cl_throttle`; its
/// classes, then `debits`), and
/// the sketch's size and error bound.
pub unsafe extern "C" fn info(ctx: *mut RedisModuleInfoCtx, for_crash_report: c_int) {
    let api = api();
    let (Some(section), Some(number), Some(text)) =
        (api.info_add_section, api.info_add_field_long_long, api.info_add_field_cstring)
    else {
        return;
    };
    // SAFETY (every call below): the INFO context the server passed, C strings alive for the call.
    if unsafe { section(ctx, c"".as_ptr()) } != raw::Status::Ok as c_int {
        return; // this section was not asked for
    }
    let mode = if crate::config::shadow() { c"shadow" } else { c"enforce" };
    unsafe { text(ctx, c"mode".as_ptr(), mode.as_ptr()) };
    // CL.QUOTA's time zone rules, compiled in: every server running this build agrees.
    if let Ok(version) = CString::new(redis_throttle_core::calendar::tzdb_version()) {
        unsafe { text(ctx, c"tzdb_version".as_ptr(), version.as_ptr()) };
    }
    let field = |name: String, value: u64| {
        if let Ok(name) = CString::new(name) {
            let name: *const c_char = name.as_ptr();
            unsafe { number(ctx, name, i64::try_from(value).unwrap_or(i64::MAX)) };
        }
    };
    for command in crate::commands::ALL.iter() {
        let Some(counters) = command.counters else { continue };
        let prefix = command.table.name.replace('.', "_");
        let calls = Class::ALL.iter().fold(0u64, |sum, &(class, _)| sum.wrapping_add(counters.get(class)));
        field(format!("{prefix}_calls"), calls);
        for (class, name) in Class::ALL {
            field(format!("{prefix}_{name}"), counters.get(class));
        }
        // (Every counted command prints it, so that each has the same fields: 0 for those
        // that take no DEBIT.)
        field(format!("{prefix}_debits"), counters.debits());
    }
    // A crash report may run while the sketch is held: skip it rather than wait.
    let sketch = if for_crash_report != 0 { try_top() } else { Some(top()) };
    if let Some(sketch) = sketch {
        field("top_denials".into(), sketch.total());
        field("top_tracked_keys".into(), sketch.tracked() as u64);
        field("top_error_bound".into(), sketch.error_bound());
    }
}
