// A real NestJS app (Express platform) guarded by @nestjs/throttler with the given storage: the
// one the NestJS tests and the twin's plain-counter test serve.
import 'reflect-metadata';
import { after } from 'node:test';
import { Controller, Get, Module } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler';

/** Listens on a free port (closed after the test file); its URL. */
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
