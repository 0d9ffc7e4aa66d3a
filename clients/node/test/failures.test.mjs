// The host libraries' failure options with Redis paused (SIGSTOP) and then killed: this file
// starts a server of its own.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import Fastify from 'fastify';
import fastifyRateLimit from '@fastify/rate-limit';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { createClient } from 'redis';
import { RedisThrottleStore } from 'redis-throttle-js/express-rate-limit';
import { redisThrottleStore } from 'redis-throttle-js/fastify';
import { RateLimiterRedisThrottle } from 'redis-throttle-js/rate-limiter-flexible';
import { startServer, stopServer } from './harness.mjs';
import { closeServers, serve } from './common.mjs';

// The server and the apps are made as the module loads (top-level await), not in a root before()
// hook: Node.js 20.13's test runner starts the root's tests without awaiting such a hook.
const server = await startServer({ kind: 'module' });
const client = createClient({ url: server.url, socket: { reconnectStrategy: 100 } });
client.on('error', () => {});
await client.connect();
const urls = {};
const fastifies = [];
for (const pass of [true, false]) {
  const app = express();
  app.use(
    rateLimit({
      windowMs: 60_000,
      limit: 2,
      passOnStoreError: pass,
      store: new RedisThrottleStore({
        prefix: `p${pass}:`,
        timeoutMs: 300,
        sendCommand: (...a) => client.sendCommand(a),
      }),
    }),
  );
  app.get('/', (_req, res) => res.send('ok'));
  app.use((err, _req, res, _next) => res.status(500).send(String(err)));
  urls[`express-${pass}`] = await serve(app);
  const f = Fastify({ keepAliveTimeout: 1000 });
  await f.register(fastifyRateLimit, {
    max: 2,
    timeWindow: 60_000,
    skipOnError: pass,
    store: redisThrottleStore(client, { nameSpace: `f${pass}:`, timeoutMs: 300 }),
  });
  f.get('/', async () => 'ok');
  urls[`fastify-${pass}`] = await f.listen({ port: 0, host: '127.0.0.1' });
  fastifies.push(f);
}
const limiter = new RateLimiterRedisThrottle({
  storeClient: client,
  keyPrefix: 'ins',
  points: 2,
  duration: 60,
  timeoutMs: 300,
  insuranceLimiter: new RateLimiterMemory({ points: 1, duration: 60 }),
});

after(async () => {
  await closeServers();
  await Promise.all(fastifies.map((f) => f.close()));
  await client.disconnect().catch(() => {});
  stopServer(server);
});

const status = async (url) => (await fetch(url)).status;

async function expectations(state) {
  // passOnStoreError / skipOnError: requests are let through, beyond the limit too.
  assert.deepEqual(
    [await status(urls['express-true']), await status(urls['express-true']), await status(urls['express-true'])],
    [200, 200, 200],
    `express, ${state}`,
  );
  assert.deepEqual(
    [await status(urls['fastify-true']), await status(urls['fastify-true']), await status(urls['fastify-true'])],
    [200, 200, 200],
    `fastify, ${state}`,
  );
  // Without them the error is the response.
  assert.equal(await status(urls['express-false']), 500, `express, ${state}`);
  assert.equal(await status(urls['fastify-false']), 500, `fastify, ${state}`);
  // insuranceLimiter answers in Redis's place, with its own limit (1 here).
  const key = `k-${state}`;
  assert.equal((await limiter.consume(key)).remainingPoints, 0);
  const denied = await limiter.consume(key).then(
    () => assert.fail('admitted beyond the insurance limit'),
    (e) => e,
  );
  assert.ok(denied instanceof RateLimiterRes, `${state}: ${denied}`);
}

test('the limits hold while Redis answers', async () => {
  assert.deepEqual(
    [await status(urls['express-false']), await status(urls['express-false']), await status(urls['express-false'])],
    [200, 200, 429],
  );
  assert.deepEqual(
    [await status(urls['fastify-false']), await status(urls['fastify-false']), await status(urls['fastify-false'])],
    [200, 200, 429],
  );
  assert.equal((await limiter.consume('live')).remainingPoints, 1);
});

test('Redis paused (SIGSTOP): each failure option behaves as its library documents', async () => {
  process.kill(server.pid, 'SIGSTOP');
  try {
    await expectations('paused');
  } finally {
    process.kill(server.pid, 'SIGCONT');
  }
});

test('Redis killed: the same', async () => {
  process.kill(server.pid, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 100));
  await expectations('killed');
});
