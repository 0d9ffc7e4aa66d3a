// @nestjs/throttler with RedisThrottleStorage: a real NestJS app (Express platform).
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { Controller, Get, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { NestFactory } from '@nestjs/core';
import { ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler';
import { RedisThrottleStorage } from 'redis-throttle/nestjs';
import { KINDS, SLOW, burst, closeAll, nodeRedis, unique } from './common.mjs';

after(closeAll);

export async function nestApp(storage, throttlers) {
  class AppController {
    hello() {
      return 'ok';
    }
  }
  Get()(AppController.prototype, 'hello', Object.getOwnPropertyDescriptor(AppController.prototype, 'hello'));
  Controller()(AppController);
  class AppModule {}
  Module({
    imports: [ThrottlerModule.forRoot({ throttlers, storage })],
    controllers: [AppController],
    providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
  })(AppModule);
  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  after(() => app.close());
  return `http://127.0.0.1:${app.getHttpServer().address().port}`;
}

for (const kind of KINDS) {
  describe(`@nestjs/throttler on ${kind}`, () => {
    test('1,000 concurrent requests against a limit of 5 admit exactly 5, with the throttler\'s headers and 429', async () => {
      const storage = new RedisThrottleStorage(await nodeRedis(kind), { ...SLOW, prefix: unique('nest') + ':' });
      const url = await nestApp(storage, [{ ttl: 60_000, limit: 5 }]);
      const replies = await burst(url, 1000);
      const ok = replies.filter((r) => r.status === 200);
      assert.equal(ok.length, 5);
      assert.deepEqual(ok.map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort(), [0, 1, 2, 3, 4]);
      for (const r of ok) {
        assert.equal(r.headers.get('x-ratelimit-limit'), '5');
        const reset = Number(r.headers.get('x-ratelimit-reset'));
        assert.ok(reset >= 1 && reset <= 60);
      }
      const denied = replies.filter((r) => r.status === 429);
      assert.equal(denied.length, 995);
      const retry = Number(denied[0].headers.get('retry-after'));
      assert.ok(retry >= 1 && retry <= 60, `retry-after ${retry}`);
    });
  });
}

test('a named throttler and the fixed-window option', async () => {
  const storage = new RedisThrottleStorage(await nodeRedis('module'), { ...SLOW, prefix: unique('nest2') + ':', algorithm: 'counter' });
  const url = await nestApp(storage, [{ name: 'short', ttl: 1000, limit: 2 }, { name: 'long', ttl: 60_000, limit: 3 }]);
  const replies = await burst(url, 50);
  assert.equal(replies.filter((r) => r.status === 200).length, 2);
  assert.equal(replies.find((r) => r.status === 200).headers.get('x-ratelimit-limit-long'), '3');
  assert.ok(replies.find((r) => r.status === 429).headers.get('retry-after-short'));
});
