/* The cost floor of a limiter command (SPEC, "Performance targets"): the least key work any
 * module command that keeps a limiter's state must do. `FLOOR.TOUCH key` reads the key's
 * string value in place, rewrites it in place (a 19-digit integer, like a TAT), sets its
 * absolute expiry, replicates `SET key value PXAT ms` once and replies five integers; nothing
 * else. bench/run.sh builds it against the redis-module crate's redismodule.h and measures
 * every command next to it. */
#include <string.h>
#include <sys/time.h>
#include "redismodule.h"

static int Touch(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    static const char value[] = "1795354456188603542";
    const size_t len = sizeof(value) - 1;
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    int type = RedisModule_KeyType(key);
    if (type != REDISMODULE_KEYTYPE_EMPTY && type != REDISMODULE_KEYTYPE_STRING) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    size_t got = 0;
    long long read = 0;
    if (type == REDISMODULE_KEYTYPE_STRING) {
        const char *old = RedisModule_StringDMA(key, &got, REDISMODULE_READ);
        read = got > 0 ? old[0] : 0; /* the value is read */
    }
    if (got != len) RedisModule_StringTruncate(key, len);
    char *buf = RedisModule_StringDMA(key, &got, REDISMODULE_WRITE);
    memcpy(buf, value, len);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    long long at = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000 + 600000;
    RedisModule_SetAbsExpire(key, at);
    RedisModule_CloseKey(key);
    RedisModule_Replicate(ctx, "SET", "sbcl", argv[1], value, len, "PXAT", at);
    RedisModule_ReplyWithArray(ctx, 5);
    RedisModule_ReplyWithLongLong(ctx, 0);
    RedisModule_ReplyWithLongLong(ctx, 10);
    RedisModule_ReplyWithLongLong(ctx, 9);
    RedisModule_ReplyWithLongLong(ctx, -1);
    RedisModule_ReplyWithLongLong(ctx, read);
    return REDISMODULE_OK;
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "floor", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.touch", Touch, "write deny-oom fast", 1, 1, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
