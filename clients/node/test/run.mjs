// npm test: every test file at every version the package declares, against shared servers.
//
// The matrix: each folder of test/matrix holds a package.json and its lockfile pinning one
// version of every host library and Redis client (the oldest and the newest of each declared
// peer range, and versions between). This script packs the package (npm pack, as users get it),
// installs each cell (`npm ci` when its node_modules is older than its lockfile), unpacks the
// tarball into the cell's node_modules, copies the test files beside it (so they import the
// cell's versions), starts the servers once (module, twin only, a 3-primary cluster), and runs
// the cells (each its files one at a time; RT_PARALLEL cells at once, default 3). When every cell
// passes it checks that package.json's peerDependencies are exactly the tested range of each
// library (its floor the oldest version tested, its ceiling above the newest major tested) and
// writes the tested versions into the guide (docs/src/guides/node.md, between its markers).
//
// Usage: node test/run.mjs [file.test.mjs …]; RT_CELLS=oldest,newest runs only those cells.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { root, startCluster, startServer, stopServer } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkgDir = path.resolve(here, '..');
const pkg = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
const ORDER = ['oldest', 'middle', 'newest'];
const matrix = path.join(here, 'matrix');
const only = (process.env.RT_CELLS ?? '').split(',').filter(Boolean);
const cells = readdirSync(matrix)
  .filter((d) => existsSync(path.join(matrix, d, 'package.json')) && (only.length === 0 || only.includes(d)))
  .sort((a, b) => ORDER.indexOf(a) - ORDER.indexOf(b));
const files = process.argv.slice(2).map((f) => path.basename(f));
const t0 = Date.now();
const seconds = () => `${((Date.now() - t0) / 1000).toFixed(0)} s`;

function run(cmd, args, options) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...options });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}):\n${r.stdout ?? ''}${r.stderr ?? ''}`);
  return r.stdout;
}

/** The package as npm publishes it (dist, README, package.json): a tarball. */
function pack() {
  const dir = mkdtempSync(path.join(tmpdir(), 'rt-pack-'));
  const [{ filename }] = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: pkgDir }).replace(/^[^[]*/, ''));
  return path.join(dir, path.basename(filename));
}

/** `npm ci` in the cell when its node_modules is older than its lockfile (the cells install at once). */
function install(cell) {
  const dir = path.join(matrix, cell);
  const stamp = path.join(dir, 'node_modules/.package-lock.json');
  if (existsSync(stamp) && statSync(stamp).mtimeMs >= statSync(path.join(dir, 'package-lock.json')).mtimeMs) return Promise.resolve();
  console.log(`# ${cell}: npm ci`);
  return new Promise((resolve, reject) => {
    const c = spawn('npm', ['ci', '--no-audit', '--no-fund'], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    c.stderr.on('data', (d) => (err += d));
    c.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`npm ci in ${dir} failed (${code}):\n${err}`))));
  });
}

/** The tarball as the cell's node_modules/redis-throttle-js, and the test files beside it. */
function prepare(cell, tarball) {
  const dir = path.join(matrix, cell);
  const target = path.join(dir, 'node_modules', pkg.name);
  rmSync(target, { recursive: true, force: true });
  mkdirSync(target, { recursive: true });
  run('tar', ['-xzf', tarball, '-C', target, '--strip-components=1']);
  const tests = path.join(dir, 'test');
  rmSync(tests, { recursive: true, force: true });
  mkdirSync(tests);
  for (const f of readdirSync(here)) if (f.endsWith('.mjs') && f !== 'run.mjs') copyFileSync(path.join(here, f), path.join(tests, f));
  const chosen = (files.length ? files : readdirSync(tests).filter((f) => f.endsWith('.test.mjs')).sort()).map((f) => path.join(tests, f));
  return { cell, dir, files: chosen };
}

/** A cell's test files with node's test runner, one file at a time; its output, printed when it ends. */
function runCell({ cell, dir, files: list }, env) {
  return new Promise((resolve) => {
    const began = Date.now();
    const [major, minor] = process.versions.node.split('.').map(Number);
    const concurrency = major > 20 || (major === 20 && minor >= 10) ? ['--test-concurrency=1'] : [];
    const child = spawn(process.execPath, ['--test', ...concurrency, '--test-reporter=spec', ...list], { cwd: dir, env: { ...env, RT_CELL: cell } });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('exit', (code) => {
      console.log(`\n# ---- ${cell} (${((Date.now() - began) / 1000).toFixed(0)} s) ----\n${out}`);
      resolve(code ?? 1);
    });
  });
}

/** The versions each cell installed, of every peer dependency and of the frameworks under them. */
function versions(cell) {
  const of = (name) => {
    const file = path.join(matrix, cell, 'node_modules', name, 'package.json');
    return existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')).version : undefined;
  };
  const names = [...Object.keys(pkg.peerDependencies), 'express', 'fastify', '@nestjs/core'];
  return Object.fromEntries(names.map((n) => [n, of(n)]));
}

const key = (v) => v.split('.').map(Number);
const older = (a, b) => {
  const [x, y] = [key(a), key(b)];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] < y[i];
  return false;
};

/** Every peer range is `>=<oldest tested> <<newest tested major + 1>`: the floor and ceiling the cells prove. */
function checkRanges(tested) {
  const wrong = [];
  for (const [name, range] of Object.entries(pkg.peerDependencies)) {
    const all = tested.map((t) => t.versions[name]).filter(Boolean);
    if (all.length === 0) {
      wrong.push(`${name}: no cell installs it`);
      continue;
    }
    const oldest = all.reduce((a, b) => (older(b, a) ? b : a));
    const newest = Math.max(...all.map((v) => key(v)[0]));
    const want = `>=${oldest} <${newest + 1}`;
    if (range !== want) wrong.push(`${name}: package.json says "${range}", the cells test "${want}"`);
  }
  if (wrong.length) throw new Error(`peerDependencies are not the tested ranges:\n  ${wrong.join('\n  ')}`);
}

/** The tested versions, written by this run into the guide, between its two markers. */
function writeTable(tested, server) {
  const rows = [
    ['express-rate-limit', 'express-rate-limit', (v) => `${v['express-rate-limit']} (express ${v.express})`],
    ['rate-limiter-flexible', 'rate-limiter-flexible', (v) => v['rate-limiter-flexible']],
    ['@nestjs/throttler', '@nestjs/throttler', (v) => `${v['@nestjs/throttler']} (NestJS ${v['@nestjs/core']})`],
    ['@fastify/rate-limit', '@fastify/rate-limit', (v) => `${v['@fastify/rate-limit']} (fastify ${v.fastify})`],
    ['node-redis (`redis`)', 'redis', (v) => v.redis],
    ['ioredis', 'ioredis', (v) => v.ioredis],
  ];
  const begin = '<!-- tested versions: written by clients/node/test/run.mjs (make test-node) when every cell passes -->';
  const end = '<!-- end of tested versions -->';
  const table = [
    begin,
    `| library | declared range | ${tested.map((t) => t.cell).join(' | ')} |`,
    `|---|---|${tested.map(() => '---|').join('')}`,
    ...rows.map(([label, peer, cellText]) => `| ${label} | \`${pkg.peerDependencies[peer]}\` | ${tested.map((t) => cellText(t.versions)).join(' | ')} |`),
    '',
    `Each cell ran every test file against Redis ${server} with the module, with only the Functions twin, and on a 3-primary cluster, on Node.js ${process.versions.node.split('.')[0]}.`,
    end,
  ].join('\n');
  const guide = path.join(root, 'docs/src/guides/node.md');
  const text = readFileSync(guide, 'utf8');
  const [a, b] = [text.indexOf(begin), text.indexOf(end)];
  if (a < 0 || b < a) throw new Error(`${guide}: the tested versions' markers are missing`);
  writeFileSync(guide, text.slice(0, a) + table + text.slice(b + end.length));
}

const started = [];
let code = 1;
try {
  const tarball = pack();
  await Promise.all(cells.map(install));
  const prepared = cells.map((c) => prepare(c, tarball));
  console.log(`# packed ${path.basename(tarball)}; cells ready: ${cells.join(', ')} (${seconds()})`);
  const [mod, twin, cluster] = await Promise.all([startServer({ kind: 'module' }), startServer({ kind: 'twin' }), startCluster()]);
  started.push(mod, twin, ...cluster.nodes);
  const env = { ...process.env, RT_ROOT: root, RT_MODULE_PORT: String(mod.port), RT_TWIN_PORT: String(twin.port), RT_CLUSTER_PORTS: cluster.ports.join(',') };
  // The cells share the servers (every test uses keys of its own).
  const parallel = Math.max(1, Number(process.env.RT_PARALLEL ?? 3));
  const queue = [...prepared];
  const results = [];
  await Promise.all(
    Array.from({ length: Math.min(parallel, queue.length) }, async () => {
      for (let c = queue.shift(); c; c = queue.shift()) results.push({ cell: c.cell, code: await runCell(c, env) });
    }),
  );
  const failed = results.filter((r) => r.code !== 0).map((r) => r.cell);
  console.log(`\n# cells: ${results.map((r) => `${r.cell} ${r.code === 0 ? 'ok' : 'FAILED'}`).join(', ')} (${seconds()})`);
  code = failed.length ? 1 : 0;
  if (code === 0 && files.length === 0 && only.length === 0) {
    const tested = cells.map((cell) => ({ cell, versions: versions(cell) }));
    checkRanges(tested);
    const server = execFileSync(process.env.THROTTLE_SERVER ?? 'redis-server', ['--version'], { encoding: 'utf8' }).match(/v=(\S+)/)?.[1] ?? '?';
    writeTable(tested, server);
    console.log('# peerDependencies match the tested ranges; the tested versions written into docs/src/guides/node.md');
  }
} catch (e) {
  console.error(e);
  code = 1;
} finally {
  for (const s of started) stopServer(s);
}
process.exit(code);
