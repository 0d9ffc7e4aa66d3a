// express-rate-limit with RedisThrottleStore: a real Express app, driven by fetch.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { RedisThrottleStore } from 'redis-throttle-js/express-rate-limit';
import { KINDS, SLOW, burst, closeAll, closeServers, nodeRedis, ioredis, serve, unique } from './common.mjs';

after(closeAll);
after(closeServers);

function storeFor(kind, client, extra = {}) {
  const prefix = unique('erl') + ':';
  if (kind === 'cluster') {
    return new RedisThrottleStore({ prefix, ...SLOW, ...extra, sendCommandCluster: ({ key, isReadOnly, command }) => client.sendCommand(key, isReadOnly, command) });
  }
  return new RedisThrottleStore({ prefix, ...SLOW, ...extra, sendCommand: (...args) => client.sendCommand(args) });
}

for (const kind of KINDS) {
  describe(`express-rate-limit on ${kind}`, () => {
    for (const algorithm of kind === 'module' ? [undefined, 'window', 'gcra'] : [undefined]) {
      test(`${algorithm ? 200 : '1,000'} concurrent requests against a limit of 5 admit exactly 5 (${algorithm ?? 'default: fixed window'}), with the library's headers`, async () => {
        const client = await nodeRedis(kind);
        const app = express();
        app.use(rateLimit({ windowMs: 60_000, limit: 5, standardHeaders: 'draft-6', legacyHeaders: true, store: storeFor(kind, client, algorithm ? { algorithm } : {}) }));
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
      const info = await store.get('::ffff:127.0.0.1').then((i) => (i.totalHits > 0 ? i : store.get('127.0.0.1')));
      assert.equal(info.totalHits, 3);
    });

    test("the store's errors: the server's text, and passOnStoreError lets requests through", async () => {
      const client = await nodeRedis(kind);
      const app = express();
      // A limit the server refuses: every increment fails with the server's error.
      app.use(rateLimit({ windowMs: 60_000, limit: 0, passOnStoreError: true, store: storeFor(kind, client), validate: false }));
      app.get('/', (_req, res) => res.send('ok'));
      const url = await serve(app);
      const r = await fetch(url);
      assert.equal(r.status, 200);
      const store = storeFor(kind, client);
      store.init({ windowMs: 60_000, limit: 0 });
      await assert.rejects(store.increment('k'), /^ThrottleError: ERR limit must be an integer from 1/);
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
  const key = (await limiter.getKey(ip[0])).totalHits > 0 ? ip[0] : ip[1];
  const info = await limiter.getKey(key);
  assert.equal(info.totalHits, 2);
  assert.equal((await limiter.getKey(key)).totalHits, 2);
  assert.ok(info.resetTime.getTime() > Date.now());
  await limiter.resetKey(key);
  assert.equal((await fetch(url)).status, 200);
});

test("a limit given as a function: the store counts, express-rate-limit compares", async () => {
  const client = await nodeRedis('module');
  const app = express();
  app.use(rateLimit({ windowMs: 60_000, limit: (req) => (req.get('x-plan') === 'pro' ? 4 : 2), store: storeFor('module', client), keyGenerator: (req) => req.get('x-user') }));
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
  app.use(rateLimit({ windowMs: 60_000, limit: 5, store: new RedisThrottleStore({ prefix: unique('io') + ':', ...SLOW, sendCommand: (command, ...args) => client.call(command, ...args) }) }));
  app.get('/', (_req, res) => res.send('ok'));
  const url = await serve(app);
  const replies = await burst(url, 200);
  assert.equal(replies.filter((r) => r.status === 200).length, 5);
});
