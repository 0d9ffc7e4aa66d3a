// @fastify/rate-limit with the redis-throttle store: a real Fastify app.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import Fastify from 'fastify';
import rateLimit from '@fastify/rate-limit';
import { redisThrottleStore } from 'redis-throttle/fastify';
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
