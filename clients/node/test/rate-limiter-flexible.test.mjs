// rate-limiter-flexible with RateLimiterRedisThrottle and RateLimiterUnionAtomic.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import express from 'express';
import { RateLimiterMemory, RateLimiterRes, RateLimiterUnion } from 'rate-limiter-flexible';
import { RateLimiterRedisThrottle, RateLimiterUnionAtomic } from 'redis-throttle-js/rate-limiter-flexible';
import {
  KINDS,
  SLOW,
  burst,
  closeAll,
  closeServers,
  counting,
  ioredis,
  nodeRedis,
  serve,
  unique,
  version,
} from './common.mjs';

after(closeAll);
after(closeServers);

for (const kind of KINDS) {
  describe(`rate-limiter-flexible on ${kind}`, () => {
    test('an Express app: 1,000 concurrent requests against 5 points admit exactly 5; 429 with Retry-After', async () => {
      const limiter = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: await nodeRedis(kind),
        keyPrefix: unique('rlf'),
        points: 5,
        duration: 60,
      });
      const app = express();
      app.use((req, res, next) =>
        limiter
          .consume(req.ip)
          .then((r) => {
            res.set('X-RateLimit-Remaining', String(r.remainingPoints));
            next();
          })
          .catch((r) => {
            if (!(r instanceof RateLimiterRes)) return next(r);
            res.set('Retry-After', String(Math.ceil(r.msBeforeNext / 1000)));
            res.status(429).send('Too Many Requests');
          }),
      );
      app.get('/', (_req, res) => res.send('ok'));
      const replies = await burst(await serve(app), 1000);
      const ok = replies.filter((r) => r.status === 200);
      assert.equal(ok.length, 5);
      assert.deepEqual(ok.map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort(), [0, 1, 2, 3, 4]);
      const denied = replies.filter((r) => r.status === 429);
      assert.equal(denied.length, 995);
      const retry = Number(denied[0].headers.get('retry-after'));
      assert.ok(retry >= 1 && retry <= 60);
    });

    test(`the limiter is a RateLimiterAbstract of this version (${version('rate-limiter-flexible')}): RateLimiterUnion and insuranceLimiter take it; getKey and parseKey are its`, async () => {
      const limiter = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: await nodeRedis(kind),
        keyPrefix: unique('abs'),
        points: 2,
        duration: 60,
      });
      const union = new RateLimiterUnion(limiter, new RateLimiterMemory({ keyPrefix: 'mem', points: 5, duration: 60 }));
      await union.consume('u');
      await union.consume('u');
      const rejected = await union.consume('u').then(
        () => assert.fail('admitted'),
        (e) => e,
      );
      assert.deepEqual(Object.keys(rejected), [limiter.keyPrefix]);
      const insured = new RateLimiterMemory({ points: 1, duration: 1, insuranceLimiter: undefined });
      assert.ok(
        new RateLimiterRedisThrottle({
          storeClient: await nodeRedis(kind),
          points: 1,
          duration: 1,
          insuranceLimiter: insured,
        }),
      );
      // The names this version's own limiters give (parseKey left a ':' before 6.x).
      const own = new RateLimiterMemory({ keyPrefix: limiter.keyPrefix, points: 1, duration: 1 });
      assert.equal(limiter.getKey('u'), own.getKey('u'));
      assert.equal(limiter.parseKey(limiter.getKey('u')), own.parseKey(own.getKey('u')));
    });

    test('block(key, 0) and set(key, points, 0) have no end (as RateLimiterRedis writes them); duration 0 counts forever', async () => {
      const client = await nodeRedis(kind);
      const pttl = (k) => client.sendCommand(...(kind === 'cluster' ? [k, true, ['PTTL', k]] : [['PTTL', k]]));
      for (const algorithm of ['counter', 'gcra']) {
        const limiter = new RateLimiterRedisThrottle({
          ...SLOW,
          storeClient: client,
          keyPrefix: unique('forever'),
          points: 3,
          duration: 2,
          algorithm,
        });
        const b = await limiter.block('u', 0);
        assert.equal(b.msBeforeNext, -1, algorithm);
        assert.equal(Number(await pttl(limiter.getKey('u'))), -1, `${algorithm}: the block has an expiry`);
        const denied = await limiter.consume('u').then(
          () => assert.fail(`${algorithm}: admitted after block(key, 0)`),
          (e) => e,
        );
        assert.ok(denied instanceof RateLimiterRes, `${algorithm}: ${denied}`);
        // A counter's block keeps its points until a consume opens a window on it (RateLimiterRedis's script does the same); a GCRA block stays.
        assert.ok(
          algorithm === 'counter'
            ? denied.msBeforeNext > 1000 && denied.msBeforeNext <= 2000
            : denied.msBeforeNext === -1,
          `${algorithm}: ${denied.msBeforeNext}`,
        );
      }
      const limiter = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: client,
        keyPrefix: unique('set0'),
        points: 3,
        duration: 60,
      });
      const set = await limiter.set('u', 2, 0);
      assert.deepEqual([set.consumedPoints, set.msBeforeNext], [2, -1]);
      assert.equal(Number(await pttl(limiter.getKey('u'))), -1);
      const got = await limiter.get('u');
      assert.deepEqual([got.consumedPoints, got.remainingPoints, got.msBeforeNext], [2, 1, -1]);
      const never = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: client,
        keyPrefix: unique('dur0'),
        points: 2,
        duration: 0,
      });
      for (let i = 0; i < 2; i++) assert.equal((await never.consume('u')).msBeforeNext, -1);
      const over = await never.consume('u').then(
        () => assert.fail('admitted'),
        (e) => e,
      );
      assert.deepEqual([over.remainingPoints, over.msBeforeNext, over.consumedPoints], [0, -1, 3]);
      assert.throws(
        () => new RateLimiterRedisThrottle({ storeClient: client, points: 2, duration: 0, algorithm: 'gcra' }),
        /duration 0 \(never expires\) needs algorithm 'counter'/,
      );
    });

    test('a consume of more points than the limiter has is rejected (and counted) with the time until it is repaid, never 0', async () => {
      const client = await nodeRedis(kind);
      for (const algorithm of ['counter', 'window', 'gcra']) {
        const limiter = new RateLimiterRedisThrottle({
          ...SLOW,
          storeClient: client,
          keyPrefix: unique('big'),
          points: 5,
          duration: 30,
          algorithm,
        });
        for (let i = 0; i < 3; i++) {
          const r = await limiter.consume('u', 10).then(
            () => assert.fail('admitted'),
            (e) => e,
          );
          // Counted although rejected: a window's points leave with it; GCRA's debt of 10 points
          // (6 s each) is repaid point by point.
          const most = algorithm === 'gcra' ? 60_000 * (i + 1) : 30_000;
          assert.ok(
            r instanceof RateLimiterRes && r.msBeforeNext > 0 && r.msBeforeNext <= most,
            `${algorithm}: ${r.msBeforeNext}`,
          );
        }
      }
    });

    test('inMemoryBlockOnConsumed / inMemoryBlockDuration block in memory, without asking Redis; deleteInMemoryBlockedAll and delete forget', async () => {
      const real = await nodeRedis(kind);
      for (const algorithm of ['counter', 'gcra', 'window']) {
        const { client, keyed } = counting(real);
        const limiter = new RateLimiterRedisThrottle({
          ...SLOW,
          storeClient: client,
          keyPrefix: unique('mem'),
          points: 2,
          duration: 60,
          inMemoryBlockOnConsumed: 3,
          inMemoryBlockDuration: 30,
          algorithm,
        });
        await limiter.consume('u');
        await limiter.consume('u');
        const over = await limiter.consume('u').then(
          () => assert.fail('admitted'),
          (e) => e,
        );
        assert.equal(over.msBeforeNext, 30_000, algorithm);
        const asked = keyed();
        const blocked = await Promise.allSettled(Array.from({ length: 50 }, () => limiter.consume('u')));
        assert.ok(
          blocked.every((r) => r.status === 'rejected' && r.reason.msBeforeNext > 29_000),
          algorithm,
        );
        assert.equal(keyed(), asked, `${algorithm}: Redis was asked during the in-memory block`);
        assert.ok(limiter.getInMemoryBlockMsBeforeExpire(limiter.getKey('u')) > 29_000);
        limiter.deleteInMemoryBlockedAll();
        assert.equal(limiter.getInMemoryBlockMsBeforeExpire(limiter.getKey('u')), 0);
        await limiter.consume('u').then(
          () => assert.fail('admitted'),
          () => {},
        ); // (the limiter is still full)
        assert.ok(keyed() > asked, 'Redis was not asked after deleteInMemoryBlockedAll');
        await limiter.delete('u');
        assert.equal((await limiter.consume('u')).remainingPoints, 1, algorithm);
      }
      // A threshold the limiter alone cannot report (denials take nothing there) needs counted consumes.
      assert.throws(
        () =>
          new RateLimiterRedisThrottle({
            storeClient: real,
            points: 2,
            duration: 1,
            inMemoryBlockOnConsumed: 5,
            algorithm: 'gcra',
          }),
        /inMemoryBlockOnConsumed above points \+ 1 needs algorithm 'counter'/,
      );
      assert.throws(
        () => new RateLimiterRedisThrottle({ storeClient: real, points: 5, duration: 1, inMemoryBlockOnConsumed: 2 }),
        /inMemoryBlockOnConsumed option must be greater or equal "points" option/,
      );
      const counted = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: real,
        keyPrefix: unique('mem5'),
        points: 2,
        duration: 60,
        inMemoryBlockOnConsumed: 5,
        inMemoryBlockDuration: 30,
      });
      const seen = [];
      for (let i = 0; i < 6; i++)
        seen.push(
          await counted.consume('u').then(
            (r) => r.consumedPoints,
            (r) => -r.consumedPoints,
          ),
        );
      // Every consume counted (as RateLimiterRedis counts it) until the 5th, then blocked in memory.
      assert.deepEqual(seen, [1, 2, -3, -4, -5, -0]);
    });

    test('points 0 rejects every consume (1,000 at once; 200 with an insuranceLimiter)', async () => {
      for (const insuranceLimiter of [undefined, new RateLimiterMemory({ points: 100, duration: 60 })]) {
        const limiter = new RateLimiterRedisThrottle({
          ...SLOW,
          storeClient: await nodeRedis(kind),
          keyPrefix: unique('p0'),
          points: 0,
          duration: 60,
          insuranceLimiter,
        });
        const all = await Promise.allSettled(
          Array.from({ length: insuranceLimiter ? 200 : 1000 }, () => limiter.consume('u')),
        );
        assert.equal(all.filter((r) => r.status === 'fulfilled').length, 0);
        assert.ok(all.every((r) => r.reason instanceof RateLimiterRes && r.reason.msBeforeNext > 0));
      }
    });

    test("RateLimiterRedis's count: a reward back to zero keeps 0 (and goes below), points checked as it checks them, a client not ready rejects the call", async () => {
      const client = await nodeRedis(kind);
      const limiter = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: client,
        keyPrefix: unique('rc'),
        points: 3,
        duration: 60,
      });
      const get = (k) =>
        client.sendCommand(
          ...(kind === 'cluster'
            ? [limiter.getKey(k), true, ['GET', limiter.getKey(k)]]
            : [['GET', limiter.getKey(k)]]),
        );
      await limiter.consume('a');
      await limiter.reward('a');
      assert.equal(await get('a'), '0');
      assert.equal((await limiter.get('a')).consumedPoints, 0);
      await limiter.reward('a');
      assert.equal(await get('a'), '-1');
      assert.equal((await limiter.consume('a', 4)).remainingPoints, 0); // (the reward's credit)
      await limiter.penalty('a', 5);
      assert.equal(await get('a'), '8');
      await assert.rejects(limiter.consume('b', 1.1), {
        message: 'Consuming decimal number of points is not supported by this package',
      });
      await assert.rejects(limiter.consume('b', '2.0'), {
        message: 'Consuming string different than integer values is not supported by this package',
      });
      assert.equal((await limiter.consume('b', '2')).consumedPoints, 2);
      assert.equal((await limiter.consume('b', 1.0)).consumedPoints, 3);
      for (const storeClient of [{ status: 'closed' }, { isReady: () => false }, { isReady: false }]) {
        const notReady = new RateLimiterRedisThrottle({
          storeClient,
          points: 2,
          duration: 1,
          rejectIfRedisNotReady: true,
        });
        await assert.rejects(notReady.consume('k'), { message: 'Redis connection is not ready' });
      }
      // Not a client at all: the call is rejected (or the insurance answers), not the constructor.
      const insured = new RateLimiterRedisThrottle({
        storeClient: {},
        points: 2,
        duration: 1,
        insuranceLimiter: new RateLimiterMemory({ points: 2, duration: 1 }),
      });
      assert.equal((await insured.consume('k')).remainingPoints, 1);
      await assert.rejects(
        new RateLimiterRedisThrottle({ storeClient: {}, points: 2, duration: 1 }).consume('k'),
        TypeError,
      );
    });

    test('consume, reward, penalty, get, block, delete keep their documented meaning', async () => {
      const limiter = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: await ioredis(kind),
        keyPrefix: unique('m'),
        points: 3,
        duration: 60,
      });
      const key = 'user1';
      assert.equal(await limiter.get(key), null);
      const r1 = await limiter.consume(key);
      assert.equal(r1.remainingPoints, 2);
      assert.equal(r1.consumedPoints, 1);
      assert.equal(r1.isFirstInDuration, true);
      await limiter.consume(key, 2);
      const denied = await limiter.consume(key).then(
        () => assert.fail('admitted'),
        (r) => r,
      );
      assert.ok(denied instanceof RateLimiterRes);
      assert.equal(denied.remainingPoints, 0);
      assert.ok(denied.consumedPoints > 3);
      assert.ok(denied.msBeforeNext > 0 && denied.msBeforeNext <= 60_000);
      // The fixed window counts every consume, the denied one too, as RateLimiterRedis counts it.
      const counted = 1;
      const rewarded = await limiter.reward(key, 2);
      assert.equal(rewarded.remainingPoints, 2 - counted);
      assert.equal((await limiter.get(key)).consumedPoints, 1 + counted);
      const fined = await limiter.penalty(key, 1);
      assert.equal(fined.remainingPoints, 1 - counted);
      await limiter.block(key, 30);
      const blocked = await limiter.consume(key).then(
        () => assert.fail('admitted while blocked'),
        (r) => r,
      );
      assert.ok(blocked.msBeforeNext > 29_000 && blocked.msBeforeNext <= 30_000, `${blocked.msBeforeNext}`);
      assert.equal(await limiter.delete(key), true);
      assert.equal(await limiter.delete(key), false);
      assert.equal((await limiter.consume(key)).remainingPoints, 2);
    });

    test('blockDuration blocks a key that went over its points, for gcra too', async () => {
      for (const algorithm of ['counter', 'gcra']) {
        const limiter = new RateLimiterRedisThrottle({
          ...SLOW,
          storeClient: await nodeRedis(kind),
          keyPrefix: unique('b'),
          points: 2,
          duration: 1,
          blockDuration: 20,
          algorithm,
        });
        await limiter.consume('k');
        await limiter.consume('k');
        const r = await limiter.consume('k').then(
          () => assert.fail('admitted'),
          (e) => e,
        );
        assert.equal(r.msBeforeNext, 20_000, algorithm);
        await new Promise((res) => setTimeout(res, 1100));
        // The window has passed, the block has not.
        const again = await limiter.consume('k').then(
          () => assert.fail(`admitted during the block (${algorithm})`),
          (e) => e,
        );
        assert.ok(again.msBeforeNext > 15_000, `${algorithm}: ${again.msBeforeNext}`);
      }
    });

    test('denials during a block do not extend it (only the consume that goes over blocks, as RateLimiterRedis)', async () => {
      await Promise.all(
        ['counter', 'gcra'].map(async (algorithm) => {
          const limiter = new RateLimiterRedisThrottle({
            ...SLOW,
            storeClient: await nodeRedis(kind),
            keyPrefix: unique('once'),
            points: 2,
            duration: 1,
            blockDuration: 2,
            algorithm,
          });
          await limiter.consume('k');
          await limiter.consume('k');
          const began = Date.now();
          await limiter.consume('k').then(
            () => assert.fail('admitted'),
            () => {},
          );
          // A user retrying all through the block.
          while (Date.now() - began < 1800) {
            await limiter.consume('k').then(
              () => assert.fail(`admitted during the block (${algorithm})`),
              () => {},
            );
            await new Promise((res) => setTimeout(res, 150));
          }
          await new Promise((res) => setTimeout(res, Math.max(0, 2300 - (Date.now() - began))));
          const r = await limiter
            .consume('k')
            .catch((e) =>
              assert.fail(
                `${algorithm}: still blocked ${Date.now() - began} ms after going over (${e.msBeforeNext} ms left)`,
              ),
            );
          assert.ok(r.remainingPoints >= 0, algorithm);
        }),
      );
    });

    test('RateLimiterUnionAtomic: several limiters by one CL.ALL, all or nothing', async () => {
      const client = await nodeRedis(kind);
      const perSecond = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: client,
        keyPrefix: unique('s'),
        points: 5,
        duration: 1,
      });
      const perMinute = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: client,
        keyPrefix: unique('min'),
        points: 3,
        duration: 60,
      });
      const union = new RateLimiterUnionAtomic(perSecond, perMinute);
      const key = '{user7}';
      const all = await Promise.all(
        Array.from({ length: 200 }, () =>
          union.consume(key).then(
            () => true,
            (e) => e,
          ),
        ),
      );
      assert.equal(all.filter((x) => x === true).length, 3);
      const rejected = all.find((x) => x !== true);
      assert.deepEqual(Object.keys(rejected), [perMinute.keyPrefix]);
      // The denied calls took nothing from the per-second limiter.
      assert.equal((await perSecond.get(key)).consumedPoints, 3);
    });

    test('RateLimiterUnionAtomic with a blocked GCRA limiter: denied by it, nothing taken from the others', async () => {
      const client = await nodeRedis(kind);
      const gcra = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: client,
        keyPrefix: unique('ug'),
        points: 2,
        duration: 1,
        algorithm: 'gcra',
      });
      const counter = new RateLimiterRedisThrottle({
        ...SLOW,
        storeClient: client,
        keyPrefix: unique('uc'),
        points: 5,
        duration: 60,
      });
      const union = new RateLimiterUnionAtomic(gcra, counter);
      const key = '{user8}';
      await union.consume(key);
      await gcra.block(key, 20);
      const rejected = await union.consume(key).then(
        () => assert.fail('admitted while blocked'),
        (e) => e,
      );
      assert.deepEqual(Object.keys(rejected), [gcra.keyPrefix]);
      assert.ok(rejected[gcra.keyPrefix].msBeforeNext > 19_000, `${rejected[gcra.keyPrefix].msBeforeNext}`);
      assert.equal((await counter.get(key)).consumedPoints, 1);
    });

    if (kind === 'cluster') {
      test('RateLimiterUnionAtomic refuses keys in different slots before sending', async () => {
        const client = await nodeRedis(kind);
        const a = new RateLimiterRedisThrottle({
          ...SLOW,
          storeClient: client,
          keyPrefix: 'a',
          points: 5,
          duration: 1,
        });
        const b = new RateLimiterRedisThrottle({
          ...SLOW,
          storeClient: client,
          keyPrefix: 'bb',
          points: 5,
          duration: 1,
        });
        await assert.rejects(new RateLimiterUnionAtomic(a, b).consume('user7'), /share a hash slot/);
      });
    }
  });
}

test("bad options give the server error; another application's key is refused untouched", async () => {
  const client = await nodeRedis('module');
  const bad = new RateLimiterRedisThrottle({
    ...SLOW,
    storeClient: client,
    keyPrefix: unique('bad'),
    points: 5,
    duration: 1e10,
    algorithm: 'window',
  });
  await assert.rejects(bad.consume('k'), /^ThrottleError: ERR window must be an integer/);
  // The fixed window counts as RateLimiterRedis does, in plain commands: any duration it takes.
  const long = new RateLimiterRedisThrottle({
    ...SLOW,
    storeClient: client,
    keyPrefix: unique('long'),
    points: 5,
    duration: 1e10,
  });
  assert.equal((await long.consume('k')).remainingPoints, 4);
  assert.ok(Number(await client.pTTL(long.getKey('k'))) > 1e12);
  const prefix = unique('other');
  await client.hSet(`${prefix}:k`, 'a', '1');
  const limiter = new RateLimiterRedisThrottle({
    ...SLOW,
    storeClient: client,
    keyPrefix: prefix,
    points: 5,
    duration: 1,
  });
  await assert.rejects(limiter.consume('k'), /^ThrottleError: WRONGTYPE/);
  assert.deepEqual({ ...(await client.hGetAll(`${prefix}:k`)) }, { a: '1' });
});

test("the fixed window counts a consume by one CL.COUNTER … DEBIT on the module (a MULTI on the twin); what CL.COUNTER refuses goes to RateLimiterRedis's plain commands", async () => {
  for (const kind of KINDS) {
    const real = await nodeRedis(kind);
    const { client, log } = counting(real);
    const limiter = new RateLimiterRedisThrottle({
      ...SLOW,
      storeClient: client,
      keyPrefix: unique('one'),
      points: 3,
      duration: 60,
    });
    assert.equal((await limiter.consume('k')).consumedPoints, 1);
    const from = log.length;
    const r = await limiter.consume('k', 2);
    assert.deepEqual([r.consumedPoints, r.remainingPoints, r.isFirstInDuration], [3, 0, false], kind);
    assert.ok(r.msBeforeNext > 50_000 && r.msBeforeNext <= 60_000, `${kind}: ${r.msBeforeNext}`);
    const over = await limiter.penalty('k', 2);
    assert.equal(over.consumedPoints, 5, kind);
    const denied = await limiter.consume('k').then(
      () => assert.fail('admitted'),
      (x) => x,
    );
    assert.equal(denied.consumedPoints, 6, kind);
    const sent = log.slice(from).map((c) => String(c[0]).toUpperCase());
    assert.deepEqual(
      sent,
      kind === 'twin' ? ['MULTI', 'MULTI', 'MULTI'] : ['CL.COUNTER', 'CL.COUNTER', 'CL.COUNTER'],
      kind,
    );
    // The stored count and its window's expiry, as RateLimiterRedis's script leaves them.
    const key = limiter.getKey('k');
    assert.equal(String(await real.get(key)), '6', kind);
    const ttl = Number(await real.pTTL(key));
    assert.ok(ttl > 50_000 && ttl <= 60_000, `${kind}: ${ttl}`);
    // Rewards below 0 (RateLimiterRedis's count goes there; CL.COUNTER refuses such a count):
    // the next consume counts on from it, by the plain commands.
    await limiter.reward('k', 8);
    assert.equal((await limiter.get('k')).consumedPoints, -2, kind);
    const back = await limiter.consume('k');
    assert.deepEqual([back.consumedPoints, back.remainingPoints], [-1, 4], kind);
    // Another application's string: the plain commands' error, the key untouched.
    const text = unique('text');
    const other = new RateLimiterRedisThrottle({
      ...SLOW,
      storeClient: client,
      keyPrefix: text,
      points: 3,
      duration: 60,
    });
    await real.set(other.getKey('k'), 'abc');
    await assert.rejects(other.consume('k'), /not an integer/, kind);
    assert.equal(String(await real.get(other.getKey('k'))), 'abc', kind);
  }
});
