// @fastify/rate-limit with the redis-throttle store: a real Fastify app.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import Fastify from 'fastify';
import rateLimit from '@fastify/rate-limit';
import { redisThrottleStore } from 'redis-throttle-js/fastify';
import { KINDS, SLOW, burst, closeAll, ioredis, nodeRedis, unique } from './common.mjs';

after(closeAll);

export async function fastifyApp(store, options = {}) {
  const app = Fastify();
  await app.register(rateLimit, { max: 5, timeWindow: 60_000, store, ...options });
  app.get('/', async () => 'ok');
  app.get('/route', { config: { rateLimit: { max: 2, timeWindow: 30_000 } } }, async () => 'ok');
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  after(() => app.close());
  return address;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const until = (t) => sleep(Math.max(0, t - Date.now()));
const consume = async (r) => {
  await r.arrayBuffer();
  return { status: r.status, retryAfter: Number(r.headers.get('retry-after') ?? NaN) };
};

for (const kind of KINDS) {
  describe(`@fastify/rate-limit on ${kind}`, () => {
    test('1,000 concurrent requests against max 5 admit exactly 5, with the plugin\'s headers and 429', async () => {
      const url = await fastifyApp(redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace: unique('f') + ':' }));
      const replies = await burst(url, 1000);
      const ok = replies.filter((r) => r.status === 200);
      assert.equal(ok.length, 5);
      assert.deepEqual(ok.map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort(), [0, 1, 2, 3, 4]);
      const denied = replies.filter((r) => r.status === 429);
      assert.equal(denied.length, 995);
      for (const r of [ok[0], denied[0]]) {
        assert.equal(r.headers.get('x-ratelimit-limit'), '5');
        const reset = Number(r.headers.get('x-ratelimit-reset'));
        assert.ok(reset >= 1 && reset <= 60, `reset ${reset}`);
      }
      assert.equal(denied[0].headers.get('x-ratelimit-remaining'), '0');
      assert.ok(Number(denied[0].headers.get('retry-after')) >= 1);
      // A route's own limit (child store, its own keys).
      const route = await burst(`${url}/route`, 100);
      assert.equal(route.filter((r) => r.status === 200).length, 2);
    });

    test('ban: 1: the first denial in a window is 429, the second 403 (counted on the server, across app servers), and the count ends with the window', async () => {
      await Promise.all(['counter', 'window', 'gcra'].map(async (algorithm) => {
        const nameSpace = unique(`fban-${algorithm}`) + ':';
        const options = { max: 2, timeWindow: 2000, ban: 1 };
        const one = await fastifyApp(redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace, algorithm }), options);
        const two = await fastifyApp(redisThrottleStore(await ioredis(kind), { ...SLOW, nameSpace, algorithm }), options);
        const t0 = Date.now();
        const statuses = [];
        for (const url of [one, one, one, two, one]) statuses.push((await fetch(url).then(consume)).status);
        assert.deepEqual(statuses, [200, 200, 429, 403, 403], algorithm);
        // When the limiter is full again the denials count from zero: 429 before 403 again.
        await until(t0 + 2300);
        const again = [];
        for (const url of [two, one, one, two]) again.push((await fetch(url).then(consume)).status);
        assert.deepEqual(again, [200, 200, 429, 403], algorithm);
      }));
    });

    test('continueExceeding: each denied request renews the limitation; it ends timeWindow after the last denial', async () => {
      await Promise.all(['counter', 'window', 'gcra'].map(async (algorithm) => {
        const nameSpace = unique(`fce-${algorithm}`) + ':';
        // `renewing` renews on each denial; `plain` shares its keys and does not.
        const renewing = await fastifyApp(redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace, algorithm }), { max: 2, timeWindow: 1000, continueExceeding: true });
        const plain = await fastifyApp(redisThrottleStore(await ioredis(kind), { ...SLOW, nameSpace, algorithm }), { max: 2, timeWindow: 1000 });
        const control = await fastifyApp(redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace: unique('fcectl') + ':', algorithm }), { max: 2, timeWindow: 1000 });
        const t0 = Date.now();
        for (const url of [renewing, control]) {
          const s = [];
          for (let i = 0; i < 3; i++) s.push((await fetch(url).then(consume)).status);
          assert.deepEqual(s, [200, 200, 429], algorithm);
        }
        await until(t0 + 600);
        const renewed = await fetch(renewing).then(consume);
        assert.equal(renewed.status, 429, algorithm);
        assert.equal(renewed.retryAfter, 1, `${algorithm}: retry-after is timeWindow`);
        await until(t0 + 1300);
        assert.equal((await fetch(control).then(consume)).status, 200, `${algorithm}: the window alone admits by now`);
        const last = await fetch(renewing).then(consume);
        const tLast = Date.now();
        assert.equal(last.status, 429, `${algorithm}: the denial at 0.6 s renewed the limitation`);
        // A request that does not renew (the other app) is still denied before timeWindow after the last denial…
        await until(tLast + 600);
        assert.equal((await fetch(plain).then(consume)).status, 429, `${algorithm}: freed before timeWindow after the last denial`);
        // …and admitted after it.
        await until(tLast + 1250);
        assert.equal((await fetch(plain).then(consume)).status, 200, `${algorithm}: still limited timeWindow after the last denial`);
      }));
    });
  });
}

test('ioredis, the sliding window, and a key of another application', async () => {
  const client = await ioredis('module');
  const ns = unique('fw') + ':';
  const url = await fastifyApp(redisThrottleStore(client, { ...SLOW, nameSpace: ns, algorithm: 'window' }), { keyGenerator: (req) => req.headers['x-user'] ?? 'anon' });
  const replies = await burst(url, 100, { headers: { 'x-user': 'u1' } });
  assert.equal(replies.filter((r) => r.status === 200).length, 5);
  await client.set(`${ns}u2`, 'not a limiter');
  // Without skipOnError the plugin answers the store's error as a server error; the key is untouched.
  const r = await fetch(url, { headers: { 'x-user': 'u2' } });
  assert.equal(r.status, 500);
  assert.equal(await client.get(`${ns}u2`), 'not a limiter');
});
