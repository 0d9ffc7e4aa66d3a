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
  await app.init();
  // Its HTTP server listens with a backlog for a thousand connections at once on a loaded machine.
  const server = app.getHttpServer();
  await new Promise((resolve) => server.listen({ port: 0, host: '127.0.0.1', backlog: 2048 }, resolve));
  after(() => app.close());
  return `http://127.0.0.1:${server.address().port}`;
}
