// The core, Throttle, against the module, the twin alone and a 3-primary cluster, through
// node-redis and ioredis.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { Throttle, ThrottleError, sibling, slot } from 'redis-throttle-js';
import { KINDS, SLOW, closeAll, ioredis, nodeRedis, unique } from './common.mjs';

after(closeAll);

const until = (t) => new Promise((r) => setTimeout(r, Math.max(0, t - Date.now())));

for (const kind of KINDS) {
  for (const [lib, connect] of [
    ['node-redis', nodeRedis],
    ['ioredis', ioredis],
  ]) {
    describe(`${kind} through ${lib}`, () => {
      test('1,000 concurrent decisions against a limit of 5 admit exactly 5, for every algorithm', async () => {
        const t = new Throttle(await connect(kind), SLOW);
        assert.equal(await t.backend(), kind === 'twin' ? 'twin' : 'module');
        for (const algorithm of ['counter', 'window', 'throttle', 'bucket']) {
          const key = unique(algorithm);
          const call = {
            counter: () => t.counter(key, { limit: 5, windowMs: 60_000 }),
            window: () => t.window(key, { limit: 5, windowMs: 60_000 }),
            throttle: () => t.throttle(key, { maxBurst: 4, count: 5, periodMs: 60_000 }),
            bucket: () => t.bucket(key, { capacity: 5, tokens: 5, intervalMs: 60_000 }),
          }[algorithm];
          const all = await Promise.all(Array.from({ length: 1000 }, call));
          const admitted = all.filter((d) => !d.limited);
          assert.equal(admitted.length, 5, algorithm);
          assert.deepEqual(admitted.map((d) => d.remaining).sort(), [0, 1, 2, 3, 4], algorithm);
          for (const d of all.filter((d) => d.limited)) {
            assert.equal(d.limit, 5);
            assert.ok(d.retryAfterMs > 0 && d.retryAfterMs <= 60_000, `${algorithm} retry ${d.retryAfterMs}`);
          }
        }
      });

      test('block(): counter, GCRA and window limiters deny every caller until the block ends, then admit from full', async () => {
        const t = new Throttle(await connect(kind), SLOW);
        const other = new Throttle(await (lib === 'ioredis' ? nodeRedis : ioredis)(kind), SLOW);
        const tag = unique('{blk}');
        // 2 per 200 ms: the limiter alone admits again within 200 ms; the block holds 1.2 s.
        const limiters = [
          { key: `${tag}:c`, algorithm: 'counter', limit: 2, windowMs: 200 },
          { key: `${tag}:g`, algorithm: 'throttle', maxBurst: 1, count: 2, periodMs: 200 },
        ];
        const window = { key: `${tag}:w`, algorithm: 'window', limit: 2, windowMs: 1200 };
        for (const l of [...limiters, window]) assert.equal((await t.decide(l)).limited, false, l.algorithm);
        const spans = await Promise.all([...limiters.map((l) => t.block(l, 1200)), t.block(window, 5)]);
        assert.deepEqual(spans, [1200, 1200, 1200], 'the block lengths (a window blocks for one window)');
        const t0 = Date.now();
        const marker = `${tag}:m`;
        await t.block(limiters[0], 1200, { marker });
        assert.ok(Number(await t.command(marker, ['PTTL', marker])) > 1000, 'the marker expires with the block');
        await until(t0 + 500);
        for (const l of [...limiters, window]) {
          const d = await other.decide(l);
          assert.equal(d.limited, true, `${l.algorithm} admitted during its block`);
          assert.ok(d.retryAfterMs > 400 && d.retryAfterMs <= 800, `${l.algorithm}: retry ${d.retryAfterMs}`);
          assert.equal(d.remaining, 0);
        }
        // A peek (quantity 0) of the blocked GCRA key admits nothing and reports the block.
        const peek = await other.decide({ ...limiters[1], quantity: 0 });
        assert.ok(!peek.limited && peek.remaining === 0 && peek.resetAfterMs > 400, JSON.stringify(peek));
        await until(t0 + 1400);
        for (const l of [...limiters, window]) {
          const d = await other.decide(l);
          assert.deepEqual([d.limited, d.remaining], [false, 1], `${l.algorithm} after its block`);
        }
        await assert.rejects(
          t.block({ key: `${tag}:b`, algorithm: 'bucket', capacity: 2, tokens: 1, intervalMs: 100 }, 100),
          /cannot be blocked/,
        );
      });

      test('blockOnce(): the denial that goes over blocks once; a denial decided under a block that has ended since writes nothing', async () => {
        const t = new Throttle(await connect(kind), SLOW);
        const tag = unique('{once}');
        // Windows long enough that a stalled test machine still denies when blockOnce runs (a
        // counter or GCRA block replaces the key; a window's block is one window).
        const limiters = [
          { key: `${tag}:c`, algorithm: 'counter', limit: 2, windowMs: 10_000 },
          { key: `${tag}:g`, algorithm: 'throttle', maxBurst: 1, count: 2, periodMs: 10_000 },
          { key: `${tag}:w`, algorithm: 'window', limit: 2, windowMs: 1500 },
        ];
        await Promise.all(
          limiters.map(async (l) => {
            while (!(await t.decide(l)).limited);
            // Twenty app servers see the denial that goes over at once: one block, from now.
            const began = Date.now();
            const spans = await Promise.all(Array.from({ length: 20 }, () => t.blockOnce(l, 700)));
            const span = l.algorithm === 'window' ? 1500 : 700;
            assert.deepEqual(
              spans.filter((x) => x !== undefined),
              [span],
              `${l.algorithm}: ${spans}`,
            );
            // A denial during the block, whose blockOnce is delayed past the block's end (a
            // stalled app server): it must not start a second block.
            const late = await t.decide(l);
            assert.equal(late.limited, true, l.algorithm);
            const marker = sibling(l.key, ':blocked');
            while (Number(await t.command(marker, ['EXISTS', marker])) === 1)
              await new Promise((r) => setTimeout(r, 20));
            assert.ok(
              Date.now() - began >= span - 100,
              `${l.algorithm}: the marker outlived its block? ${Date.now() - began} ms`,
            );
            assert.equal(await t.blockOnce(l, 700), undefined, `${l.algorithm}: a stale denial blocked again`);
            assert.equal(
              Number(await t.command(marker, ['EXISTS', marker])),
              0,
              `${l.algorithm}: the stale denial left its marker`,
            );
            const d = await t.decide(l);
            assert.deepEqual([d.limited, d.remaining], [false, 1], `${l.algorithm} after its block`);
          }),
        );
      });

      if (kind !== 'cluster' && lib === 'node-redis') {
        test('a GCRA decision refused by a block that ends before the block is read decides again', async () => {
          const real = await connect(kind);
          // The first refusal stalls every later command until the block has ended.
          let gate = Promise.resolve();
          let stalled = false;
          const client = {
            sendCommand: async (args) => {
              await gate;
              try {
                return await real.sendCommand(args);
              } catch (e) {
                if (!stalled) {
                  stalled = true;
                  gate = new Promise((r) => setTimeout(r, 3000));
                }
                throw e;
              }
            },
          };
          const t = new Throttle(client, SLOW);
          const l = { key: unique('gone'), algorithm: 'throttle', maxBurst: 1, count: 2, periodMs: 300 };
          await t.block(l, 2000);
          const d = await t.decide(l);
          assert.equal(stalled, true, 'the decision met the block');
          assert.deepEqual([d.limited, d.remaining], [false, 1], JSON.stringify(d));
        });
      }

      test('quota: a calendar day in UTC, then the server refuses an unknown unit', async () => {
        const t = new Throttle(await connect(kind), SLOW);
        const key = unique('quota');
        const all = await Promise.all(
          Array.from({ length: 20 }, () => t.quota(key, { limit: 2, per: 'DAY', tz: '+00:00' })),
        );
        assert.equal(all.filter((d) => !d.limited).length, 2);
        const denied = all.find((d) => d.limited);
        const untilMidnight = 86_400_000 - (Date.now() % 86_400_000);
        assert.ok(Math.abs(denied.retryAfterMs - untilMidnight) < 5_000, `${denied.retryAfterMs} vs ${untilMidnight}`);
        await assert.rejects(
          t.quota(unique('q'), { limit: 2, per: 'FORTNIGHT' }),
          (e) => e instanceof ThrottleError && e.message.startsWith('ERR'),
        );
      });

      test('bad arguments give the server error and write nothing', async () => {
        const client = await connect(kind);
        const t = new Throttle(client, SLOW);
        const key = unique('bad');
        await assert.rejects(
          t.window(key, { limit: 0, windowMs: 1000 }),
          (e) => e instanceof ThrottleError && /^ERR limit must be an integer from 1/.test(e.message),
        );
        await assert.rejects(
          t.counter(key, { limit: 3, windowMs: 0 }),
          (e) => e instanceof ThrottleError && /^ERR window must be/.test(e.message),
        );
        const exists = lib === 'ioredis' ? await client.exists(key) : await client.exists(key);
        assert.equal(Number(exists), 0);
      });

      test("a key holding another application's data is refused and left as it was", async () => {
        const client = await connect(kind);
        const t = new Throttle(client, SLOW);
        const hash = `{${unique('h')}}`;
        const str = unique('s');
        if (lib === 'ioredis') {
          await client.hset(hash, 'field', 'value');
          await client.set(str, 'hello world');
        } else {
          await client.hSet(hash, 'field', 'value');
          await client.set(str, 'hello world');
        }
        await assert.rejects(
          t.counter(hash, { limit: 5, windowMs: 1000 }),
          (e) => e instanceof ThrottleError && e.message.startsWith('WRONGTYPE'),
        );
        await assert.rejects(
          t.throttle(str, { maxBurst: 4, count: 5, periodMs: 1000 }),
          (e) => e instanceof ThrottleError && /^ERR key does not hold valid CL.THROTTLE state/.test(e.message),
        );
        const h = lib === 'ioredis' ? await client.hgetall(hash) : await client.hGetAll(hash);
        assert.deepEqual({ ...h }, { field: 'value' });
        assert.equal(await client.get(str), 'hello world');
      });

      test('all(): one decision over hash-tagged keys; the binding limiter and every limiter', async () => {
        const t = new Throttle(await connect(kind), SLOW);
        const tag = unique('u');
        const second = `rl:{${tag}}:s`;
        const hour = `rl:{${tag}}:h`;
        const limiters = [
          { key: second, algorithm: 'counter', limit: 3, windowMs: 1000 },
          { key: hour, algorithm: 'window', limit: 2, windowMs: 3_600_000 },
        ];
        const d1 = await t.all(limiters);
        assert.equal(d1.limited, false);
        assert.equal(d1.binding, 1);
        assert.equal(d1.details.length, 2);
        assert.deepEqual(
          d1.details.map((d) => d.remaining),
          [2, 1],
        );
        await t.all(limiters);
        const d3 = await t.all(limiters);
        assert.equal(d3.limited, true);
        assert.equal(d3.binding, 1);
        // All or nothing: the counter was not charged by the denied call.
        const peek = await t.counter(second, { limit: 3, windowMs: 1000, quantity: 0 });
        assert.equal(peek.remaining, 1);
      });

      if (kind === 'cluster') {
        test('keys of one decision in different slots are refused before sending', async () => {
          const t = new Throttle(await connect(kind), SLOW);
          let a = unique('a');
          let b = unique('b');
          while (slot(a) === slot(b)) b += 'x';
          await assert.rejects(
            t.all([
              { key: a, algorithm: 'counter', limit: 3, windowMs: 1000 },
              { key: b, algorithm: 'counter', limit: 3, windowMs: 1000 },
            ]),
            (e) => e instanceof ThrottleError && /share a hash slot/.test(e.message) && !/CROSSSLOT/.test(e.message),
          );
        });
      }

      if (kind === 'twin') {
        test('the module-only commands are refused with a clear error', async () => {
          const t = new Throttle(await connect(kind), SLOW);
          await assert.rejects(
            t.acquire(unique('l'), { limit: 2, leaseMs: 1000, id: 'a' }),
            /Functions twin \(no module\): CL.ACQUIRE/,
          );
          await assert.rejects(t.pace(unique('p'), { count: 10, periodMs: 1000 }), /Functions twin/);
        });
      } else {
        test('leases and pacing', async () => {
          const t = new Throttle(await connect(kind), SLOW);
          const key = unique('lease');
          assert.equal((await t.acquire(key, { limit: 1, leaseMs: 60_000, id: 'a' })).limited, false);
          const b = await t.acquire(key, { limit: 1, leaseMs: 60_000, id: 'b' });
          assert.equal(b.limited, true);
          assert.ok(b.retryAfterMs > 0);
          assert.equal(await t.release(key, 'a'), true);
          assert.equal(await t.release(key, 'a'), false);
          assert.equal((await t.acquire(key, { limit: 1, leaseMs: 60_000, id: 'b' })).limited, false);
          const p = unique('pace');
          const first = await t.pace(p, { count: 10, periodMs: 1000 });
          const second = await t.pace(p, { count: 10, periodMs: 1000 });
          assert.equal(first.waitMs, 0);
          assert.ok(second.waitMs > 0 && second.waitMs <= 100, `wait ${second.waitMs}`);
        });
      }
    });
  }
}

test('a limit beyond 2^53 - 1 is refused before anything is sent; a count beyond it reads as above every limit', async () => {
  for (const kind of KINDS) {
    const client = await nodeRedis(kind);
    const t = new Throttle(client, SLOW);
    const key = unique('big');
    const raw = (args) => client.sendCommand(...(kind === 'cluster' ? [key, false, args] : [args]));
    for (const call of [
      () => t.counter(key, { limit: 2n ** 60n, windowMs: 1000 }),
      () => t.counter(key, { limit: 2 ** 60, windowMs: 1000 }),
      () => t.throttle(key, { maxBurst: 2n ** 55n, count: 1, periodMs: 1000 }),
      () => t.all([{ key, algorithm: 'counter', limit: 9007199254740993n, windowMs: 1000 }]),
    ]) {
      await assert.rejects(
        call(),
        (e) => e instanceof ThrottleError && /beyond 2\^53 - 1/.test(e.message) && /nothing was sent/.test(e.message),
        kind,
      );
    }
    assert.equal(Number(await raw(['EXISTS', key])), 0, kind);
    // Someone else's count beyond 2^53: exact replies are refused; a plain count reads Infinity.
    await raw(['SET', key, '9007199254740993', 'PX', '60000']);
    const h = await t.hit(key, 60_000);
    assert.equal(h.count, Infinity, kind);
    assert.equal((await t.count(key)).count, Infinity, kind);
  }
});

test("slot() is Redis Cluster's: CLUSTER KEYSLOT agrees", async () => {
  const c = await nodeRedis('cluster');
  for (const key of ['a', 'user:1000', 'rl:{user42}:s', '{}x', 'x{}{y}', 'ünïcode']) {
    const master = c.masters[0];
    const node = await c.nodeClient(master);
    assert.equal(slot(key), Number(await node.sendCommand(['CLUSTER', 'KEYSLOT', key])), key);
    // A key's sibling (its ban count, its block marker) shares its slot.
    const ban = sibling(key, ':ban');
    assert.ok(ban.endsWith(`${key}:ban`), ban);
    assert.equal(Number(await node.sendCommand(['CLUSTER', 'KEYSLOT', ban])), slot(key), ban);
  }
});

test('CommonJS: every entry point loads with require()', async () => {
  const { createRequire } = await import('node:module');
  const require = createRequire(import.meta.url);
  assert.equal(typeof require('redis-throttle-js').Throttle, 'function');
  assert.equal(typeof require('redis-throttle-js/express-rate-limit').RedisThrottleStore, 'function');
  assert.equal(typeof require('redis-throttle-js/rate-limiter-flexible').RateLimiterUnionAtomic, 'function');
  assert.equal(typeof require('redis-throttle-js/nestjs').RedisThrottleStorage, 'function');
  assert.equal(typeof require('redis-throttle-js/fastify').redisThrottleStore, 'function');
});

test("this cell's node-redis, client and cluster made by hand, works the same", async () => {
  const redis = await import('redis');
  const { ports } = await import('./common.mjs');
  const client = redis.createClient({ url: `redis://127.0.0.1:${ports.module}` });
  const cluster = redis.createCluster({ rootNodes: ports.cluster.map((p) => ({ url: `redis://127.0.0.1:${p}` })) });
  for (const c of [client, cluster]) c.on('error', () => {});
  await client.connect();
  await cluster.connect();
  try {
    for (const c of [client, cluster]) {
      const t = new Throttle(c, SLOW);
      const key = unique('v4');
      const all = await Promise.all(Array.from({ length: 200 }, () => t.counter(key, { limit: 5, windowMs: 60_000 })));
      assert.equal(all.filter((d) => !d.limited).length, 5);
      await assert.rejects(t.counter(key, { limit: 0, windowMs: 60_000 }), /^ThrottleError: ERR limit must be/);
    }
    assert.equal(new Throttle(cluster).cluster, true);
    assert.equal(new Throttle(client, SLOW).cluster, false);
  } finally {
    await (client.close ?? client.quit).call(client);
    await (cluster.close ?? cluster.quit).call(cluster);
  }
});
