/* The cost floor of a limiter command (SPEC, "Performance targets"): the least key work any
 * module command that keeps a limiter's state must do. `FLOOR.TOUCH key` reads the key's
 * string value in place, rewrites it in place (a 19-digit integer, like a TAT), sets its
 * absolute expiry, replicates `SET key value PXAT ms` once and replies five integers; nothing
 * else (`FLOOR.APPEND key`, below: the same for an exact log). bench/run.sh builds it against
 * the redis-module crate's redismodule.h and measures every command next to it. */
#include <string.h>
#include <sys/time.h>
#include "redismodule.h"

/* The key opened for writing, its type in `type`; NULL, the WRONGTYPE error replied, when it
 * holds something other than a string. */
static RedisModuleKey *OpenString(RedisModuleCtx *ctx, RedisModuleString *name, int *type) {
    RedisModuleKey *key = RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
    *type = RedisModule_KeyType(key);
    if (*type != REDISMODULE_KEYTYPE_EMPTY && *type != REDISMODULE_KEYTYPE_STRING) {
        RedisModule_CloseKey(key);
        RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return NULL;
    }
    return key;
}

/* The string value in place (`got` bytes; none for a missing key). */
static const char *Read(RedisModuleKey *key, int type, int mode, size_t *got) {
    *got = 0;
    return type == REDISMODULE_KEYTYPE_STRING ? RedisModule_StringDMA(key, got, mode) : NULL;
}

/* Sets the key's absolute expiry, ten minutes from now, closes it and returns the expiry (ms). */
static long long ExpireAndClose(RedisModuleKey *key) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    long long at = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000 + 600000;
    RedisModule_SetAbsExpire(key, at);
    RedisModule_CloseKey(key);
    return at;
}

/* A limiter's reply: five integers, the last one what was read. */
static int ReplyFive(RedisModuleCtx *ctx, long long read) {
    RedisModule_ReplyWithArray(ctx, 5);
    RedisModule_ReplyWithLongLong(ctx, 0);
    RedisModule_ReplyWithLongLong(ctx, 10);
    RedisModule_ReplyWithLongLong(ctx, 9);
    RedisModule_ReplyWithLongLong(ctx, -1);
    RedisModule_ReplyWithLongLong(ctx, read);
    return REDISMODULE_OK;
}

static int Touch(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    static const char value[] = "1795354456188603542";
    const size_t len = sizeof(value) - 1;
    int type;
    RedisModuleKey *key = OpenString(ctx, argv[1], &type);
    if (key == NULL) return REDISMODULE_OK;
    size_t got;
    const char *old = Read(key, type, REDISMODULE_READ, &got);
    long long read = got > 0 ? old[0] : 0; /* the value is read */
    if (got != len) RedisModule_StringTruncate(key, len);
    char *buf = RedisModule_StringDMA(key, &got, REDISMODULE_WRITE);
    memcpy(buf, value, len);
    long long at = ExpireAndClose(key);
    RedisModule_Replicate(ctx, "SET", "sbcl", argv[1], value, len, "PXAT", at);
    return ReplyFive(ctx, read);
}

/* `FLOOR.APPEND key`: the floor of a command keeping an exact log (CL.WINDOW). It reads the key's
 * string value in place, appends one 8-byte entry (growing the string as Redis grows strings,
 * to twice its length, never trimming it back), sets its absolute expiry, replicates once
 * (`APPEND key entry`) and replies five integers; nothing else. */
static int Append(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    static const char entry[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int type;
    RedisModuleKey *key = OpenString(ctx, argv[1], &type);
    if (key == NULL) return REDISMODULE_OK;
    size_t got;
    const char *old = Read(key, type, REDISMODULE_WRITE, &got);
    long long read = got > 0 ? old[got - 1] : 0; /* the newest entry is read */
    RedisModule_StringTruncate(key, got + sizeof(entry));
    size_t len = 0;
    char *buf = RedisModule_StringDMA(key, &len, REDISMODULE_WRITE);
    memcpy(buf + got, entry, sizeof(entry));
    ExpireAndClose(key);
    RedisModule_Replicate(ctx, "APPEND", "sb", argv[1], entry, sizeof(entry));
    return ReplyFive(ctx, read);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "floor", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.touch", Touch, "write deny-oom fast", 1, 1, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.append", Append, "write deny-oom fast", 1, 1, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
