// Redis CPU per request (INFO commandstats), instructions per request (callgrind) and requests
// per second of the same Express, rate-limiter-flexible, NestJS and Fastify apps, with the Redis
// store each replaces and with redis-throttle's (on the module, and on the Functions twin alone),
// beside the floors, in one run, per workload.
// Usage (bench/node.sh): node bench/run.mjs [requests per case]
import 'reflect-metadata';
import { createClient } from 'redis';
import IORedis from 'ioredis';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { RedisStore } from 'rate-limit-redis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import Fastify from 'fastify';
import fastifyRateLimit from '@fastify/rate-limit';
import { Controller, Get, Module } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler';
import { ThrottlerStorageRedisService } from '@nest-lab/throttler-storage-redis';
import { RedisThrottleStore } from 'redis-throttle-js/express-rate-limit';
import { RateLimiterRedisThrottle } from 'redis-throttle-js/rate-limiter-flexible';
import { RedisThrottleStorage } from 'redis-throttle-js/nestjs';
import { redisThrottleStore } from 'redis-throttle-js/fastify';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, stopServer } from '../test/harness.mjs';

const N = Number(process.argv[2] ?? 4000);
// A reply deadline no stall of a shared machine reaches: the bench measures cost, not failures.
const T = { timeoutMs: 60_000 };
const CONCURRENCY = 32;
const ROUNDS = Number(process.env.ROUNDS ?? 3);
// Two workloads, each admitting every request:
// - users: 1,000 users (the `x-user` header is the key) at 100 requests per minute each, the
//   shape of an API's per-user limit;
// - hot: one key (the client's IP) at 100,000 per minute (CL.WINDOW's largest exact limit), the
//   worst case for a log: every request finds the whole window's entries in one key.
const WORKLOADS = { users: { limit: 100, users: 1000 }, hot: { limit: 100_000, users: 0 } };
let workload = WORKLOADS.users;
const userOf = (req) => req.headers['x-user'] ?? req.ip;

// Each command's calls and µs so far (INFO and CONFIG, the bench's own, left out).
async function commandStats(c) {
  const info = String(await c.sendCommand(['INFO', 'commandstats']));
  const stats = new Map();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm))
    if (!['info', 'config'].includes(m[1])) stats.set(m[1], [Number(m[2]), Number(m[3])]);
  return stats;
}
const usecOf = (stats) => [...stats.values()].reduce((sum, [, usec]) => sum + usec, 0);
// BENCH_DETAIL=1: what each case sent, per request (calls and µs of each command).
const detail = (before, after) =>
  [...after]
    .map(([name, [calls, usec]]) => [name, calls - (before.get(name)?.[0] ?? 0), usec - (before.get(name)?.[1] ?? 0)])
    .filter(([, calls]) => calls > 0)
    .map(([name, calls, usec]) => `${name} ${(calls / N).toFixed(2)}/req ${(usec / calls).toFixed(2)} us`)
    .join(', ');

async function drive(url) {
  let sent = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (sent < N) {
        sent++;
        const headers = workload.users ? { 'x-user': `u${Math.floor(Math.random() * workload.users)}` } : {};
        const r = await fetch(url, { headers });
        await r.arrayBuffer();
        if (r.status !== 200) throw new Error(`status ${r.status}`);
      }
    }),
  );
  return N / ((performance.now() - t0) / 1000);
}

const listen = (app) =>
  new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });

async function expressApp(store) {
  const app = express();
  app.use(rateLimit({ windowMs: 60_000, limit: workload.limit, store, validate: false, keyGenerator: userOf }));
  app.get('/', (_q, r) => r.send('ok'));
  app.use((err, _q, r, _next) => {
    console.error(err);
    r.status(500).end();
  });
  const s = await listen(app);
  return {
    url: `http://127.0.0.1:${s.address().port}/`,
    close: () =>
      new Promise((r) => {
        s.closeAllConnections();
        s.close(() => r());
      }),
  };
}

async function rlfApp(limiter) {
  const app = express();
  app.use((q, r, next) =>
    limiter.consume(userOf(q)).then(
      () => next(),
      () => r.status(429).end(),
    ),
  );
  app.get('/', (_q, r) => r.send('ok'));
  const s = await listen(app);
  return {
    url: `http://127.0.0.1:${s.address().port}/`,
    close: () =>
      new Promise((r) => {
        s.closeAllConnections();
        s.close(() => r());
      }),
  };
}

async function nestApp(storage) {
  class C {
    hello() {
      return 'ok';
    }
  }
  Get()(C.prototype, 'hello', Object.getOwnPropertyDescriptor(C.prototype, 'hello'));
  Controller()(C);
  class M {}
  Module({
    imports: [
      ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: workload.limit }], storage, getTracker: userOf }),
    ],
    controllers: [C],
    providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
  })(M);
  const app = await NestFactory.create(M, { logger: false });
  await app.listen(0, '127.0.0.1');
  return { url: `http://127.0.0.1:${app.getHttpServer().address().port}/`, close: () => app.close() };
}

async function fastifyApp(opts) {
  const f = Fastify();
  await f.register(fastifyRateLimit, { max: workload.limit, timeWindow: 60_000, keyGenerator: userOf, ...opts });
  f.get('/', async () => 'ok');
  return { url: `${await f.listen({ port: 0, host: '127.0.0.1' })}/`, close: () => f.close() };
}

// The floors (rows "floor: …"): the same app and store with each limiter command replaced, on
// the wire, by the least a command keeping the limiter's state can cost Redis:
// - module: FLOOR.TOUCH (bench/floor.c, the SPEC's floor of the module API) on the same key;
//   for an exact window also FLOOR.APPEND (bench/floor.c: the same, appending an 8-byte entry
//   to the value as CL.WINDOW's log does);
// - twin, exact window: FCALL floor_log (bench/floor.lua), the four calls cl_window's hot path
//   makes, without its logic.
// A target below a floor's ratio is out of reach of any command in that row's place.
const benchDir = path.dirname(fileURLToPath(import.meta.url));
const floorModule = execFileSync('bash', [path.join(benchDir, '../../../bench/floor.sh')], { encoding: 'utf8' }).trim();
const toFloor = (args) => (/^CL\./i.test(args[0]) ? ['FLOOR.TOUCH', args[1]] : args);
const toAppendFloor = (args) => (/^CL\.WINDOW$/i.test(args[0]) ? ['FLOOR.APPEND', args[1]] : args);
const toLogFloor = (args) =>
  args[0] === 'FCALL' && args[1] === 'cl_window' ? ['FCALL', 'floor_log', '1', args[3]] : args;
// An ioredis client whose commands pass through `rewrite`: Throttle sends ioredis Command objects
// (`sendCommand`), and `call` for commands without a key.
const rewriting = (client, rewrite) =>
  new Proxy(client, {
    get(target, name) {
      const v = Reflect.get(target, name);
      if (name === 'call') return (...args) => v.apply(target, rewrite(args.map(String)));
      if (name === 'sendCommand') {
        return (command, ...rest) => {
          const [head, ...args] = rewrite([command.name, ...command.args.map(String)]);
          command.name = head;
          command.args = args;
          return v.call(target, command, ...rest);
        };
      }
      return typeof v === 'function' && name !== 'constructor' ? v.bind(target) : v;
    },
  });

// The cases of one pass, on its servers (a module server with the floor module loaded, a twin).
function casesOf({ nr, io, floor }) {
  return [
    [
      'express-rate-limit',
      'rate-limit-redis',
      'module',
      () => expressApp(new RedisStore({ prefix: 'a:', sendCommand: (...a) => nr.module.sendCommand(a) })),
    ],
    [
      'express-rate-limit',
      'redis-throttle',
      'module',
      () => expressApp(new RedisThrottleStore({ ...T, prefix: 'b:', sendCommand: (...a) => nr.module.sendCommand(a) })),
    ],
    [
      'express-rate-limit',
      'redis-throttle',
      'twin',
      () => expressApp(new RedisThrottleStore({ ...T, prefix: 'b:', sendCommand: (...a) => nr.twin.sendCommand(a) })),
    ],
    [
      'express-rate-limit',
      'floor: FLOOR.TOUCH',
      'module',
      () =>
        expressApp(
          new RedisThrottleStore({ ...T, prefix: 'f:', sendCommand: (...a) => nr.module.sendCommand(toFloor(a)) }),
        ),
    ],
    [
      'rate-limiter-flexible',
      'RateLimiterRedis',
      'module',
      () =>
        rlfApp(new RateLimiterRedis({ storeClient: io.module, keyPrefix: 'c', points: workload.limit, duration: 60 })),
    ],
    [
      'rate-limiter-flexible',
      'redis-throttle',
      'module',
      () =>
        rlfApp(
          new RateLimiterRedisThrottle({
            ...T,
            storeClient: io.module,
            keyPrefix: 'd',
            points: workload.limit,
            duration: 60,
          }),
        ),
    ],
    [
      'rate-limiter-flexible',
      'redis-throttle',
      'twin',
      () =>
        rlfApp(
          new RateLimiterRedisThrottle({
            ...T,
            storeClient: io.twin,
            keyPrefix: 'd',
            points: workload.limit,
            duration: 60,
          }),
        ),
    ],
    [
      'rate-limiter-flexible',
      'floor: FLOOR.TOUCH',
      'module',
      () =>
        rlfApp(
          new RateLimiterRedisThrottle({
            ...T,
            storeClient: floor.module,
            // (not 'f': its keys `f:<user>` would be express-rate-limit's floor's)
            keyPrefix: 'r',
            points: workload.limit,
            duration: 60,
          }),
        ),
    ],
    [
      '@nestjs/throttler',
      '@nest-lab/throttler-storage-redis',
      'module',
      () => nestApp(new ThrottlerStorageRedisService(io.module)),
    ],
    ['@nestjs/throttler', 'redis-throttle', 'module', () => nestApp(new RedisThrottleStorage(io.module, T))],
    ['@nestjs/throttler', 'redis-throttle', 'twin', () => nestApp(new RedisThrottleStorage(io.twin, T))],
    [
      '@nestjs/throttler',
      'floor: FLOOR.TOUCH',
      'module',
      () => nestApp(new RedisThrottleStorage(floor.module, { ...T, prefix: 'f:' })),
    ],
    [
      '@nestjs/throttler',
      'floor: FLOOR.APPEND (exact window)',
      'module',
      () => nestApp(new RedisThrottleStorage(floor.append, { ...T, prefix: 'g:' })),
    ],
    [
      '@nestjs/throttler',
      'floor: floor_log (exact window)',
      'twin',
      () => nestApp(new RedisThrottleStorage(floor.log, { ...T, prefix: 'f:' })),
    ],
    [
      '@nestjs/throttler',
      'redis-throttle (counter)',
      'module',
      () => nestApp(new RedisThrottleStorage(io.module, { ...T, algorithm: 'counter', prefix: 'e:' })),
    ],
    [
      '@nestjs/throttler',
      'redis-throttle (counter)',
      'twin',
      () => nestApp(new RedisThrottleStorage(io.twin, { ...T, algorithm: 'counter', prefix: 'e:' })),
    ],
    ['@fastify/rate-limit', 'its Redis store', 'module', () => fastifyApp({ redis: io.module })],
    ['@fastify/rate-limit', 'redis-throttle', 'module', () => fastifyApp({ store: redisThrottleStore(io.module, T) })],
    ['@fastify/rate-limit', 'redis-throttle', 'twin', () => fastifyApp({ store: redisThrottleStore(io.twin, T) })],
    [
      '@fastify/rate-limit',
      'floor: FLOOR.TOUCH',
      'module',
      () => fastifyApp({ store: redisThrottleStore(floor.module, { ...T, nameSpace: 'f-' }) }),
    ],
  ].filter(([host]) => !process.env.BENCH_ONLY || host.includes(process.env.BENCH_ONLY));
}

/**
 * One pass over every case and workload on fresh servers (a module server with the floor module,
 * a twin), `rounds` times, each case's figure the lowest of its rounds: `cost(server, run)` runs
 * one case's measured requests on that server and returns what they cost it per request.
 * `wrap`: a command the servers run under (valgrind). Returns the rows (requests/s included).
 */
async function pass({ rounds, cost, wrap, label }) {
  const mod = await startServer({ kind: 'module', args: ['--loadmodule', floorModule], wrap });
  const twin = await startServer({ kind: 'twin', wrap });
  const servers = { module: mod, twin };
  const rows = [];
  try {
    const admin = { module: createClient({ url: mod.url }), twin: createClient({ url: twin.url }) };
    const nr = { module: createClient({ url: mod.url }), twin: createClient({ url: twin.url }) };
    for (const c of [...Object.values(admin), ...Object.values(nr)]) await c.connect();
    const io = { module: new IORedis(mod.port), twin: new IORedis(twin.port) };
    await admin.twin.sendCommand([
      'FUNCTION',
      'LOAD',
      'REPLACE',
      readFileSync(path.join(benchDir, '../../../bench/floor.lua'), 'utf8'),
    ]);
    const floor = {
      module: rewriting(io.module, toFloor),
      append: rewriting(io.module, toAppendFloor),
      log: rewriting(io.twin, toLogFloor),
    };
    const cases = casesOf({ nr, io, floor });
    // Rounds over every case, keeping each case's lowest cost and highest rate: on a shared
    // machine the noise only ever adds time.
    for (const [name, w] of Object.entries(WORKLOADS)) {
      workload = w;
      const first = rows.length;
      for (const [host, store, server] of cases)
        rows.push({ workload: name, host, store, server, cost: Infinity, rps: 0 });
      for (let round = 0; round < rounds; round++) {
        for (const [i, [host, store, server, make]] of cases.entries()) {
          const app = await make();
          await drive(app.url); // warm up (script loads, detection, JIT)
          let rps = 0;
          const c = await cost({ server: servers[server], admin: admin[server] }, async () => {
            rps = await drive(app.url);
          });
          await app.close();
          const row = rows[first + i];
          row.cost = Math.min(row.cost, c);
          row.rps = Math.max(row.rps, rps);
          console.error(`${name}, round ${round + 1}: ${host} | ${store} | ${server} | ${label(c, rps)}`);
        }
      }
    }
    for (const c of [...Object.values(admin), ...Object.values(nr)]) await c.quit();
    for (const c of Object.values(io)) c.disconnect();
  } finally {
    stopServer(mod);
    stopServer(twin);
  }
  return rows;
}

// Redis CPU per request: the µs INFO commandstats adds up over the measured requests.
const time = async ({ admin }, run) => {
  const before = await commandStats(admin);
  await run();
  const after = await commandStats(admin);
  if (process.env.BENCH_DETAIL) console.error(`  ${detail(before, after)}`);
  return (usecOf(after) - usecOf(before)) / N;
};

// Instructions per request: the server runs under callgrind collecting inside processCommand
// only (each command whole, from its lookup to its reply, a script's or a MULTI's commands
// counted once, within it; no networking), as bench/instructions.sh's "(whole)" scenarios
// count; zeroed before the measured requests and dumped after them. Unlike time, this does not
// move with the machine's load, and it does not see caches: a command running with cold caches
// (Redis idle between requests, as here) costs more time per instruction the more code and
// data it touches.
const callgrindDir = mkdtempSync(path.join(tmpdir(), 'rt-bench-cg-'));
const CALLGRIND = [
  'valgrind',
  '--tool=callgrind',
  '--collect-atstart=no',
  '--toggle-collect=processCommand',
  `--callgrind-out-file=${callgrindDir}/cg.%p`,
];
const control = (what, pid) => execFileSync('callgrind_control', [what, String(pid)], { stdio: 'ignore' });
const instructions = async ({ server }, run) => {
  control('-z', server.pid);
  await run();
  const before = new Set(readdirSync(callgrindDir));
  control('-d', server.pid);
  const dump = readdirSync(callgrindDir).find((f) => f.startsWith(`cg.${server.pid}.`) && !before.has(f));
  if (!dump) throw new Error(`callgrind wrote no dump for ${server.pid}`);
  const text = readFileSync(path.join(callgrindDir, dump), 'utf8');
  const totals = /^(?:totals|summary): (\d+)/m.exec(text);
  if (!totals) throw new Error(`no totals in ${dump}`);
  return Number(totals[1]) / N;
};

const rows = await pass({
  rounds: ROUNDS,
  cost: time,
  label: (c, rps) => `${c.toFixed(2)} us | ${rps.toFixed(0)} req/s`,
});
// BENCH_INSTRUCTIONS=0: the timing alone (no valgrind).
const counted =
  process.env.BENCH_INSTRUCTIONS === '0'
    ? []
    : await pass({ rounds: 1, cost: instructions, wrap: CALLGRIND, label: (c) => `${Math.round(c)} instructions` });
rmSync(callgrindDir, { recursive: true, force: true });
for (const [i, r] of rows.entries()) {
  r.cpu = r.cost;
  r.ir = counted[i]?.cost;
}
// Each of our rows beside the replaced store and beside the floor of the same command's place in
// the same run (target: at most 1.1× that floor): FLOOR.TOUCH for the module's counter, GCRA and
// NestJS's counter; FLOOR.APPEND for NestJS's exact window on the module; floor_log for it on the
// twin. The twin's fixed window sends plain commands, which have no floor command of their own.
const floorOf = (r) => {
  if (!r.store.startsWith('redis-throttle')) return undefined;
  const same = (name, server) =>
    rows.find((x) => x.workload === r.workload && x.host === r.host && x.store === name && x.server === server);
  const window = r.host === '@nestjs/throttler' && r.store === 'redis-throttle';
  if (r.server === 'twin') return window ? same('floor: floor_log (exact window)', 'twin') : undefined;
  return same(window ? 'floor: FLOOR.APPEND (exact window)' : 'floor: FLOOR.TOUCH', 'module');
};
console.log(
  `| workload | host library | store | server | Redis CPU per request | vs the replaced store | vs its floor | instructions per request | vs its floor | requests/s |`,
);
console.log(`|---|---|---|---|---|---|---|---|---|---|`);
let base;
const times = (a, b) => (a !== undefined && b !== undefined ? `${(a / b).toFixed(2)}×` : '—');
for (const r of rows) {
  if (!r.store.startsWith('redis-throttle') && !r.store.startsWith('floor')) base = r;
  const ratio = r === base ? '1' : times(r.cpu, base.cpu);
  const floor = floorOf(r);
  const ir = r.ir === undefined ? '—' : Math.round(r.ir).toLocaleString('en-US');
  console.log(
    `| ${r.workload} | ${r.host} | ${r.store} | ${r.server === 'twin' ? 'twin only' : r === base ? 'its Lua script' : 'module'} | ${r.cpu.toFixed(2)} µs | ${ratio} | ${times(r.cpu, floor?.cpu)} | ${ir} | ${times(r.ir, floor?.ir)} | ${r.rps.toFixed(0)} |`,
  );
}
process.exit(0);
