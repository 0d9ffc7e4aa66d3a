// The fixed window's plain commands (Throttle.hit: SET NX PX, INCRBY, PTTL in one MULTI/EXEC),
// which the express-rate-limit, rate-limiter-flexible and Fastify stores send on a server with
// only the Functions twin: the same bytes and absolute expiry as CL.COUNTER, keys interchangeable
// with the module, another application's key refused untouched, routed by slot in a cluster, and
// no FCALL on the stores' fixed-window path.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import Fastify from 'fastify';
import fastifyRateLimit from '@fastify/rate-limit';
import { Throttle, ThrottleError } from 'redis-throttle-js';
import { RedisThrottleStore } from 'redis-throttle-js/express-rate-limit';
import { RateLimiterRedisThrottle } from 'redis-throttle-js/rate-limiter-flexible';
import { redisThrottleStore } from 'redis-throttle-js/fastify';
import { RedisThrottleStorage } from 'redis-throttle-js/nestjs';
import { nestApp } from './nest-app.mjs';
import * as redis from 'redis';
import { SLOW, ports, burst, closeAll, closeServers, counting, ioredis, nodeRedis, serve, unique } from './common.mjs';

after(closeAll);
after(closeServers);

const LIBS = [
  ['node-redis', nodeRedis, (c, args) => c.sendCommand(args)],
  ['ioredis', ioredis, (c, args) => c.call(args[0], ...args.slice(1))],
];

for (const [lib, connect, send] of LIBS) {
  describe(`Throttle.hit through ${lib}`, () => {
    test('stores the bytes and the absolute expiry CL.COUNTER stores, and the module reads its keys (and back)', async () => {
      const c = await connect('module');
      const raw = (args) => send(c, args);
      const t = new Throttle(c, SLOW);
      for (const [windowMs, quantity] of [
        [1500, 1],
        [60_000, 3],
        [2_000_000, 7],
      ]) {
        const plain = unique('plain');
        const mod = unique('mod');
        const before = Number(await raw(['PEXPIRETIME', mod])); // -2: no key yet
        assert.equal(before, -2);
        const [h] = await Promise.all([
          t.hit(plain, windowMs, quantity),
          raw(['CL.COUNTER', mod, '1000', String(windowMs), String(quantity), 'MS']),
        ]);
        assert.equal(h.count, quantity);
        assert.ok(h.ttlMs > windowMs - 1000 && h.ttlMs <= windowMs, `ttl ${h.ttlMs}`);
        assert.equal(String(await raw(['GET', plain])), String(await raw(['GET', mod])));
        // DUMP: the serialized value (payload, RDB version, checksum) is byte for byte the same.
        const dump = async (k) =>
          lib === 'ioredis' ? c.dumpBuffer(k) : c.sendCommand(['DUMP', k], { returnBuffers: true });
        assert.ok(Buffer.from(await dump(plain)).equals(Buffer.from(await dump(mod))), 'DUMP differs');
        // The absolute expiry: both are "now + window" at their command's instant (sent together).
        const ep = Number(await raw(['PEXPIRETIME', plain]));
        const em = Number(await raw(['PEXPIRETIME', mod]));
        assert.ok(Math.abs(ep - em) <= 50, `PEXPIRETIME ${ep} vs ${em}`);
        // Interchangeable: CL.COUNTER counts on from the plain key, keeping its expiry ...
        const d = await raw(['CL.COUNTER', plain, '1000', String(windowMs), '1', 'MS']);
        assert.equal(Number(d[2]), 1000 - quantity - 1);
        assert.equal(Number(await raw(['PEXPIRETIME', plain])), ep);
        // ... and hit counts on from the module's key, keeping its expiry.
        const h2 = await t.hit(mod, windowMs, 2);
        assert.equal(h2.count, quantity + 2);
        assert.equal(Number(await raw(['PEXPIRETIME', mod])), em);
      }
    });

    test("within one MULTI with CL.COUNTER, the stored bytes and absolute expiry are exactly the module's", async () => {
      const c = await connect('module');
      const raw = (args) => send(c, args);
      const plain = unique('plain');
      const mod = unique('mod');
      // The same commands Throttle.hit sends, next to CL.COUNTER, with TIME before, between and after.
      const r =
        lib === 'ioredis'
          ? (
              await c
                .multi()
                .time()
                .call('CL.COUNTER', mod, '100', '7000', '4', 'MS')
                .time()
                .set(plain, '0', 'PX', '7000', 'NX')
                .incrby(plain, 4)
                .pttl(plain)
                .time()
                .exec()
            ).map((x) => x[1])
          : await c
              .multi()
              .addCommand(['TIME'])
              .addCommand(['CL.COUNTER', mod, '100', '7000', '4', 'MS'])
              .addCommand(['TIME'])
              .addCommand(['SET', plain, '0', 'PX', '7000', 'NX'])
              .addCommand(['INCRBY', plain, '4'])
              .addCommand(['PTTL', plain])
              .addCommand(['TIME'])
              .exec();
      assert.equal(Number(r[4]), 4);
      const [ep, em] = [Number(await raw(['PEXPIRETIME', plain])), Number(await raw(['PEXPIRETIME', mod]))];
      const version = /redis_version:(\d+)\.(\d+)/.exec(String(await raw(['INFO', 'server'])));
      if (Number(version[1]) * 100 + Number(version[2]) >= 702) {
        // Redis 7.2+: one command time for the whole EXEC, which both read.
        assert.equal(ep, em);
      } else {
        // Before 7.2 each command reads the clock as it runs (the module, without the server's
        // command time, reads the real-time clock as SET does): each expiry is its own command's
        // instant + the window, between the TIMEs around it.
        const [before, between, after] = [r[0], r[2], r[6]].map(
          ([sec, usec]) => Math.floor((Number(sec) * 1e6 + Number(usec)) / 1000) + 7000,
        );
        assert.ok(
          before <= em && em <= between && between <= ep && ep <= after,
          `TIME+window ${before} <= CL.COUNTER's ${em} <= ${between} <= SET's ${ep} <= ${after}`,
        );
      }
      assert.equal(String(await raw(['GET', plain])), String(await raw(['GET', mod])));
    });

    test("another application's key: refused untouched, as the module refuses it; its integer without an expiry gets the window's", async () => {
      const c = await connect('twin');
      const m = await connect('module');
      const t = new Throttle(c, SLOW);
      const rawT = (args) => send(c, args);
      const rawM = (args) => send(m, args);
      const hash = unique('hash');
      const text = unique('text');
      for (const raw of [rawT, rawM]) {
        await raw(['HSET', hash, 'a', '1']);
        await raw(['SET', text, 'abc']);
      }
      await assert.rejects(t.hit(hash, 60_000), (e) => e instanceof ThrottleError && e.message.startsWith('WRONGTYPE'));
      await assert.rejects(t.hit(text, 60_000), (e) => e instanceof ThrottleError && /not an integer/.test(e.message));
      // The module refuses both too.
      await assert.rejects(rawM(['CL.COUNTER', hash, '10', '60000', 'MS']), /WRONGTYPE/);
      await assert.rejects(rawM(['CL.COUNTER', text, '10', '60000', 'MS']), /CL.COUNTER state|WRONGTYPE/);
      for (const raw of [rawT, rawM]) {
        const h = await raw(['HGETALL', hash]); // (node-redis 6 answers a map)
        assert.deepEqual((Array.isArray(h) ? h : Object.entries(h).flat()).map(String), ['a', '1']);
        assert.equal(Number(await raw(['PTTL', hash])), -1);
        assert.equal(String(await raw(['GET', text])), 'abc');
        assert.equal(Number(await raw(['PTTL', text])), -1);
      }
      // An integer string without an expiry: counted, and given the window's expiry, as CL.COUNTER does.
      const bare = unique('bare');
      await rawT(['SET', bare, '5']);
      await rawM(['SET', bare, '5']);
      const h = await t.hit(bare, 30_000);
      await rawM(['CL.COUNTER', bare, '10', '30000', 'MS']);
      assert.equal(h.count, 6);
      assert.equal(String(await rawT(['GET', bare])), String(await rawM(['GET', bare])));
      for (const raw of [rawT, rawM]) {
        const ttl = Number(await raw(['PTTL', bare]));
        assert.ok(ttl > 29_000 && ttl <= 30_000, `ttl ${ttl}`);
      }
    });

    test('in a cluster, each transaction goes to its key’s node (keys over every slot range)', async () => {
      const c = await connect('cluster');
      const t = new Throttle(c, SLOW);
      const keys = Array.from({ length: 30 }, (_, i) => unique(`cl${i}`));
      const all = await Promise.all(keys.flatMap((k) => Array.from({ length: 10 }, () => t.hit(k, 60_000))));
      for (let i = 0; i < keys.length; i++) {
        const counts = all
          .slice(i * 10, i * 10 + 10)
          .map((h) => h.count)
          .sort((a, b) => a - b);
        assert.deepEqual(counts, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      }
      // The module on that node reads the same count.
      const d = await t.counter(keys[0], { limit: 100, windowMs: 60_000, quantity: 0 });
      assert.equal(d.limit - d.remaining, 10);
    });
  });
}

// node-redis 5 and later have a client pool (4 has none).
if (typeof redis.createClientPool === 'function')
  test("node-redis's client pool: each transaction runs on one of its clients", async () => {
    const pool = redis.createClientPool({ url: `redis://127.0.0.1:${ports.twin}` }, { minimum: 4, maximum: 4 });
    pool.on('error', () => {});
    await pool.connect();
    try {
      const t = new Throttle(pool, SLOW);
      const key = unique('pool');
      const all = await Promise.all(Array.from({ length: 100 }, () => t.hit(key, 60_000)));
      assert.deepEqual(
        all.map((h) => h.count).sort((a, b) => a - b),
        Array.from({ length: 100 }, (_, i) => i + 1),
      );
      assert.ok(Number(await pool.sendCommand(['PTTL', key])) > 59_000);
    } finally {
      await pool.close();
    }
  });

describe('the stores send no FCALL for the fixed window on a twin-only server', () => {
  test('express-rate-limit, rate-limiter-flexible, Fastify and NestJS (counter): plain commands, exactly the limit admitted', async () => {
    // What the stores' clients send, recorded client-side (other cells share the server).
    const nr = counting(await nodeRedis('twin'));
    const ior = counting(await ioredis('twin'));
    const client = nr.client;
    const io = ior.client;
    // Detection happens once per store; warm each up, then record the commands of the real traffic.
    const erl = new RedisThrottleStore({
      prefix: unique('erl') + ':',
      ...SLOW,
      sendCommand: (...args) => client.sendCommand(args),
    });
    const app = express();
    app.use(rateLimit({ windowMs: 60_000, limit: 5, store: erl }));
    app.get('/', (_req, res) => res.send('ok'));
    const url = await serve(app);
    const rlf = new RateLimiterRedisThrottle({
      storeClient: io,
      points: 5,
      duration: 60,
      keyPrefix: unique('rlf'),
      ...SLOW,
    });
    const fastify = Fastify({ keepAliveTimeout: 1000 });
    await fastify.register(fastifyRateLimit, {
      max: 5,
      timeWindow: 60_000,
      store: redisThrottleStore(client, { nameSpace: unique('fst') + '-', ...SLOW }),
    });
    fastify.get('/', async () => 'ok');
    await fastify.listen({ port: 0, host: '127.0.0.1' });
    const nest = new RedisThrottleStorage(io, { ...SLOW, prefix: unique('nst') + ':', algorithm: 'counter' });
    const nurl = await nestApp(nest, [{ ttl: 60_000, limit: 5 }]);
    try {
      const furl = `http://127.0.0.1:${fastify.server.address().port}`;
      await erl.get('warm');
      await rlf.get('warm');
      await nest.increment('warm', 60_000, 5, 60_000, 'default');
      const from = [nr.log.length, ior.log.length];
      const e = await burst(url, 200);
      const f = await burst(furl, 200);
      const n = await burst(nurl, 200);
      const r = await Promise.allSettled(Array.from({ length: 200 }, () => rlf.consume('k')));
      const sent = [...nr.log.slice(from[0]), ...ior.log.slice(from[1])].map((c) => String(c[0]).toUpperCase());
      assert.equal(e.filter((x) => x.status === 200).length, 5);
      assert.equal(f.filter((x) => x.status === 200).length, 5);
      assert.equal(n.filter((x) => x.status === 200).length, 5);
      assert.equal(r.filter((x) => x.status === 'fulfilled').length, 5);
      const denied = r.find((x) => x.status === 'rejected').reason;
      assert.equal(denied.remainingPoints, 0);
      assert.ok(denied.msBeforeNext > 0 && denied.msBeforeNext <= 60_000);
      assert.equal(sent.filter((c) => c === 'FCALL').length, 0, 'FCALLs were sent');
      assert.ok(sent.filter((c) => c === 'MULTI').length >= 800, 'transactions');
    } finally {
      await fastify.close();
    }
  });
});
