// The package as users get it, outside the checkout: `npm install <checkout>/clients/node` of a
// checkout without dist/ builds it (prepare) and imports; `npm pack` there gives a tarball with
// dist/, the twin and the repository's LICENSE; installed in a clean directory, its CLI loads the
// twin into a plain redis-server and express-rate-limit answers 429 through the store. (The app's
// host libraries, express, express-rate-limit and redis, are this cell's: the package under test
// is the tarball's.) test/run.mjs runs this file in one cell (its ONCE): the npm and Node.js it
// tests are that cell's, first on PATH.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { promisify } from 'node:util';
import { root, startServer, stopServer, twinPath } from './harness.mjs';

const pkgDir = path.join(root, 'clients/node');
const pkg = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
const work = mkdtempSync(path.join(tmpdir(), 'rt-node-install-'));
const servers = [];
after(() => {
  for (const s of servers) stopServer(s);
  rmSync(work, { recursive: true, force: true });
});

/** Runs a command; fails the test with its output when it exits non-zero. */
async function sh(cwd, file, args, env = {}) {
  try {
    return await promisify(execFile)(file, args, { cwd, env: { ...process.env, ...env }, maxBuffer: 1 << 26 });
  } catch (e) {
    throw new Error(`${file} ${args.join(' ')} (in ${cwd}) failed: ${e.stdout ?? ''}${e.stderr ?? e.message}`);
  }
}
const npm = (cwd, ...args) => sh(cwd, 'npm', [...args, '--no-audit', '--no-fund']);

/** A checkout as git has it (no dist/, no clients/node/LICENSE), sharing clients/node's installed dev tools. */
function checkout() {
  const co = path.join(work, 'checkout');
  const node = path.join(co, 'clients/node');
  mkdirSync(path.join(co, 'functions'), { recursive: true });
  cpSync(twinPath, path.join(co, 'functions/throttle.lua'));
  cpSync(path.join(root, 'LICENSE'), path.join(co, 'LICENSE'));
  for (const f of [
    'src',
    'scripts',
    'package.json',
    'package-lock.json',
    'tsconfig.json',
    'tsconfig.cjs.json',
    'README.md',
  ])
    cpSync(path.join(pkgDir, f), path.join(node, f), { recursive: true });
  symlinkSync(path.join(pkgDir, 'node_modules'), path.join(node, 'node_modules'));
  return node;
}

/** Makes the host libraries of the app (this cell's, already installed) resolvable from `app`. */
function hostLibraries(app, names) {
  for (const name of names)
    symlinkSync(path.join(process.cwd(), 'node_modules', name), path.join(app, 'node_modules', name));
}

test(`npm ${(await sh(work, 'npm', ['--version'])).stdout.trim()} on Node.js ${process.versions.node}: npm install <checkout>/clients/node builds dist (prepare) and imports; npm pack packs it with the LICENSE; the tarball, installed in a clean directory, loads the twin with its CLI and express-rate-limit answers 429`, async () => {
  const src = checkout();
  const linked = path.join(work, 'from-checkout');
  mkdirSync(linked);
  writeFileSync(
    path.join(linked, 'package.json'),
    JSON.stringify({ name: 'from-checkout', version: '1.0.0', private: true }),
  );
  await npm(linked, 'install', '--offline', src);
  const imported = await sh(linked, process.execPath, [
    '-e',
    "import('redis-throttle-js').then(async (m) => console.log(typeof m.Throttle, typeof m.loadTwin, (await m.twinLibrary()).version))",
  ]);
  assert.equal(imported.stdout.trim(), `function function ${pkg.version}`);

  const out = path.join(work, 'out');
  mkdirSync(out);
  await npm(src, 'pack', '--pack-destination', out);
  const [tarball] = readdirSync(out);
  assert.equal(tarball, `${pkg.name}-${pkg.version}.tgz`);
  const listed = (await sh(out, 'tar', ['tzf', tarball])).stdout.split('\n').filter(Boolean).sort();
  for (const f of [
    'package/package.json',
    'package/README.md',
    'package/LICENSE',
    'package/dist/throttle.lua',
    'package/dist/esm/cli.js',
    'package/dist/esm/index.js',
    'package/dist/esm/library.js',
    'package/dist/cjs/index.js',
    'package/dist/cjs/library.js',
    'package/dist/cjs/package.json',
  ]) {
    assert.ok(listed.includes(f), `${f} not in the tarball: ${listed.join(' ')}`);
  }
  assert.deepEqual(
    listed.filter((f) => !/^package\/(dist\/.*|package\.json|README\.md|LICENSE)$/.test(f)),
    [],
    'only dist/, package.json, README.md and LICENSE',
  );

  const app = path.join(work, 'app');
  mkdirSync(app);
  writeFileSync(
    path.join(app, 'package.json'),
    JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }),
  );
  await npm(app, 'install', '--offline', path.join(out, tarball));
  hostLibraries(app, ['express', 'express-rate-limit', 'redis']);
  assert.equal(
    readFileSync(path.join(app, 'node_modules/redis-throttle-js/LICENSE'), 'utf8'),
    readFileSync(path.join(root, 'LICENSE'), 'utf8'),
    "the package's LICENSE is the repository's",
  );

  const server = await startServer({ kind: 'plain' });
  servers.push(server);
  const loaded = await sh(app, 'npx', ['--no-install', 'redis-throttle-js', 'twin', 'load', server.url]);
  assert.match(
    loaded.stdout,
    new RegExp(
      `the Functions twin ${pkg.version.replace(/\./g, '\\.')} on 1 server:\\n  127\\.0\\.0\\.1:${server.port}  loaded`,
    ),
  );
  const printed = await promisify(execFile)('npx', ['--no-install', 'redis-throttle-js', 'twin', 'print'], {
    cwd: app,
    encoding: 'buffer',
    maxBuffer: 1 << 24,
  });
  assert.ok(Buffer.compare(printed.stdout, readFileSync(twinPath)) === 0, 'twin print of the installed package');

  writeFileSync(
    path.join(app, 'server.mjs'),
    `import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { createClient } from 'redis';
import { RedisThrottleStore } from 'redis-throttle-js/express-rate-limit';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
const client = createClient({ url: process.argv[2] });
await client.connect();
const app = express();
app.use(rateLimit({ windowMs: 60_000, limit: 2, store: new RedisThrottleStore({ sendCommand: (...a) => client.sendCommand(a) }) }));
app.get('/', (_req, res) => res.send('ok'));
const listener = app.listen(0, '127.0.0.1', async () => {
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await fetch('http://127.0.0.1:' + listener.address().port + '/')).status);
  const require = createRequire(import.meta.url);
  const cjs = require('redis-throttle-js');
  const lua = readFileSync(require.resolve('redis-throttle-js/throttle.lua'), 'utf8');
  console.log(JSON.stringify({ statuses, cjs: typeof cjs.loadTwin, lua: lua.length, from: require.resolve('redis-throttle-js') }));
  listener.close();
  await (client.close ?? client.quit).call(client);
});
`,
  );
  const { stdout } = await sh(app, process.execPath, ['server.mjs', server.url]);
  assert.deepEqual(JSON.parse(stdout), {
    statuses: [200, 200, 429],
    cjs: 'function',
    lua: readFileSync(twinPath, 'utf8').length,
    from: path.join(app, 'node_modules/redis-throttle-js/dist/cjs/index.js'),
  });
});
