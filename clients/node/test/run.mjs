// npm test: every test file at every version the package declares, against shared servers.
//
// The matrix: each folder of test/matrix holds a package.json and its lockfile pinning one
// version of every host library and Redis client (the oldest and the newest of each declared
// peer range, and versions between), and a .node-version: the Node.js it runs on (the oldest
// cell on the oldest Node the package's engines declare, the newest on the newest), installed by
// `scripts/deps.sh node` under RT_NODES (target/node/VERSION/bin), never the system's. This
// script packs the package (npm pack, as users get it), installs each cell with its own Node's
// npm (`npm ci` when its node_modules is older than its lockfile or from another Node), unpacks
// the tarball into the cell's node_modules, copies the test files beside it (so they import the
// cell's versions), starts the servers once (module, twin only, a 3-primary cluster), and runs
// the cells (each its files one at a time, on its Node; RT_PARALLEL cells at once, default 3).
// install.test.mjs, which tests the artifact rather than the host libraries, runs in one cell,
// rate-limiter-flexible's own suites in two (ONCE). When every cell passes it checks that package.json's peerDependencies are exactly the
// tested range of each library (its floor the oldest version tested, its ceiling above the newest
// major tested) and its engines.node the oldest Node tested, and writes the tested versions into
// the guide (docs/src/guides/node.md, between its markers).
//
// Usage: node test/run.mjs [file.test.mjs …]; RT_CELLS=oldest,newest runs only those cells.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
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
// The test files that run in some cells only, and why there: install.test.mjs builds the package
// from a checkout (prepare) and installs the tarball in a clean folder, which no host library's
// version changes; the oldest cell runs it with the oldest Node's npm, the one most likely to
// differ (make dist packs, and make dist-test installs, with the newest's). rlf-upstream.test.mjs
// runs rate-limiter-flexible's own suites of the oldest and the newest major of the range, which
// those two cells install.
const ONCE = { 'install.test.mjs': ['oldest'], 'rlf-upstream.test.mjs': ['oldest', 'newest'] };
const nodes = process.env.RT_NODES ?? path.resolve(root, process.env.CARGO_TARGET_DIR ?? 'target', 'node');
const t0 = Date.now();
const seconds = () => `${((Date.now() - t0) / 1000).toFixed(0)} s`;

function run(cmd, args, options) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...options });
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}):\n${r.stdout ?? ''}${r.stderr ?? ''}`);
  return r.stdout;
}

/** The folder of the packed tarball (removed when the run ends). */
let packDir;

/** The package as npm publishes it (dist, README, package.json): a tarball. */
function pack() {
  const dir = mkdtempSync(path.join(tmpdir(), 'rt-pack-'));
  packDir = dir;
  const [{ filename }] = JSON.parse(
    run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: pkgDir }).replace(/^[^[]*/, ''),
  );
  return path.join(dir, path.basename(filename));
}

/**
 * The Node.js a cell runs on (its .node-version), as installed by scripts/deps.sh node: its
 * version, its bin folder (node, npm, npx) and an environment with that folder first on PATH
 * (and none of the npm_* variables of the npm that runs this script).
 */
function runtime(cell) {
  const version = readFileSync(path.join(matrix, cell, '.node-version'), 'utf8').trim();
  const bin = path.join(nodes, version, 'bin');
  const found = spawnSync(path.join(bin, 'node'), ['--version'], { encoding: 'utf8' }).stdout?.trim();
  if (found !== `v${version}`)
    throw new Error(
      `${cell}: Node.js ${version} is not in ${bin} (found: ${found ?? 'nothing'}): \`scripts/deps.sh node\` installs it (make test-node runs it)`,
    );
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
  env.PATH = `${bin}${path.delimiter}${process.env.PATH ?? ''}`;
  return { version, bin, env };
}

/** `npm ci` in the cell with its Node's npm, unless its node_modules is newer than its lockfile and from that Node (the cells install at once). */
function install(cell, node) {
  const dir = path.join(matrix, cell);
  const stamp = path.join(dir, 'node_modules/.package-lock.json');
  const from = path.join(dir, 'node_modules/.node-version');
  const current = existsSync(stamp) && statSync(stamp).mtimeMs >= statSync(path.join(dir, 'package-lock.json')).mtimeMs;
  if (current && existsSync(from) && readFileSync(from, 'utf8') === node.version) return Promise.resolve();
  console.log(`# ${cell}: npm ci (Node.js ${node.version})`);
  return new Promise((resolve, reject) => {
    const c = spawn(path.join(node.bin, 'node'), [path.join(node.bin, 'npm'), 'ci', '--no-audit', '--no-fund'], {
      cwd: dir,
      env: node.env,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    c.stderr.on('data', (d) => (err += d));
    c.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`npm ci in ${dir} failed (${code}):\n${err}`));
      writeFileSync(from, node.version);
      resolve();
    });
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
  for (const f of readdirSync(here))
    if (f.endsWith('.mjs') && f !== 'run.mjs') copyFileSync(path.join(here, f), path.join(tests, f));
  const chosen = (
    files.length
      ? files
      : readdirSync(tests)
          .filter((f) => f.endsWith('.test.mjs'))
          .sort()
  )
    .filter((f) => (ONCE[f] ?? [cell]).includes(cell))
    .map((f) => path.join(tests, f));
  return { cell, dir, files: chosen };
}

// A cell that has not ended after this long is stopped and fails (a test file whose servers or
// clients keep its process alive would otherwise hold the run until CI's limit).
const CELL_LIMIT_S = Number(process.env.RT_CELL_LIMIT_S ?? 900);
const running = new Set();

/** A cell's test files with its Node's test runner, one file at a time; its output, printed when it ends. */
function runCell({ cell, dir, files: list }, node, env) {
  return new Promise((resolve) => {
    const began = Date.now();
    // detached: its own process group, so that a cell over its limit is stopped with its test files.
    const child = spawn(
      path.join(node.bin, 'node'),
      ['--test', '--test-concurrency=1', '--test-reporter=spec', ...list],
      { cwd: dir, env: { ...node.env, ...env, RT_CELL: cell }, detached: true },
    );
    running.add(child);
    let out = '';
    let late = false;
    const watchdog = setTimeout(() => {
      late = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
    }, CELL_LIMIT_S * 1000);
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('exit', (code) => {
      running.delete(child);
      clearTimeout(watchdog);
      const over = late
        ? `\n# ${cell}: STOPPED after ${CELL_LIMIT_S} s (RT_CELL_LIMIT_S): a test file did not end\n`
        : '';
      console.log(
        `\n# ---- ${cell} on Node.js ${node.version}: ${list.map((f) => path.basename(f)).join(' ')} (${((Date.now() - began) / 1000).toFixed(0)} s) ----\n${out}${over}`,
      );
      resolve(late ? 1 : (code ?? 1));
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

/** engines.node is `>=<the oldest cell's Node>`, and the newest cell runs the newest Node tested. */
function checkEngines(tested) {
  const all = tested.map((t) => t.node);
  const oldest = all.reduce((a, b) => (older(b, a) ? b : a));
  const newest = all.reduce((a, b) => (older(a, b) ? b : a));
  const wrong = [];
  if (pkg.engines?.node !== `>=${oldest}`)
    wrong.push(
      `package.json's engines.node is "${pkg.engines?.node}", the cells test ">=${oldest}" (the oldest Node.js they run on)`,
    );
  const at = (cell) => tested.find((t) => t.cell === cell)?.node;
  if (at('oldest') !== oldest)
    wrong.push(`the oldest cell runs Node.js ${at('oldest')}, not the oldest tested (${oldest})`);
  if (at('newest') !== newest)
    wrong.push(`the newest cell runs Node.js ${at('newest')}, not the newest tested (${newest})`);
  if (wrong.length) throw new Error(`engines is not the tested Node.js:\n  ${wrong.join('\n  ')}`);
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
  const begin =
    '<!-- tested versions: written by clients/node/test/run.mjs (make test-node) when every cell passes -->';
  const end = '<!-- end of tested versions -->';
  const once = Object.entries(ONCE)
    .map(([f, only]) => `${f} in the ${only.join(' and ')} cell${only.length > 1 ? 's' : ''}`)
    .join(', ');
  const table = [
    begin,
    `| library | declared range | ${tested.map((t) => t.cell).join(' | ')} |`,
    `|---|---|${tested.map(() => '---|').join('')}`,
    `| Node.js (\`engines\`) | \`${pkg.engines.node}\` | ${tested.map((t) => t.node).join(' | ')} |`,
    ...rows.map(
      ([label, peer, cellText]) =>
        `| ${label} | \`${pkg.peerDependencies[peer]}\` | ${tested.map((t) => cellText(t.versions)).join(' | ')} |`,
    ),
    '',
    `Each cell ran every test file (${once} only) on its Node.js against Redis ${server} with the module, with only the Functions twin, and on a 3-primary cluster.`,
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
// Interrupted: the cells (each in its own process group) and the servers go with this script.
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    for (const child of running) {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
    }
    for (const s of started) stopServer(s);
    process.exit(1);
  });
}
try {
  const runtimes = Object.fromEntries(cells.map((c) => [c, runtime(c)]));
  const tarball = pack();
  await Promise.all(cells.map((c) => install(c, runtimes[c])));
  const prepared = cells.map((c) => prepare(c, tarball));
  console.log(`# packed ${path.basename(tarball)}; cells ready: ${cells.join(', ')} (${seconds()})`);
  const [mod, twin, cluster] = await Promise.all([
    startServer({ kind: 'module' }),
    startServer({ kind: 'twin' }),
    startCluster(),
  ]);
  started.push(mod, twin, ...cluster.nodes);
  const env = {
    RT_ROOT: root,
    RT_MODULE_PORT: String(mod.port),
    RT_TWIN_PORT: String(twin.port),
    RT_CLUSTER_PORTS: cluster.ports.join(','),
  };
  // The cells share the servers (every test uses keys of its own).
  const parallel = Math.max(1, Number(process.env.RT_PARALLEL ?? 3));
  const queue = [...prepared];
  const results = [];
  await Promise.all(
    Array.from({ length: Math.min(parallel, queue.length) }, async () => {
      for (let c = queue.shift(); c; c = queue.shift())
        results.push({ cell: c.cell, code: await runCell(c, runtimes[c.cell], env) });
    }),
  );
  const failed = results.filter((r) => r.code !== 0).map((r) => r.cell);
  console.log(
    `\n# cells: ${results.map((r) => `${r.cell} ${r.code === 0 ? 'ok' : 'FAILED'}`).join(', ')} (${seconds()})`,
  );
  code = failed.length ? 1 : 0;
  if (code === 0 && files.length === 0 && only.length === 0) {
    const tested = cells.map((cell) => ({ cell, versions: versions(cell), node: runtimes[cell].version }));
    checkRanges(tested);
    checkEngines(tested);
    const server =
      execFileSync(process.env.THROTTLE_SERVER ?? 'redis-server', ['--version'], { encoding: 'utf8' }).match(
        /v=(\S+)/,
      )?.[1] ?? '?';
    writeTable(tested, server);
    console.log(
      '# peerDependencies and engines match the tested ranges; the tested versions written into docs/src/guides/node.md',
    );
  }
} catch (e) {
  console.error(e);
  code = 1;
} finally {
  for (const s of started) stopServer(s);
  if (packDir) rmSync(packDir, { recursive: true, force: true });
}
process.exit(code);
