//! Registration: the command itself, then (Redis 7.0+) its arity, key spec and documentation
//! for `COMMAND INFO`, `COMMAND DOCS`, `COMMAND GETKEYS`, Cluster routing and ACL key
//! patterns, then (7.2+) its ACL categories.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::ptr::{null, null_mut};

use redis_module::Context;
use redis_module::raw::{self, RedisModuleCommandArg, RedisModuleCommandInfo, RedisModuleCommandInfoVersion, RedisModuleCommandKeySpec};

use crate::commands::{ArgKind, Spec};

const SINCE: &CStr = c"1.0.0";

pub fn register(ctx: &Context, spec: &Spec) -> Result<(), String> {
    let name = CString::new(spec.name).map_err(|e| e.to_string())?;
    let create = unsafe { raw::RedisModule_CreateCommand }.ok_or("no CreateCommand")?;
    let key_pos = c_int::from(spec.has_key);
    let status = unsafe { create(ctx.ctx, name.as_ptr(), Some(spec.entry), spec.flags.as_ptr(), key_pos, key_pos, key_pos) };
    if status != raw::Status::Ok as c_int {
        return Err("CreateCommand failed".into());
    }
    let (Some(get_command), Some(set_info)) = (unsafe { raw::RedisModule_GetCommand }, unsafe { raw::RedisModule_SetCommandInfo }) else {
        return Ok(()); // Redis 6: no command info API; the key positions above still route.
    };
    let command = unsafe { get_command(ctx.ctx, name.as_ptr()) };
    if command.is_null() {
        return Err("GetCommand failed".into());
    }
    let version = RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: size_of::<RedisModuleCommandKeySpec>(),
        sizeof_arg: size_of::<RedisModuleCommandArg>(),
    };
    let mut key_specs: Vec<RedisModuleCommandKeySpec> = Vec::new();
    if spec.has_key {
        let mut key: RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
        key.flags = u64::from(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE);
        key.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        key.bs.index.pos = 1;
        key.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        key.fk.range.lastkey = 0;
        key.fk.range.keystep = 1;
        key.fk.range.limit = 0;
        key_specs.push(key);
    }
    key_specs.push(unsafe { std::mem::zeroed() }); // terminator
    let mut args: Vec<RedisModuleCommandArg> = spec.args.iter().map(|a| {
        let mut arg: RedisModuleCommandArg = unsafe { std::mem::zeroed() };
        arg.name = a.name.as_ptr();
        arg.key_spec_index = -1;
        arg.flags = if a.optional { raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int } else { 0 };
        arg.type_ = match a.kind {
            ArgKind::Key => {
                arg.key_spec_index = 0;
                raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY
            }
            ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            ArgKind::Token(token) => {
                arg.token = token.as_ptr();
                raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN
            }
            ArgKind::TokenInteger(token) => {
                arg.token = token.as_ptr();
                raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER
            }
        };
        arg
    }).collect();
    args.push(unsafe { std::mem::zeroed() }); // terminator
    let info = RedisModuleCommandInfo {
        version: &version,
        summary: spec.summary.as_ptr(),
        complexity: spec.complexity.as_ptr(),
        since: SINCE.as_ptr(),
        history: null_mut(),
        tips: null(),
        arity: spec.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: args.as_mut_ptr(),
    };
    // Redis copies everything it keeps, so the vectors may go after this call.
    if unsafe { set_info(command, &info) } != raw::Status::Ok as c_int {
        return Err("SetCommandInfo rejected the command info".into());
    }
    if spec.flags.to_bytes().starts_with(b"write") {
        if let Some(set_categories) = unsafe { raw::RedisModule_SetCommandACLCategories } {
            if unsafe { set_categories(command, c"write fast".as_ptr()) } != raw::Status::Ok as c_int {
                return Err("SetCommandACLCategories failed".into());
            }
        }
    }
    Ok(())
}
