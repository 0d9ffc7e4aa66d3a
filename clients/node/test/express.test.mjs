// express-rate-limit with RedisThrottleStore: a real Express app, driven by fetch.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import express from 'express';
import { MemoryStore, rateLimit } from 'express-rate-limit';
import { RedisThrottleStore } from 'redis-throttle-js/express-rate-limit';
import {
  KINDS,
  SLOW,
  atLeast,
  burst,
  closeAll,
  closeServers,
  counting,
  nodeRedis,
  ioredis,
  serve,
  unique,
} from './common.mjs';

after(closeAll);
after(closeServers);

/** An app limited by `options` with a store through `client`; its URL. */
async function appWith(kind, client, options, extra = {}) {
  const app = express();
  app.use(rateLimit({ windowMs: 60_000, store: storeFor(kind, client, extra), validate: false, ...options }));
  app.get('/', (_req, res) => res.send('ok'));
  return serve(app);
}
const statuses = (replies) => replies.map((r) => r.status);
const admitted = (replies) => replies.filter((r) => r.status === 200).length;

function storeFor(kind, client, extra = {}) {
  const prefix = unique('erl') + ':';
  if (kind === 'cluster') {
    return new RedisThrottleStore({
      prefix,
      ...SLOW,
      ...extra,
      sendCommandCluster: ({ key, isReadOnly, command }) => client.sendCommand(key, isReadOnly, command),
    });
  }
  return new RedisThrottleStore({ prefix, ...SLOW, ...extra, sendCommand: (...args) => client.sendCommand(args) });
}

for (const kind of KINDS) {
  describe(`express-rate-limit on ${kind}`, () => {
    for (const algorithm of kind === 'module' ? [undefined, 'window', 'gcra'] : [undefined]) {
      test(`${algorithm ? 200 : '1,000'} concurrent requests against a limit of 5 admit exactly 5 (${algorithm ?? 'default: fixed window'}), with the library's headers`, async () => {
        const client = await nodeRedis(kind);
        const app = express();
        app.use(
          rateLimit({
            windowMs: 60_000,
            limit: 5,
            standardHeaders: 'draft-6',
            legacyHeaders: true,
            store: storeFor(kind, client, algorithm ? { algorithm } : {}),
          }),
        );
        app.get('/', (_req, res) => res.send('ok'));
        const url = await serve(app);
        const replies = await burst(url, algorithm ? 200 : 1000);
        const ok = replies.filter((r) => r.status === 200);
        const limited = replies.filter((r) => r.status === 429);
        assert.equal(ok.length, 5);
        assert.equal(limited.length, replies.length - 5);
        assert.deepEqual(ok.map((r) => Number(r.headers.get('ratelimit-remaining'))).sort(), [0, 1, 2, 3, 4]);
        for (const r of [...ok, limited[0]]) {
          assert.equal(r.headers.get('ratelimit-limit'), '5');
          assert.equal(r.headers.get('x-ratelimit-limit'), '5');
          const reset = Number(r.headers.get('ratelimit-reset'));
          assert.ok(reset >= 1 && reset <= 60, `reset ${reset}`);
        }
        const retry = Number(limited[0].headers.get('retry-after'));
        assert.ok(retry >= 1 && retry <= 60, `retry-after ${retry}`);
        assert.equal(limited[0].headers.get('ratelimit-remaining'), '0');
      });
    }

    test('skipFailedRequests refunds the failed requests and not the denied ones', async () => {
      const client = await nodeRedis(kind);
      const store = storeFor(kind, client);
      const app = express();
      app.use(rateLimit({ windowMs: 60_000, limit: 3, skipFailedRequests: true, store }));
      app.get('/fail', (_req, res) => res.status(500).send('no'));
      app.get('/', (_req, res) => res.send('ok'));
      const url = await serve(app);
      // Failed requests are given back: they never use the limit up.
      for (let i = 0; i < 6; i++) assert.equal((await fetch(`${url}/fail`)).status, 500);
      await new Promise((r) => setTimeout(r, 50));
      const statuses = [];
      for (let i = 0; i < 5; i++) {
        statuses.push((await fetch(url)).status);
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
      await new Promise((r) => setTimeout(r, 50));
      // The two 429s (failed responses) were refunded by nothing: still 3 used.
      const info = (await store.get('::ffff:127.0.0.1')) ?? (await store.get('127.0.0.1'));
      assert.equal(info.totalHits, 3);
    });

    test('a decrement never admits more than MemoryStore: every hit is counted, refused or not (skipFailedRequests, skipSuccessfulRequests, requestWasSuccessful)', async () => {
      const client = await nodeRedis(kind);
      const countsA429 = (_req, res) => res.statusCode < 400 || res.statusCode === 429;
      const cases = [
        // The case: a 503 route, whose own 429s count as successes and are refunded.
        [
          '503 route; skipSuccessfulRequests; a 429 is a success',
          503,
          { skipSuccessfulRequests: true, requestWasSuccessful: countsA429 },
        ],
        ['200 route; skipFailedRequests', 200, { skipFailedRequests: true }],
        ['503 route; skipFailedRequests', 503, { skipFailedRequests: true }],
        ['200 route; skipSuccessfulRequests', 200, { skipSuccessfulRequests: true }],
        ['503 route; skipSuccessfulRequests', 503, { skipSuccessfulRequests: true }],
        [
          '200 route; both; a 429 is a success',
          200,
          { skipFailedRequests: true, skipSuccessfulRequests: true, requestWasSuccessful: countsA429 },
        ],
      ];
      const run = async (store, status, options) => {
        const app = express();
        app.use(rateLimit({ windowMs: 60_000, limit: 2, store, validate: false, ...options }));
        app.get('/', (_req, res) => res.status(status).send('x'));
        const url = await serve(app);
        const seen = [];
        for (let i = 0; i < 8; i++) {
          const r = await fetch(url);
          await r.arrayBuffer();
          seen.push(r.status);
          await new Promise((res) => setTimeout(res, 20)); // (the decrement runs when the response ends)
        }
        return seen;
      };
      for (const algorithm of ['counter', 'window', 'gcra']) {
        for (const [name, status, options] of cases) {
          const memory = await run(new MemoryStore(), status, options);
          const ours = await run(storeFor(kind, client, { algorithm }), status, options);
          assert.deepEqual(ours, memory, `${algorithm}, ${name}`);
        }
      }
      // The sequence: 503, 503, then 429 for ever (never 503 again).
      assert.deepEqual(await run(storeFor(kind, client), 503, cases[0][2]), [503, 503, 429, 429, 429, 429, 429, 429]);
    });

    test('limit 0 (and -1, 0.5) denies every request (200 at once), decided without Redis, with and without passOnStoreError', async () => {
      const real = await nodeRedis(kind);
      for (const pass of atLeast('express-rate-limit', '7.4.0') ? [true, false] : [false]) {
        const { client, keyed } = counting(real);
        const replies = await burst(await appWith(kind, client, { limit: 0, passOnStoreError: pass }), 200);
        assert.equal(admitted(replies), 0, `passOnStoreError: ${pass}`);
        assert.ok(
          replies.every((r) => r.status === 429),
          `passOnStoreError: ${pass}`,
        );
        assert.equal(keyed(), 0, 'the denials asked Redis');
      }
      for (const limit of [-1, 0.5]) {
        const replies = await burst(await appWith(kind, real, { limit }), 20);
        assert.equal(admitted(replies), 0, `limit ${limit}`);
      }
    });

    test('limit 2.5 admits 2; Infinity admits every request, counted; windowMs 1e13 (beyond the commands) is counted on the server', async () => {
      const client = await nodeRedis(kind);
      assert.equal(admitted(await burst(await appWith(kind, client, { limit: 2.5 }), 50)), 2);
      const store = storeFor(kind, client);
      const app = express();
      const limiter = rateLimit({ windowMs: 60_000, limit: Infinity, store, validate: false, keyGenerator: () => 'k' });
      app.use(limiter);
      app.get('/', (_req, res) => res.send('ok'));
      assert.equal(admitted(await burst(await serve(app), 50)), 50);
      assert.equal((await limiter.getKey('k')).totalHits, 50);
      for (const algorithm of ['counter', 'window', 'gcra']) {
        const s = storeFor(kind, client, { algorithm });
        const a = express();
        a.use(rateLimit({ windowMs: 1e13, limit: 3, store: s, validate: false, keyGenerator: () => 'k' }));
        a.get('/', (_req, res) => res.send('ok'));
        const replies = await burst(await serve(a), 20);
        assert.equal(admitted(replies), 3, algorithm);
        assert.equal(replies.filter((r) => r.status === 500).length, 0, algorithm);
        const pttl = Number(
          await client.sendCommand(
            ...(kind === 'cluster' ? [`${s.prefix}k`, true, ['PTTL', `${s.prefix}k`]] : [['PTTL', `${s.prefix}k`]]),
          ),
        );
        // The fixed window keeps its whole length (counted with plain commands; through
        // sendCommandCluster, which sends no MULTI, CL.COUNTER's longest); the others the longest
        // the commands take (10^12 ms; the exact window's newest entry, logged this millisecond,
        // expires at the next whole one: + 1); GCRA's 20 hits, all counted, are repaid a third
        // of that each.
        const [low, high] =
          algorithm === 'counter' && kind !== 'cluster'
            ? [1e12, Infinity]
            : algorithm === 'gcra'
              ? [6.6e12, (20 * 1e12) / 3 + 1]
              : [0.99e12, 1e12 + 1];
        assert.ok(pttl > low && pttl <= high, `${algorithm}: PTTL ${pttl}`);
      }
    });

    test("getKey of a key never seen is undefined, as the library's own stores answer", async () => {
      const client = await nodeRedis(kind);
      for (const algorithm of ['counter', 'window', 'gcra']) {
        const limiter = rateLimit({
          windowMs: 60_000,
          limit: 5,
          store: storeFor(kind, client, { algorithm }),
          validate: false,
        });
        assert.equal(await limiter.getKey('nobody'), undefined, algorithm);
      }
    });

    test("the store's errors: the server's text, and passOnStoreError lets requests through", async () => {
      const client = await nodeRedis(kind);
      const store = storeFor(kind, client);
      // A key of another application: every increment fails with the server's error, the key untouched.
      await client.hSet(`${store.prefix}k`, 'a', '1');
      const app = express();
      app.use(
        rateLimit({
          windowMs: 60_000,
          limit: 5,
          passOnStoreError: true,
          store,
          keyGenerator: () => 'k',
          validate: false,
        }),
      );
      app.get('/', (_req, res) => res.send('ok'));
      const url = await serve(app);
      assert.equal((await fetch(url)).status, 200);
      const other = storeFor(kind, client);
      other.init({ windowMs: 60_000, limit: 5 });
      await client.hSet(`${other.prefix}k`, 'a', '1');
      await assert.rejects(other.increment('k'), /^ThrottleError: WRONGTYPE/);
      assert.deepEqual({ ...(await client.hGetAll(`${other.prefix}k`)) }, { a: '1' });
    });
  });
}

test('get() reads without counting; resetKey() starts the key afresh', async () => {
  const client = await nodeRedis('module');
  const limiter = rateLimit({ windowMs: 60_000, limit: 2, store: storeFor('module', client) });
  const app = express();
  app.use(limiter);
  app.get('/', (_req, res) => res.send('ok'));
  const url = await serve(app);
  assert.deepEqual([(await fetch(url)).status, (await fetch(url)).status, (await fetch(url)).status], [200, 200, 429]);
  const ip = ['::ffff:127.0.0.1', '127.0.0.1'];
  const key = (await limiter.getKey(ip[0])) !== undefined ? ip[0] : ip[1];
  // Every hit counted, the refused one too, as MemoryStore counts.
  const info = await limiter.getKey(key);
  assert.equal(info.totalHits, 3);
  assert.equal((await limiter.getKey(key)).totalHits, 3);
  assert.ok(info.resetTime.getTime() > Date.now());
  await limiter.resetKey(key);
  assert.equal((await fetch(url)).status, 200);
});

test('a limit given as a function: the store counts, express-rate-limit compares', async () => {
  const client = await nodeRedis('module');
  const app = express();
  app.use(
    rateLimit({
      windowMs: 60_000,
      limit: (req) => (req.get('x-plan') === 'pro' ? 4 : 2),
      store: storeFor('module', client),
      keyGenerator: (req) => req.get('x-user'),
    }),
  );
  app.get('/', (_req, res) => res.send('ok'));
  const url = await serve(app);
  const free = await burst(url, 50, { headers: { 'x-user': 'a' } });
  assert.equal(free.filter((r) => r.status === 200).length, 2);
  const pro = await burst(url, 50, { headers: { 'x-user': 'b', 'x-plan': 'pro' } });
  assert.equal(pro.filter((r) => r.status === 200).length, 4);
  // With another algorithm the store needs the limit itself.
  const store = storeFor('module', client, { algorithm: 'gcra' });
  assert.throws(() => store.init({ windowMs: 1000, limit: () => 3 }), /give RedisThrottleStore a number `limit`/);
});

test('ioredis through sendCommand, as rate-limit-redis documents it', async () => {
  const client = await ioredis('module');
  const app = express();
  app.use(
    rateLimit({
      windowMs: 60_000,
      limit: 5,
      store: new RedisThrottleStore({
        prefix: unique('io') + ':',
        ...SLOW,
        sendCommand: (command, ...args) => client.call(command, ...args),
      }),
    }),
  );
  app.get('/', (_req, res) => res.send('ok'));
  const url = await serve(app);
  const replies = await burst(url, 200);
  assert.equal(replies.filter((r) => r.status === 200).length, 5);
});
