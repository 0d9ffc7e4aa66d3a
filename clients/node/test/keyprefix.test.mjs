// An ioredis client with a keyPrefix: ioredis prefixes the keys of the commands it knows (SET,
// DEL, FCALL, EVAL) and not those of CL.*, so the package prefixes every key it sends itself.
// Each store's blocks, deletes, resets and decisions address the same keys, each carrying the
// prefix exactly once, on the module, the twin and a cluster.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { RateLimiterRes } from 'rate-limiter-flexible';
import { Throttle } from 'redis-throttle-js';
import { RedisThrottleStore } from 'redis-throttle-js/express-rate-limit';
import { redisThrottleStore } from 'redis-throttle-js/fastify';
import { RedisThrottleStorage } from 'redis-throttle-js/nestjs';
import { RateLimiterRedisThrottle, RateLimiterUnionAtomic } from 'redis-throttle-js/rate-limiter-flexible';
import { fastifyApp } from './fastify-app.mjs';
import { nestApp } from './nest-app.mjs';
import { KINDS, SLOW, atLeast, closeAll, closeServers, ioredis, serve, unique } from './common.mjs';

after(closeAll);
after(closeServers);

/** Every key of the server(s) whose name contains `marker`. */
async function keysWith(client, marker) {
  const nodes = typeof client.nodes === 'function' ? client.nodes('master') : [client];
  const all = [];
  for (const node of nodes) {
    let cursor = '0';
    do {
      // (`scan` of ioredis applies no prefix to MATCH; the names come back as the server holds them.)
      const [next, keys] = await node.call('SCAN', cursor, 'MATCH', `*${marker}*`, 'COUNT', '1000');
      cursor = next;
      all.push(...keys);
    } while (cursor !== '0');
  }
  return all.sort();
}

const rejected = (p) =>
  p.then(
    () => assert.fail('admitted'),
    (e) => e,
  );

for (const kind of KINDS) {
  describe(`ioredis keyPrefix on ${kind}`, () => {
    test('rate-limiter-flexible: block, consume, delete and get address the same prefixed keys', async () => {
      const marker = unique('kp');
      const prefix = `app${marker}:`;
      const client = await ioredis(kind, { keyPrefix: prefix });
      for (const algorithm of ['counter', 'gcra']) {
        const limiter = new RateLimiterRedisThrottle({
          ...SLOW,
          storeClient: client,
          keyPrefix: `rlf-${algorithm}`,
          points: 3,
          duration: 60,
          algorithm,
        });
        assert.equal((await limiter.consume('u1')).remainingPoints, 2, algorithm);
        await limiter.block('u1', 30);
        const blocked = await rejected(limiter.consume('u1'));
        assert.ok(
          blocked instanceof RateLimiterRes && blocked.msBeforeNext > 29_000,
          `${algorithm}: admitted after block(): ${blocked}`,
        );
        assert.equal(await limiter.delete('u1'), true, algorithm);
        assert.equal(await limiter.get('u1'), null, algorithm);
        assert.equal((await limiter.consume('u1')).remainingPoints, 2, `${algorithm}: delete() reset nothing`);
      }
      // CL.ALL (one slot: the prefixed keys' in a cluster).
      const a = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: client,
        keyPrefix: 'ua',
        points: 2,
        duration: 60,
      });
      const b = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: client,
        keyPrefix: 'ub',
        points: 5,
        duration: 60,
      });
      const union = new RateLimiterUnionAtomic(a, b);
      await union.consume('{u2}');
      await union.consume('{u2}');
      await rejected(union.consume('{u2}'));
      assert.equal((await b.get('{u2}')).consumedPoints, 2);
      const keys = await keysWith(client, marker);
      assert.ok(keys.length >= 4, JSON.stringify(keys));
      for (const k of keys)
        assert.ok(
          k.startsWith(prefix) && !k.slice(prefix.length).includes(marker),
          `a key without the prefix exactly once: ${k}`,
        );
    });

    test('express-rate-limit through sendCommand (ioredis call): resetKey and getKey reach the counted key, prefixed as this ioredis prefixes `call`', async () => {
      const marker = unique('kpe');
      const prefix = `app${marker}:`;
      const client = await ioredis(kind, { keyPrefix: prefix });
      // ioredis 5.0.0's `call` applies no keyPrefix (later versions do): the store follows it.
      const prefixes = (await client.call('EVAL', 'return KEYS[1]', '1', 'x')) !== 'x';
      for (const algorithm of ['counter', 'gcra']) {
        const limiter = rateLimit({
          windowMs: 60_000,
          limit: 2,
          validate: false,
          keyGenerator: () => 'u1',
          store: new RedisThrottleStore({
            ...SLOW,
            prefix: `rl${marker}-${algorithm}:`,
            algorithm,
            sendCommand: (cmd, ...args) => client.call(cmd, ...args),
          }),
        });
        const app = express();
        app.use(limiter);
        app.get('/', (_req, res) => res.send('ok'));
        const url = await serve(app);
        const statuses = [];
        for (let i = 0; i < 3; i++) statuses.push((await fetch(url)).status);
        assert.deepEqual(statuses, [200, 200, 429], algorithm);
        // Every hit counted, the denied one too (as MemoryStore counts): the fixed window reads
        // its count; GCRA's peek, at most its limit.
        assert.equal((await limiter.getKey('u1')).totalHits, algorithm === 'counter' ? 3 : 2, algorithm);
        await limiter.resetKey('u1');
        assert.equal(await limiter.getKey('u1'), undefined, `${algorithm}: resetKey reset nothing`);
        assert.equal((await fetch(url)).status, 200, algorithm);
      }
      const keys = await keysWith(client, marker);
      assert.ok(keys.length >= 2, JSON.stringify(keys));
      for (const k of keys) {
        const rest = prefixes ? k.slice(prefix.length) : k;
        assert.ok(
          (!prefixes || k.startsWith(prefix)) && rest.startsWith(`rl${marker}-`) && !rest.slice(1).includes(prefix),
          `${k}: not prefixed as ioredis's call prefixes (${prefixes})`,
        );
      }
    });

    test('NestJS blocks and Fastify bans, and Throttle itself, under the prefix', async () => {
      const marker = unique('kpn');
      const prefix = `app${marker}:`;
      const client = await ioredis(kind, { keyPrefix: prefix });
      // (@nestjs/throttler 5 has no blockDuration: its counter's window outlives the test instead.)
      const v6 = atLeast('@nestjs/throttler', '6.0.0');
      const nest = await nestApp(new RedisThrottleStorage(client, { ...SLOW, algorithm: v6 ? 'gcra' : 'counter' }), [
        { ttl: v6 ? 1000 : 60_000, limit: 1, blockDuration: 20_000 },
      ]);
      const n = [];
      for (let i = 0; i < 3; i++) n.push((await fetch(nest)).status);
      assert.deepEqual(n, [200, 429, 429]);
      const f = await fastifyApp(redisThrottleStore(client, { ...SLOW, algorithm: 'window' }), {
        max: 1,
        timeWindow: 60_000,
        ban: 0,
      });
      const s = [];
      for (let i = 0; i < 3; i++) s.push((await fetch(f)).status);
      assert.deepEqual(s, [200, 403, 403]);
      const t = new Throttle(client, SLOW);
      assert.equal(t.keyPrefix, prefix);
      await t.counter('c', { limit: 5, windowMs: 60_000 });
      assert.equal((await t.count('c')).count, 1);
      assert.equal(Number(await client.get('c')), 1, 'ioredis reads the same key');
      const keys = await keysWith(client, marker);
      assert.ok(keys.length >= 4, JSON.stringify(keys));
      for (const k of keys)
        assert.ok(
          k.startsWith(prefix) && !k.slice(prefix.length).includes(marker),
          `a key without the prefix exactly once: ${k}`,
        );
    });
  });
}
