// @fastify/rate-limit with the redis-throttle store: a real Fastify app.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { redisThrottleStore } from 'redis-throttle-js/fastify';
import { fastifyApp } from './fastify-app.mjs';
import { KINDS, SLOW, atLeast, burst, closeAll, counting, ioredis, nodeRedis, unique, version } from './common.mjs';

after(closeAll);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const until = (t) => sleep(Math.max(0, t - Date.now()));
const consume = async (r) => {
  await r.arrayBuffer();
  return { status: r.status, retryAfter: Number(r.headers.get('retry-after') ?? NaN) };
};

for (const kind of KINDS) {
  describe(`@fastify/rate-limit on ${kind}`, () => {
    test("1,000 concurrent requests against max 5 admit exactly 5, with the plugin's headers and 429", async () => {
      const url = await fastifyApp(
        redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace: unique('f') + ':' }),
      );
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

    test(`each call's window and limit, as this plugin (${version('@fastify/rate-limit')}) passes them: max 3 per 5 s and per '1 hour' admit 3 (every algorithm), no 500`, async () => {
      await Promise.all(
        ['counter', 'window', 'gcra'].map(async (algorithm) => {
          for (const timeWindow of [5000, '1 hour']) {
            const url = await fastifyApp(
              redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace: unique('fw') + ':', algorithm }),
              { max: 3, timeWindow },
            );
            const replies = [];
            for (let i = 0; i < 10; i++) replies.push(await fetch(url).then(consume));
            assert.deepEqual(
              replies.map((r) => r.status),
              [200, 200, 200, 429, 429, 429, 429, 429, 429, 429],
              `${algorithm}, ${timeWindow}`,
            );
            const limit = timeWindow === 5000 ? 5 : 3600;
            assert.ok(
              replies[3].retryAfter >= 1 && replies[3].retryAfter <= limit,
              `${algorithm}, ${timeWindow}: retry-after ${replies[3].retryAfter}`,
            );
          }
        }),
      );
    });

    test('max 0 denies every request (200 at once), decided without Redis, with and without skipOnError; its denials still count towards ban', async () => {
      const real = await nodeRedis(kind);
      for (const skipOnError of [true, false]) {
        const { client, log } = counting(real);
        const url = await fastifyApp(redisThrottleStore(client, { ...SLOW, nameSpace: unique('f0') + ':' }), {
          max: 0,
          skipOnError,
        });
        const replies = await burst(url, 200);
        assert.equal(replies.filter((r) => r.status === 200).length, 0, `skipOnError: ${skipOnError}`);
        assert.ok(
          replies.every((r) => r.status === 429),
          `skipOnError: ${skipOnError}`,
        );
        assert.deepEqual(
          log.filter((c) => /^(CL\.|FCALL)/i.test(c[0])),
          [],
          'the limiter was asked',
        );
      }
      const url = await fastifyApp(redisThrottleStore(real, { ...SLOW, nameSpace: unique('f0ban') + ':' }), {
        max: 0,
        ban: 2,
      });
      const s = [];
      for (let i = 0; i < 4; i++) s.push((await fetch(url).then(consume)).status);
      assert.deepEqual(s, [429, 429, 403, 403]);
    });

    if (atLeast('@fastify/rate-limit', '10.0.0')) {
      test('max and timeWindow as functions of the request (from version 10)', async () => {
        const url = await fastifyApp(
          redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace: unique('ffn') + ':', algorithm: 'gcra' }),
          {
            max: (req) => (req.headers['x-plan'] === 'pro' ? 4 : 2),
            timeWindow: () => 60_000,
            keyGenerator: (req) => req.headers['x-user'],
          },
        );
        const free = await burst(url, 30, { headers: { 'x-user': 'a' } });
        const pro = await burst(url, 30, { headers: { 'x-user': 'b', 'x-plan': 'pro' } });
        assert.deepEqual(
          [free, pro].map((r) => r.filter((x) => x.status === 200).length),
          [2, 4],
        );
      });
    }

    if (atLeast('@fastify/rate-limit', '10.2.0')) {
      test('exponentialBackoff: the n-th denial limits the key for timeWindow × 2^(n-1) from then', async () => {
        // A window's block lasts one window: refused with it when the plugin builds its store.
        await assert.rejects(
          fastifyApp(redisThrottleStore(await nodeRedis(kind), { ...SLOW, algorithm: 'window' }), {
            exponentialBackoff: true,
          }),
          /exponentialBackoff needs algorithm 'counter' or 'gcra'/,
        );
        await Promise.all(
          ['counter', 'gcra'].map(async (algorithm) => {
            const nameSpace = unique(`fexp-${algorithm}`) + ':';
            const url = await fastifyApp(redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace, algorithm }), {
              max: 1,
              timeWindow: 1000,
              exponentialBackoff: true,
            });
            const r = [];
            for (let i = 0; i < 5; i++) r.push(await fetch(url).then(consume));
            assert.deepEqual(
              r.map((x) => x.status),
              [200, 429, 429, 429, 429],
              algorithm,
            );
            assert.deepEqual(
              r.slice(1).map((x) => x.retryAfter),
              [1, 2, 4, 8],
              algorithm,
            );
            const t = Date.now();
            await until(t + 1500);
            assert.equal(
              (await fetch(url).then(consume)).status,
              429,
              `${algorithm}: the backoff ended with the window`,
            );
          }),
        );
      });
    }

    if (atLeast('@fastify/rate-limit', '11.1.0')) {
      test("createRateLimit's { increment: false } reads the key without counting (the store's read)", async () => {
        let check;
        const url = await fastifyApp(
          redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace: unique('fread') + ':' }),
          { global: false },
          (app) => {
            check = app.createRateLimit({ max: 2, timeWindow: 60_000 });
            app.get('/peek', async (req) => {
              const { isExceeded, remaining } = await check(req, { increment: false });
              return { isExceeded, remaining };
            });
            app.get('/hit', async (req) => {
              const { isExceeded, remaining } = await check(req);
              return { isExceeded, remaining };
            });
          },
        );
        const get = async (path) => (await fetch(url + path)).json();
        assert.deepEqual(await get('/peek'), { isExceeded: false, remaining: 2 });
        assert.deepEqual(await get('/hit'), { isExceeded: false, remaining: 1 });
        assert.deepEqual(await get('/hit'), { isExceeded: false, remaining: 0 });
        assert.deepEqual(await get('/peek'), { isExceeded: false, remaining: 0 });
        assert.deepEqual(await get('/hit'), { isExceeded: true, remaining: 0 });
        assert.deepEqual(await get('/peek'), { isExceeded: true, remaining: 0 });
        assert.deepEqual(await get('/peek'), { isExceeded: true, remaining: 0 });
      });
    }

    test('ban: 1: the first denial in a window is 429, the second 403 (counted on the server, across app servers), and the count ends with the window', async () => {
      await Promise.all(
        ['counter', 'window', 'gcra'].map(async (algorithm) => {
          const nameSpace = unique(`fban-${algorithm}`) + ':';
          const options = { max: 2, timeWindow: 2000, ban: 1 };
          const one = await fastifyApp(
            redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace, algorithm }),
            options,
          );
          const two = await fastifyApp(
            redisThrottleStore(await ioredis(kind), { ...SLOW, nameSpace, algorithm }),
            options,
          );
          const statuses = [];
          let tDenied = 0;
          for (const url of [one, one, one, two, one]) {
            statuses.push((await fetch(url).then(consume)).status);
            if (statuses.length === 3) tDenied = Date.now();
          }
          assert.deepEqual(statuses, [200, 200, 429, 403, 403], algorithm);
          // When the limiter is full again (within timeWindow of the first denial's reply) the
          // denials count from zero: 429 before 403 again.
          await until(tDenied + 2300);
          const again = [];
          for (const url of [two, one, one, two]) again.push((await fetch(url).then(consume)).status);
          assert.deepEqual(again, [200, 200, 429, 403], algorithm);
        }),
      );
    });

    test('continueExceeding: each denied request renews the limitation; it ends timeWindow after the last denial', async () => {
      await Promise.all(
        ['counter', 'window', 'gcra'].map(async (algorithm) => {
          const nameSpace = unique(`fce-${algorithm}`) + ':';
          // `renewing` renews on each denial; `plain` shares its keys and does not.
          const renewing = await fastifyApp(
            redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace, algorithm }),
            { max: 2, timeWindow: 2000, continueExceeding: true },
          );
          const plain = await fastifyApp(redisThrottleStore(await ioredis(kind), { ...SLOW, nameSpace, algorithm }), {
            max: 2,
            timeWindow: 2000,
          });
          const control = await fastifyApp(
            redisThrottleStore(await nodeRedis(kind), { ...SLOW, nameSpace: unique('fcectl') + ':', algorithm }),
            { max: 2, timeWindow: 2000 },
          );
          // Times from the replies seen (a loaded machine stretches each request): the control's
          // window opened before its first reply; the renewal comes 1.2 s after that. A 2 s window
          // leaves 0.8 s for a loaded machine's stalls at each step; a renewal that did not happen
          // still shows, 0.1 s past the end of the one before.
          let tControl = 0;
          for (const url of [control, renewing]) {
            const s = [];
            for (let i = 0; i < 3; i++) {
              s.push((await fetch(url).then(consume)).status);
              if (url === control && i === 0) tControl = Date.now();
            }
            assert.deepEqual(s, [200, 200, 429], algorithm);
          }
          await until(tControl + 1200);
          const renewed = await fetch(renewing).then(consume);
          assert.equal(renewed.status, 429, algorithm);
          assert.equal(renewed.retryAfter, 2, `${algorithm}: retry-after is timeWindow`);
          await until(tControl + 2100);
          assert.equal(
            (await fetch(control).then(consume)).status,
            200,
            `${algorithm}: the window alone admits by now`,
          );
          const last = await fetch(renewing).then(consume);
          const tLast = Date.now();
          assert.equal(last.status, 429, `${algorithm}: the denial at 1.2 s renewed the limitation`);
          // A request that does not renew (the other app) is still denied before timeWindow after the last denial…
          await until(tLast + 1200);
          assert.equal(
            (await fetch(plain).then(consume)).status,
            429,
            `${algorithm}: freed before timeWindow after the last denial`,
          );
          // …and admitted after it.
          await until(tLast + 2500);
          assert.equal(
            (await fetch(plain).then(consume)).status,
            200,
            `${algorithm}: still limited timeWindow after the last denial`,
          );
        }),
      );
    });
  });
}

test('ioredis, the sliding window, and a key of another application', async () => {
  const client = await ioredis('module');
  const ns = unique('fw') + ':';
  const url = await fastifyApp(redisThrottleStore(client, { ...SLOW, nameSpace: ns, algorithm: 'window' }), {
    keyGenerator: (req) => req.headers['x-user'] ?? 'anon',
  });
  const replies = await burst(url, 100, { headers: { 'x-user': 'u1' } });
  assert.equal(replies.filter((r) => r.status === 200).length, 5);
  await client.set(`${ns}u2`, 'not a limiter');
  // Without skipOnError the plugin answers the store's error as a server error; the key is untouched.
  const r = await fetch(url, { headers: { 'x-user': 'u2' } });
  assert.equal(r.status, 500);
  assert.equal(await client.get(`${ns}u2`), 'not a limiter');
});

// The plugin's own `nameSpace` (which it hands no custom store): through withRedisThrottle it keys
// the limit, so registrations with different nameSpaces count apart and the same one together,
// exactly as with the plugin's own Redis store on the same server.
for (const kind of KINDS) {
  test(`@fastify/rate-limit's own nameSpace keys the limit, as with its Redis store (${kind})`, async () => {
    const { default: Fastify } = await import('fastify');
    const { default: rateLimit } = await import('@fastify/rate-limit');
    const { withRedisThrottle } = await import('redis-throttle-js/fastify');
    const ns = unique('ns');
    const run = async (options) => {
      const app = Fastify();
      for (const [prefix, nameSpace] of [
        ['/a', `${ns}:${options.name}:a-`],
        ['/b', `${ns}:${options.name}:b-`],
        ['/c', `${ns}:${options.name}:a-`],
      ]) {
        await app.register(
          async (scope) => {
            await scope.register(rateLimit, options.make({ max: 2, timeWindow: 60_000, nameSpace }));
            scope.get('/x', async () => 'ok');
          },
          { prefix },
        );
      }
      await app.ready();
      const statuses = [];
      for (const url of ['/a/x', '/a/x', '/a/x', '/b/x', '/b/x', '/c/x'])
        statuses.push((await app.inject({ url })).statusCode);
      await app.close();
      return statuses;
    };
    const client = await nodeRedis(kind);
    const ours = await run({ name: 'ours', make: (o) => withRedisThrottle(client, o, SLOW) });
    // /a twice, then 429; /b its own count; /c shares /a's nameSpace, so its count.
    assert.deepEqual(ours, [200, 200, 429, 200, 200, 429]);
    const raw = (args) => client.sendCommand(...(kind === 'cluster' ? [args[1], false, args] : [args]));
    assert.equal(Number(await raw(['EXISTS', `${ns}:ours:a-127.0.0.1`])), 1);
    assert.equal(Number(await raw(['EXISTS', `${ns}:ours:b-127.0.0.1`])), 1);
    const io = await ioredis(kind);
    const theirs = await run({ name: 'theirs', make: (o) => ({ ...o, redis: io }) });
    assert.deepEqual(ours, theirs);
    assert.throws(() => withRedisThrottle(client, { store: class {} }), /leave out `store`/);
  });
}
