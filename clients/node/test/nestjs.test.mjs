// @nestjs/throttler with RedisThrottleStorage: a real NestJS app (Express platform).
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { RedisThrottleStorage } from 'redis-throttle-js/nestjs';
import { KINDS, SLOW, atLeast, burst, closeAll, counting, ioredis, nodeRedis, unique, version } from './common.mjs';
import { nestApp } from './nest-app.mjs';

after(closeAll);

// @nestjs/throttler 6 passes the limit and blockDuration to its storage; 5 calls increment(key, ttl).
const v6 = atLeast('@nestjs/throttler', '6.0.0');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const until = (t) => sleep(Math.max(0, t - Date.now()));
/** One GET: its status and Retry-After (seconds, NaN when absent). */
async function get(url) {
  const r = await fetch(url);
  await r.arrayBuffer();
  return { status: r.status, retryAfter: Number(r.headers.get('retry-after') ?? NaN) };
}

for (const kind of KINDS) {
  describe(`@nestjs/throttler on ${kind}`, () => {
    test("1,000 concurrent requests against a limit of 5 admit exactly 5 (the default window; 200 for the counter), with the throttler's headers and 429", async () => {
      for (const algorithm of ['window', 'counter']) {
        const storage = new RedisThrottleStorage(await nodeRedis(kind), {
          ...SLOW,
          prefix: unique('nest') + ':',
          algorithm,
        });
        const url = await nestApp(storage, [{ ttl: 60_000, limit: 5 }]);
        const replies = await burst(url, algorithm === 'window' ? 1000 : 200);
        const ok = replies.filter((r) => r.status === 200);
        assert.equal(ok.length, 5, algorithm);
        assert.deepEqual(
          ok.map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort(),
          [0, 1, 2, 3, 4],
          algorithm,
        );
        for (const r of ok) {
          assert.equal(r.headers.get('x-ratelimit-limit'), '5');
          const reset = Number(r.headers.get('x-ratelimit-reset'));
          assert.ok(reset >= 1 && reset <= 60, `${algorithm}: reset ${reset}`);
        }
        const denied = replies.filter((r) => r.status === 429);
        assert.equal(denied.length, replies.length - 5, algorithm);
        for (const r of denied) {
          const retry = Number(r.headers.get('retry-after'));
          assert.ok(retry >= 1 && retry <= 60, `${algorithm}: retry-after ${retry}`);
        }
      }
    });

    test(`limit 0 blocks every request (200 at once)${v6 ? ', decided without Redis' : ''}; 2.5 admits 2; ttl 0 lets every request through (@nestjs/throttler ${version('@nestjs/throttler')})`, async () => {
      const real = await nodeRedis(kind);
      const { client, keyed } = counting(real);
      const zero = await burst(
        await nestApp(new RedisThrottleStorage(client, { ...SLOW, prefix: unique('nest0') + ':' }), [
          { ttl: 60_000, limit: 0 },
        ]),
        200,
      );
      assert.equal(zero.filter((r) => r.status === 200).length, 0);
      assert.ok(zero.every((r) => r.status === 429 && Number(r.headers.get('retry-after')) >= 1));
      if (v6) assert.equal(keyed(), 0, 'the denials asked Redis');
      for (const algorithm of ['window', 'counter', ...(v6 ? ['gcra'] : [])]) {
        const half = await burst(
          await nestApp(new RedisThrottleStorage(real, { ...SLOW, prefix: unique('nest25') + ':', algorithm }), [
            { ttl: 60_000, limit: 2.5 },
          ]),
          50,
        );
        assert.equal(half.filter((r) => r.status === 200).length, 2, algorithm);
        const free = await burst(
          await nestApp(new RedisThrottleStorage(real, { ...SLOW, prefix: unique('nestttl0') + ':', algorithm }), [
            { ttl: 0, limit: 2 },
          ]),
          50,
        );
        assert.equal(free.filter((r) => r.status === 200).length, 50, algorithm);
      }
    });

    if (v6)
      test('blockDuration 3 s after a limit of 2 per 1 s (counter and gcra): the block outlasts the window, two app servers see it, requests during it do not extend it', async () => {
        // Two app servers on one Redis (one with node-redis, one with ioredis), and a control whose
        // blockDuration is 1 ms (the limiter alone), for each algorithm: all made before any request
        // (a NestJS app's start holds this process's event loop for a while: made during the other
        // algorithm's timed requests, it delayed them past GCRA's 500 ms between two admissions).
        const apps = {};
        for (const algorithm of ['counter', 'gcra']) {
          const prefix = unique(`nestblock-${algorithm}`) + ':';
          apps[algorithm] = {
            one: await nestApp(new RedisThrottleStorage(await nodeRedis(kind), { ...SLOW, prefix, algorithm }), [
              { ttl: 1000, limit: 2, blockDuration: 3000 },
            ]),
            two: await nestApp(new RedisThrottleStorage(await ioredis(kind), { ...SLOW, prefix, algorithm }), [
              { ttl: 1000, limit: 2, blockDuration: 3000 },
            ]),
            control: await nestApp(
              new RedisThrottleStorage(await nodeRedis(kind), { ...SLOW, prefix: unique('nestctl') + ':', algorithm }),
              [{ ttl: 1000, limit: 2, blockDuration: 1 }],
            ),
          };
        }
        await Promise.all(
          ['counter', 'gcra'].map(async (algorithm) => {
            const { one, two, control } = apps[algorithm];
            for (const url of [one, control]) {
              assert.deepEqual([(await get(url)).status, (await get(url)).status], [200, 200], algorithm);
            }
            const denied = await get(one);
            const tDenied = Date.now();
            assert.equal(denied.status, 429, algorithm);
            assert.equal(denied.retryAfter, 3, `${algorithm}: Retry-After of the blocking denial`);
            assert.equal((await get(control)).status, 429, algorithm);
            const shared = await get(two);
            assert.equal(shared.status, 429, `${algorithm}: the other app server sees the block`);
            assert.ok(shared.retryAfter >= 2 && shared.retryAfter <= 3, `${algorithm}: ${shared.retryAfter}`);
            // 1.2 s after the denial (the control's window, opened before it, has ended): the window
            // alone admits again (the control does), the block does not.
            await until(tDenied + 1200);
            assert.equal((await get(control)).status, 200, `${algorithm}: the limiter alone admits by now`);
            const during = await get(two);
            assert.equal(during.status, 429, `${algorithm}: admitted during the block`);
            assert.ok(
              during.retryAfter >= 1 && during.retryAfter <= 2,
              `${algorithm}: Retry-After ${during.retryAfter} during the block`,
            );
            assert.equal((await get(one)).status, 429, algorithm);
            // In the block's last ttl (its wait now looks like the limiter's own): denied, not extended.
            await until(tDenied + 2400);
            assert.equal((await get(two)).status, 429, `${algorithm}: admitted during the block's last ttl`);
            // The block ends 3 s after the blocking denial (the denials since did not extend it).
            await until(tDenied + 3300);
            assert.equal((await get(one)).status, 200, `${algorithm}: still blocked after blockDuration`);
          }),
        );
      });

    if (v6)
      test('the default (sliding window, blockDuration = ttl): denied until one ttl after the denial, not when the oldest hit leaves', async () => {
        const prefix = unique('nestwin') + ':';
        const one = await nestApp(new RedisThrottleStorage(await nodeRedis(kind), { ...SLOW, prefix }), [
          { ttl: 1500, limit: 2 },
        ]);
        const two = await nestApp(new RedisThrottleStorage(await ioredis(kind), { ...SLOW, prefix }), [
          { ttl: 1500, limit: 2 },
        ]);
        const control = await nestApp(
          new RedisThrottleStorage(await nodeRedis(kind), { ...SLOW, prefix: unique('nestwinctl') + ':' }),
          [{ ttl: 1500, limit: 2, blockDuration: 1 }],
        );
        const t0 = Date.now();
        let tFirst = 0; // (the control's first hit is logged by this time)
        for (const url of [one, control]) {
          assert.equal((await get(url)).status, 200);
          tFirst = Date.now();
        }
        await until(t0 + 600);
        for (const url of [one, control]) assert.equal((await get(url)).status, 200);
        await until(t0 + 900);
        const denied = await get(one);
        const tDenied = Date.now();
        assert.equal(denied.status, 429);
        assert.equal(denied.retryAfter, 2, 'Retry-After: one ttl (1.5 s), rounded up');
        assert.equal((await get(control)).status, 429);
        // 1.8 s: the first hit left the window (the control admits), the block holds on both servers.
        await until(Math.max(t0 + 1800, tFirst + 1550));
        assert.equal((await get(control)).status, 200, 'the plain sliding window admits by now');
        assert.equal((await get(two)).status, 429, 'admitted before one ttl after the denial');
        assert.equal((await get(one)).status, 429);
        // One ttl after the denial the count starts from zero: the limit again, then denied.
        await until(tDenied + 1800);
        assert.deepEqual([(await get(two)).status, (await get(one)).status, (await get(one)).status], [200, 200, 429]);
      });
  });
}

if (!v6) {
  test("@nestjs/throttler 5 (increment(key, ttl), no limit given): algorithm 'gcra' is refused at construction, naming it", () => {
    assert.throws(
      () => new RedisThrottleStorage({ sendCommand: async () => null }, { algorithm: 'gcra' }),
      /algorithm 'gcra' needs @nestjs\/throttler 6/,
    );
  });
}

if (v6) {
  test("algorithm 'window' with a blockDuration other than ttl: the documented difference is said, once, as a warning", async () => {
    const warnings = [];
    const listen = (w) => w.name === 'RedisThrottleWarning' && warnings.push(w.message);
    process.on('warning', listen);
    try {
      const url = await nestApp(
        new RedisThrottleStorage(await nodeRedis('module'), { ...SLOW, prefix: unique('nestwarn') + ':' }),
        [{ ttl: 1000, limit: 1, blockDuration: 5000 }],
      );
      assert.deepEqual(
        [(await fetch(url)).status, (await fetch(url)).status, (await fetch(url)).status],
        [200, 429, 429],
      );
      await new Promise((r) => setImmediate(r));
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
      assert.match(warnings[0], /algorithm 'window' blocks for one ttl \(1000 ms\), not blockDuration \(5000 ms\)/);
    } finally {
      process.off('warning', listen);
    }
  });
}

test('a named throttler and the fixed-window option', async () => {
  const storage = new RedisThrottleStorage(await nodeRedis('module'), {
    ...SLOW,
    prefix: unique('nest2') + ':',
    algorithm: 'counter',
  });
  const url = await nestApp(storage, [
    { name: 'short', ttl: 1000, limit: 2 },
    { name: 'long', ttl: 60_000, limit: 3 },
  ]);
  const replies = await burst(url, 50);
  assert.equal(replies.filter((r) => r.status === 200).length, 2);
  assert.equal(replies.find((r) => r.status === 200).headers.get('x-ratelimit-limit-long'), '3');
  assert.ok(replies.find((r) => r.status === 429).headers.get('retry-after-short'));
});
