// rate-limiter-flexible's own RateLimiterRedis test files (test/upstream/rate-limiter-flexible:
// the oldest major of the declared range and the newest, verbatim from its repository) run with
// RateLimiterRedisThrottle substituted for RateLimiterRedis (and RateLimiterRedisNonAtomic), on
// the cell's ioredis and node-redis, against a server of their own with the module (the files
// flush the database). Every test passes, except the ones listed in DIFFERENCES: each is a
// documented refusal at construction (the class throws before anything is sent), and the
// failure must be exactly that refusal. run.mjs runs this file in the oldest and newest cells.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { root, startServer, stopServer } from './harness.mjs';

const require = createRequire(import.meta.url);
const cell = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const installed = JSON.parse(readFileSync(require.resolve('rate-limiter-flexible/package.json'), 'utf8')).version;
const upstream = path.join(root, 'clients/node/test/upstream/rate-limiter-flexible');
const suite = readdirSync(upstream).find((v) => v.split('.')[0] === installed.split('.')[0]);

/**
 * The upstream tests that do not pass, each a refusal at construction (docs/src/guides/node.md,
 * rate-limiter-flexible): [the tests' full titles, the refusal their failure must carry].
 */
const DIFFERENCES = [
  // A Lua script of the caller's own to count with: the store runs none (RateLimiterRedis 11).
  [/ when customIncrTtlLuaScript is provided /, /^redis-throttle: customIncrTtlLuaScript is not supported/],
];
const difference = (title) => DIFFERENCES.find(([t]) => t.test(title));

// (Top-level await, not before(): Node 20.13's runner does not await a root before().)
const server = await startServer({ kind: 'module' });
const work = mkdtempSync(path.join(tmpdir(), 'rt-rlf-'));
after(() => {
  stopServer(server);
  rmSync(work, { recursive: true, force: true });
});

/**
 * A copy of rate-limiter-flexible's layout in which the test files run unchanged but for the
 * server's address: lib/ re-exports the installed version's modules, except the Redis limiters,
 * which are ours; node_modules is the cell's.
 */
function layout(version, port) {
  const lib = path.join(work, 'lib');
  const tests = path.join(work, 'test');
  mkdirSync(lib, { recursive: true });
  mkdirSync(tests, { recursive: true });
  symlinkSync(path.join(cell, 'node_modules'), path.join(work, 'node_modules'));
  const theirs = path.dirname(require.resolve('rate-limiter-flexible/lib/RateLimiterRedis.js'));
  for (const f of readdirSync(theirs, { recursive: true }).map(String))
    if (f.endsWith('.js')) {
      mkdirSync(path.dirname(path.join(lib, f)), { recursive: true });
      writeFileSync(path.join(lib, f), `module.exports = require(${JSON.stringify(path.join(theirs, f))});\n`);
    }
  const ours = "module.exports = require('redis-throttle-js/rate-limiter-flexible').RateLimiterRedisThrottle;\n";
  writeFileSync(path.join(lib, 'RateLimiterRedis.js'), ours);
  writeFileSync(path.join(lib, 'RateLimiterRedisNonAtomic.js'), ours);
  writeFileSync(
    path.join(tests, 'RedisOptions.js'),
    `module.exports = { socket: { host: '127.0.0.1', port: ${port} } };\n`,
  );
  const files = readdirSync(path.join(upstream, version)).filter((f) => f.endsWith('.test.js'));
  for (const f of files) {
    const text = readFileSync(path.join(upstream, version, f), 'utf8')
      .replaceAll('port: 6379', `port: ${port}`)
      .replaceAll('new Redis()', `new Redis(${port}, '127.0.0.1')`);
    writeFileSync(path.join(tests, f), text);
  }
  return files.map((f) => path.join(tests, f));
}

test(`rate-limiter-flexible ${installed}'s own RateLimiterRedis tests (${suite}) pass with RateLimiterRedisThrottle, but for refusals at construction`, () => {
  assert.ok(suite, `no upstream suite of rate-limiter-flexible ${installed.split('.')[0]}.x in ${upstream}`);
  const files = layout(suite, server.port);
  const mocha = require.resolve('mocha/bin/mocha.js');
  const r = spawnSync(process.execPath, [mocha, '--reporter', 'json', '--exit', '--timeout', '10000', ...files], {
    cwd: work,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  const start = r.stdout.indexOf('{\n');
  assert.ok(start >= 0, `mocha gave no report (${r.status}):\n${r.stdout}\n${r.stderr}`);
  const report = JSON.parse(r.stdout.slice(start));
  const where = (x) => `${path.basename(x.file ?? '?')}: ${x.fullTitle}`;
  const wrong = report.failures.filter((f) => !difference(f.fullTitle)?.[1].test(f.err?.message ?? ''));
  assert.deepEqual(
    wrong.map((f) => `${where(f)}: ${f.err?.message}`),
    [],
    'tests that fail otherwise than by a documented refusal at construction',
  );
  const refused = report.failures.length;
  const passedAnyway = report.passes.filter((x) => difference(x.fullTitle)).map(where);
  assert.deepEqual(passedAnyway, [], 'listed as refusals at construction, but they pass');
  assert.ok(report.stats.passes > 0 && report.stats.pending === 0, JSON.stringify(report.stats));
  console.log(
    `# rate-limiter-flexible ${suite} suite: ${report.stats.passes} passed, ${refused} refused at construction, ${report.stats.duration} ms`,
  );
});
