//! Registration: each command from its table (`redis_throttle_core::command::Command`), then (Redis
//! 7.0+) its arity, key specs and documentation for `COMMAND INFO`, `COMMAND DOCS`,
//! `COMMAND GETKEYS`, Cluster routing and ACL key patterns, then (7.2+) its ACL categories.

use std::ffi::{CString, c_char};
use std::os::raw::c_int;
use std::ptr::{null, null_mut};

use redis_module::Context;
use redis_module::raw::{
    self, RedisModuleCommandArg, RedisModuleCommandInfo, RedisModuleCommandInfoVersion, RedisModuleCommandKeySpec,
};
use redis_throttle_core::command::{Arg, ArgKind, Command, Keys};
use redis_throttle_core::limiter::Algorithm;

use crate::counters::Counters;
use crate::dispatch::Entry;

/// A command as the module registers it: its table, its entry point and, for a command that
/// decides limiters, its INFO counters.
pub struct Registered {
    pub table: &'static Command,
    pub entry: Entry,
    pub counters: Option<&'static Counters>,
}

/// A command's registration from its handler and its table, with its own INFO counters
/// (`INFO throttle` lists them under the command's name): errors are counted by the dispatch,
/// and the handler counts each successful call once with `call.count(Class::of(…))` (and
/// calls `operate::denied` for each denied key). `uncounted` for a command that decides no
/// limiter (CL.TOP).
macro_rules! registered {
    ($handler:expr, $table:expr) => {{
        static COUNTERS: $crate::counters::Counters = $crate::counters::Counters::new();
        $crate::register::Registered {
            table: $table,
            entry: $crate::dispatch::entry!($handler, $table, Some(&COUNTERS)),
            counters: Some(&COUNTERS),
        }
    }};
    ($handler:expr, $table:expr, uncounted) => {{
        $crate::register::Registered {
            table: $table,
            entry: $crate::dispatch::entry!($handler, $table, None),
            counters: None,
        }
    }};
}
pub(crate) use registered;

/// C strings made for one registration; the server copies what it keeps.
#[derive(Default)]
struct Strings(Vec<CString>);

impl Strings {
    fn c(&mut self, s: &str) -> Result<*const c_char, String> {
        let s = CString::new(s).map_err(|e| e.to_string())?;
        let ptr = s.as_ptr();
        self.0.push(s); // the heap buffer does not move with the CString
        Ok(ptr)
    }
}

pub fn register(ctx: &Context, command: &Registered) -> Result<(), String> {
    let table = command.table;
    let mut strings = Strings::default();
    let name = strings.c(table.name)?;
    // SAFETY: a copy of a function pointer the server filled in before `init`.
    let create = unsafe { raw::RedisModule_CreateCommand }.ok_or("no CreateCommand")?;
    // The legacy key range; key specs below describe every key exactly (7.0+).
    let (first, last, step) = match table.keys {
        Keys::None => (0, 0, 0),
        Keys::One => (1, 1, 1),
        Keys::Counted { .. } => (0, 0, 0),
    };
    // Counted keys: the server asks the command where they are (Redis 7.0 routes Cluster
    // calls by that, not by key specs).
    let flags = match table.keys {
        Keys::Counted { .. } => strings.c(&format!("{} getkeys-api", table.flags))?,
        _ => strings.c(table.flags)?,
    };
    // SAFETY: a valid context; the strings live until the call returns.
    let status = unsafe { create(ctx.ctx, name, Some(command.entry), flags, first, last, step) };
    if status != raw::Status::Ok as c_int {
        return Err("CreateCommand failed".into());
    }
    // SAFETY: copies of function pointers; `None` before Redis 7.0.
    let (Some(get_command), Some(set_info)) =
        (unsafe { raw::RedisModule_GetCommand }, unsafe { raw::RedisModule_SetCommandInfo })
    else {
        return Ok(()); // Redis 6: no command info API; the key positions above still route.
    };
    // SAFETY: a valid context and the name just registered.
    let registered = unsafe { get_command(ctx.ctx, name) };
    if registered.is_null() {
        return Err("GetCommand failed".into());
    }
    let version = RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: size_of::<RedisModuleCommandKeySpec>(),
        sizeof_arg: size_of::<RedisModuleCommandArg>(),
    };
    let mut key_specs: Vec<RedisModuleCommandKeySpec> = Vec::new();
    if table.keys != Keys::None {
        // SAFETY: an all-zero key spec is a valid (empty) value of this C struct.
        let mut key: RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
        key.flags =
            u64::from(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE);
        key.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        key.bs.index.pos = 1;
        match table.keys {
            Keys::Counted { .. } => {
                // `numkeys` at argument 1, the keys right after it (like ZINTERCARD).
                key.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
                key.fk.keynum.keynumidx = 0;
                key.fk.keynum.firstkey = 1;
                key.fk.keynum.keystep = 1;
            }
            _ => {
                key.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
                key.fk.range.lastkey = 0;
                key.fk.range.keystep = 1;
                key.fk.range.limit = 0;
            }
        }
        key_specs.push(key);
    }
    // SAFETY: as above; the terminator.
    key_specs.push(unsafe { std::mem::zeroed() });

    // Argument vectors, nested ones first, all alive until SetCommandInfo returns.
    let mut nested: Vec<Vec<RedisModuleCommandArg>> = Vec::new();
    let mut args = match table.keys {
        Keys::None => Vec::new(),
        Keys::One => vec![key_arg(&mut strings, false)?],
        Keys::Counted { .. } => vec![
            plain(&mut strings, "numkeys", raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER)?,
            key_arg(&mut strings, true)?,
        ],
    };
    for arg in table.args {
        args.push(describe(&mut strings, &mut nested, arg)?);
    }
    // SAFETY: as above; the terminator.
    args.push(unsafe { std::mem::zeroed() });
    let info = RedisModuleCommandInfo {
        version: &version,
        summary: strings.c(table.summary)?,
        complexity: strings.c(table.complexity)?,
        since: strings.c(table.since)?,
        history: null_mut(),
        tips: null(),
        arity: table.arity(),
        key_specs: key_specs.as_mut_ptr(),
        args: args.as_mut_ptr(),
    };
    // SAFETY: every pointer in `info` is valid until the call returns; Redis copies what it keeps.
    if unsafe { set_info(registered, &info) } != raw::Status::Ok as c_int {
        return Err("SetCommandInfo rejected the command info".into());
    }
    // SAFETY: a copy of a function pointer; `None` before Redis 7.2.
    if let (Some(set_categories), false) =
        (unsafe { raw::RedisModule_SetCommandACLCategories }, table.acl_categories.is_empty())
    {
        let categories = strings.c(table.acl_categories)?;
        // SAFETY: the command just registered and a C string.
        if unsafe { set_categories(registered, categories) } != raw::Status::Ok as c_int {
            return Err("SetCommandACLCategories failed".into());
        }
    }
    Ok(())
}

fn plain(
    strings: &mut Strings,
    name: &str,
    type_: raw::RedisModuleCommandArgType,
) -> Result<RedisModuleCommandArg, String> {
    // SAFETY: an all-zero argument is a valid (empty) value of this C struct.
    let mut arg: RedisModuleCommandArg = unsafe { std::mem::zeroed() };
    arg.name = strings.c(name)?;
    arg.type_ = type_;
    arg.key_spec_index = -1;
    Ok(arg)
}

fn key_arg(strings: &mut Strings, multiple: bool) -> Result<RedisModuleCommandArg, String> {
    let mut arg = plain(strings, "key", raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY)?;
    arg.key_spec_index = 0;
    if multiple {
        arg.flags = raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
    }
    Ok(arg)
}

/// One argument of a table as `COMMAND DOCS` describes it.
fn describe(
    strings: &mut Strings,
    nested: &mut Vec<Vec<RedisModuleCommandArg>>,
    a: &Arg,
) -> Result<RedisModuleCommandArg, String> {
    use raw::{
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER as INTEGER,
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF as ONEOF,
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN as TOKEN,
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING as STRING,
    };
    let (type_, token) = match a.kind {
        ArgKind::Integer | ArgKind::Duration | ArgKind::Quantity => (INTEGER, None),
        ArgKind::String => (STRING, None),
        ArgKind::Flag(token) => (TOKEN, Some(token)),
        ArgKind::Option(token) => (INTEGER, Some(token)),
        ArgKind::Text(token) => (STRING, Some(token)),
        ArgKind::Spec(_) => (ONEOF, None),
    };
    let mut arg = plain(strings, a.name, type_)?;
    if let Some(token) = token {
        arg.token = strings.c(token)?;
    }
    arg.flags = (if a.optional { raw::REDISMODULE_CMD_ARG_OPTIONAL } else { 0 }
        | if a.multiple { raw::REDISMODULE_CMD_ARG_MULTIPLE } else { 0 }) as c_int;
    if let ArgKind::Spec(_) = a.kind {
        // One block per algorithm: its word, then its own command's parameters and options.
        let blocks = Algorithm::ALL
            .iter()
            .map(|&algorithm| spec_block(strings, nested, algorithm))
            .collect::<Result<Vec<_>, _>>()?;
        arg.subargs = terminated(nested, blocks);
    }
    Ok(arg)
}

/// `WORD params… [options…] [QUANTITY q]`, the block of one algorithm in a CL.ALL spec.
fn spec_block(
    strings: &mut Strings,
    nested: &mut Vec<Vec<RedisModuleCommandArg>>,
    algorithm: Algorithm,
) -> Result<RedisModuleCommandArg, String> {
    let word = algorithm.word().to_ascii_lowercase();
    let mut block = plain(strings, &word, raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK)?;
    let mut token = plain(strings, &word, raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN)?;
    token.token = strings.c(algorithm.word())?;
    let mut children = vec![token];
    for arg in algorithm.params().chain(algorithm.options()).chain([&Arg::QUANTITY_OPTION]) {
        children.push(describe(strings, nested, arg)?);
    }
    block.subargs = terminated(nested, children);
    Ok(block)
}

/// `args` with its terminator, kept alive in `nested`; the pointer Redis reads them from.
fn terminated(
    nested: &mut Vec<Vec<RedisModuleCommandArg>>,
    mut args: Vec<RedisModuleCommandArg>,
) -> *mut RedisModuleCommandArg {
    // SAFETY: as in `plain`; the terminator.
    args.push(unsafe { std::mem::zeroed() });
    let ptr = args.as_mut_ptr(); // the heap buffer does not move with the Vec
    nested.push(args);
    ptr
}
