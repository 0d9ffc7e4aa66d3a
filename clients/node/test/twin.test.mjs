// The twin inside the package: loadTwin and the CLI (`twin load`, `twin print`) of the package as
// this cell installed it, with this cell's node-redis and ioredis, against plain servers (no
// module), servers holding an older, newer or unversioned twin, and every primary of a 3-primary
// cluster without the module (this file's own: it loads, deletes and replaces the library and
// adds ACL users, which the other files and cells, on the shared servers, must not see); the
// warning for an outdated twin, once; the error naming the loader command on a server with
// neither the module nor the twin.
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import IORedis from 'ioredis';
import { createClient, createCluster } from 'redis';
import { Throttle, ThrottleError, TwinDowngradeError, loadTwin, twinLibrary } from 'redis-throttle-js';
import { unique, version as installed } from './common.mjs';
import { freePort, startCluster, startServer, stopServer, twinPath } from './harness.mjs';

// The package this cell installed (the tarball's), its CLI as package.json's bin names it.
const home = path.dirname(createRequire(import.meta.url).resolve('redis-throttle-js/package.json'));
const pkg = JSON.parse(readFileSync(path.join(home, 'package.json'), 'utf8'));
const cli = path.join(home, pkg.bin['redis-throttle-js']);
const nodeRedis = `node-redis ${installed('redis')}`;
const ioredis = `ioredis ${installed('ioredis')}`;
const shipped = readFileSync(twinPath, 'utf8');
/** What the packaged library's cl_version answers once loaded (null for a library from before cl_version existed). */
const stated = shipped.includes('cl_version') ? pkg.version : null;

/** A library `throttle` that only states `version` (null: one without cl_version, as twins before it). */
const fake = (version) =>
  version === null
    ? "#!lua name=throttle\nredis.register_function('cl_dummy', function() return 1 end)\n"
    : `#!lua name=throttle\nredis.register_function{function_name='cl_version', callback=function() return '${version}' end, flags={'no-writes'}}\n`;

/** Runs the CLI; its exit code, stdout and stderr. */
async function run(...args) {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [cli, ...args], { maxBuffer: 1 << 24 });
    return { code: 0, stdout, stderr };
  } catch (e) {
    if (typeof e.code !== 'number') throw e;
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const servers = [];
const clients = [];
/** node-redis 5+ close(), 4 quit(); ioredis quit(). */
const close = (c) => (c.close ?? c.quit).call(c);
async function plain() {
  const s = await startServer({ kind: 'plain' });
  servers.push(s);
  const c = createClient({ url: s.url });
  c.on('error', () => {});
  await c.connect();
  clients.push(c);
  return { server: s, c };
}
const loads = async (c) => {
  const stats = String(await c.sendCommand(['INFO', 'commandstats']));
  return Number(/^cmdstat_function\|load:calls=(\d+)/m.exec(stats)?.[1] ?? 0);
};
const version = (c) => c.sendCommand(['FCALL_RO', 'cl_version', '0']);

/**
 * This file's 3-primary cluster, without the module: started as the module loads (top-level
 * await, not a root before() hook, which Node.js 20.13's test runner does not await).
 */
const cluster = await startCluster({ kind: 'plain' });
servers.push(...cluster.nodes);

after(async () => {
  for (const c of clients.splice(0)) {
    try {
      // node-redis 5+ destroy(), 4 and ioredis disconnect(): closed at once, whatever is pending.
      if (typeof c.destroy === 'function') c.destroy();
      else await c.disconnect();
    } catch {}
  }
  for (const s of servers) stopServer(s);
});

test('twin print writes functions/throttle.lua byte for byte, and twinLibrary() holds the same text and the package version', async () => {
  const r = await promisify(execFile)(process.execPath, [cli, 'twin', 'print'], {
    encoding: 'buffer',
    maxBuffer: 1 << 24,
  });
  assert.ok(Buffer.compare(r.stdout, readFileSync(twinPath)) === 0, 'twin print differs from functions/throttle.lua');
  const { library, version: v } = await twinLibrary();
  assert.equal(library, shipped);
  assert.equal(v, pkg.version);
  assert.equal((await run('--version')).stdout.trim(), pkg.version);
});

test('the CLI: --help, exit code 2 on usage errors, 1 when the server cannot be reached', async () => {
  const help = await run('--help');
  assert.equal(help.code, 0);
  assert.match(help.stdout, /twin load \[URL\] \[--cluster\] \[--force\]/);
  for (const bad of [
    [],
    ['twin'],
    ['twin', 'unload'],
    ['twin', 'load', '--frobnicate'],
    ['twin', 'load', 'http://x:1'],
    ['twin', 'print', 'extra'],
  ]) {
    const r = await run(...bad);
    assert.equal(r.code, 2, `${bad.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /Usage:/);
  }
  const server = await startServer({ kind: 'plain' });
  stopServer(server);
  const down = await run('twin', 'load', server.url);
  assert.equal(down.code, 1);
  assert.match(down.stderr, new RegExp(`cannot connect to 127\\.0\\.0\\.1:${server.port}`));
});

describe('loadTwin on a server without the module', () => {
  for (const [lib, open] of [
    [nodeRedis, (s) => createClient({ url: s.url })],
    [ioredis, (s) => new IORedis(s.url)],
  ]) {
    test(`${lib}: loads, reports the versions, answers decisions; loading again sends nothing`, async () => {
      const { server, c } = await plain();
      const client = await open(server);
      client.on('error', () => {});
      if (lib === nodeRedis) await client.connect();
      clients.push(client);
      const report = await loadTwin(client);
      assert.deepEqual(report, {
        version: pkg.version,
        nodes: [{ node: `127.0.0.1:${server.port}`, before: null, after: stated, action: 'loaded' }],
      });
      const t = new Throttle(client);
      assert.equal(await t.backend(), 'twin');
      const key = unique('first');
      const decisions = [];
      for (let i = 0; i < 3; i++) decisions.push(await t.throttle(key, { maxBurst: 1, count: 2, periodMs: 60_000 }));
      assert.deepEqual(
        decisions.map((d) => d.limited),
        [false, false, true],
      );
      const sent = await loads(c);
      const again = await loadTwin(client);
      assert.deepEqual(again.nodes, [
        {
          node: `127.0.0.1:${server.port}`,
          before: stated ?? 'unversioned',
          after: stated ?? 'unversioned',
          action: 'unchanged',
        },
      ]);
      assert.equal(await loads(c), sent, 'FUNCTION LOAD sent for the same library');
    });
  }

  test('an older, an unversioned and a same-version twin are replaced; the report says which', async () => {
    const { server, c } = await plain();
    await c.sendCommand(['FUNCTION', 'LOAD', fake('0.0.1')]);
    let r = await loadTwin(c);
    assert.deepEqual(r.nodes, [
      { node: `127.0.0.1:${server.port}`, before: '0.0.1', after: stated, action: 'upgraded' },
    ]);
    await c.sendCommand(['FUNCTION', 'LOAD', 'REPLACE', fake(null)]);
    r = await loadTwin(c);
    assert.deepEqual(
      r.nodes.map((n) => [n.before, n.action]),
      [['unversioned', 'upgraded']],
    );
    await c.sendCommand(['FUNCTION', 'LOAD', 'REPLACE', fake(pkg.version)]);
    r = await loadTwin(c);
    assert.deepEqual(
      r.nodes.map((n) => [n.before, n.action]),
      [[pkg.version, 'replaced']],
    );
    const cmd = await run('twin', 'load', server.url);
    assert.equal(cmd.code, 0, cmd.stderr);
    assert.match(cmd.stdout, /unchanged/);
  });

  test('a newer twin is refused (nothing loaded, both versions named) unless forced; the CLI exits 3, then 0 with --force', async () => {
    const { server, c } = await plain();
    await c.sendCommand(['FUNCTION', 'LOAD', fake('99.1.0')]);
    await assert.rejects(
      loadTwin(c),
      (e) =>
        e instanceof TwinDowngradeError &&
        e instanceof ThrottleError &&
        e.message.includes('99.1.0') &&
        e.message.includes(`this package's ${pkg.version}`),
    );
    assert.equal(await version(c), '99.1.0', 'the newer twin was replaced');
    const refused = await run('twin', 'load', server.url);
    assert.equal(refused.code, 3);
    assert.match(refused.stderr, /refusing to downgrade.*99\.1\.0.*--force/);
    assert.equal(await version(c), '99.1.0');
    const forced = await run('twin', 'load', server.url, '--force', '--json');
    assert.equal(forced.code, 0, forced.stderr);
    assert.deepEqual(JSON.parse(forced.stdout).nodes, [
      { node: `127.0.0.1:${server.port}`, before: '99.1.0', after: stated, action: 'downgraded' },
    ]);
    await c.sendCommand(['FUNCTION', 'LOAD', 'REPLACE', fake('99.1.0')]);
    const api = await loadTwin(c, { force: true });
    assert.equal(api.nodes[0].action, 'downgraded');
  });

  test('auth in the URL: user:password@ for an ACL user (with only the rights the README names), :password@ for requirepass', async () => {
    const { server, c } = await plain();
    await c.sendCommand(['ACL', 'SETUSER', 'loader', 'on', '>s3cr@t', '+@all', '~*']);
    const denied = await run('twin', 'load', `redis://loader:wrong@127.0.0.1:${server.port}`);
    assert.equal(denied.code, 1);
    assert.match(denied.stderr, /WRONGPASS/);
    const ok = await run('twin', 'load', `redis://loader:s3cr%40t@127.0.0.1:${server.port}`);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /loaded/);
    // The rights the README names for the loading user are enough.
    await c.sendCommand(['FUNCTION', 'DELETE', 'throttle']);
    await c.sendCommand([
      'ACL',
      'SETUSER',
      'minimal',
      'on',
      '>pw',
      '+function|load',
      '+function|list',
      '+fcall_ro',
      '+info',
    ]);
    const minimal = await run('twin', 'load', `redis://minimal:pw@127.0.0.1:${server.port}`);
    assert.equal(minimal.code, 0, minimal.stderr);
    assert.match(minimal.stdout, /loaded/);
    await c.sendCommand(['CONFIG', 'SET', 'requirepass', 'pw']);
    const again = await run('twin', 'load', `redis://:pw@127.0.0.1:${server.port}`);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /unchanged/);
  });
});

/** A CA and a certificate for localhost and 127.0.0.1 signed by it (openssl), in a temporary folder. */
function certificates() {
  const dir = mkdtempSync(path.join(tmpdir(), 'rt-node-tls-'));
  const ssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  ssl(
    'req',
    '-x509',
    ...key,
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    '2',
    '-subj',
    '/CN=redis-throttle test CA',
  );
  ssl('req', ...key, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost');
  writeFileSync(path.join(dir, 'san'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  ssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.crt',
    '-days',
    '2',
    '-extfile',
    'san',
  );
  return dir;
}

test('TLS: rediss:// with --cacert (by name and by address), refused without it, --insecure', async () => {
  const certs = certificates();
  try {
    const tlsPort = await freePort();
    const file = (f) => path.join(certs, f);
    const server = await startServer({
      kind: 'plain',
      args: [
        '--tls-port',
        String(tlsPort),
        '--tls-cert-file',
        file('server.crt'),
        '--tls-key-file',
        file('server.key'),
        '--tls-ca-cert-file',
        file('ca.crt'),
        '--tls-auth-clients',
        'no',
      ],
    });
    servers.push(server);
    const untrusted = await run('twin', 'load', `rediss://localhost:${tlsPort}`);
    assert.equal(untrusted.code, 1);
    assert.match(untrusted.stderr, /certificate/);
    const byName = await run('twin', 'load', `rediss://localhost:${tlsPort}`, '--cacert', file('ca.crt'));
    assert.equal(byName.code, 0, byName.stderr);
    assert.match(byName.stdout, new RegExp(`localhost:${tlsPort}  loaded`));
    const byAddress = await run('twin', 'load', `rediss://127.0.0.1:${tlsPort}`, '--cacert', file('ca.crt'));
    assert.equal(byAddress.code, 0, byAddress.stderr);
    assert.match(byAddress.stdout, /unchanged/);
    const insecure = await run('twin', 'load', `rediss://127.0.0.1:${tlsPort}`, '--insecure');
    assert.equal(insecure.code, 0, insecure.stderr);
  } finally {
    rmSync(certs, { recursive: true, force: true });
  }
});

describe('clients and the server they find', () => {
  let events = [];
  const listener = (w) => {
    if (w.code === 'REDIS_THROTTLE_TWIN_OUTDATED') events.push(w.message);
  };
  before(() => process.on('warning', listener));
  after(() => process.off('warning', listener));

  test('an older twin is warned about once per process, whatever the clients; an unversioned one too; a current one not', async () => {
    const { server, c } = await plain();
    await c.sendCommand(['FUNCTION', 'LOAD', fake('0.0.2')]);
    events = [];
    for (let i = 0; i < 3; i++) assert.equal(await new Throttle(c).backend(), 'twin');
    const io = new IORedis(server.url);
    clients.push(io);
    assert.equal(await new Throttle(io).backend(), 'twin');
    await new Promise((r) => setImmediate(r));
    assert.equal(events.length, 1, JSON.stringify(events));
    assert.match(
      events[0],
      new RegExp(
        `twin is 0\\.0\\.2, older than this package's ${pkg.version.replace(/\./g, '\\.')}: load this package's with \`npx redis-throttle-js twin load redis://127\\.0\\.0\\.1:\\d+\``,
      ),
    );
    await c.sendCommand(['FUNCTION', 'LOAD', 'REPLACE', fake(null)]);
    await new Throttle(c).backend();
    await new Throttle(c).backend();
    await new Promise((r) => setImmediate(r));
    assert.equal(events.length, 2, JSON.stringify(events));
    assert.match(events[1], /states no version/);
    for (const v of [pkg.version, '99.0.0']) {
      await c.sendCommand(['FUNCTION', 'LOAD', 'REPLACE', fake(v)]);
      await new Throttle(c).backend();
    }
    await new Promise((r) => setImmediate(r));
    assert.equal(events.length, 2, JSON.stringify(events));
  });

  test('a server with neither the module nor the twin: the error names the exact loader command', async () => {
    const { server, c } = await plain();
    const io = new IORedis({ host: '127.0.0.1', port: server.port });
    clients.push(io);
    const secured = createClient({ url: `redis://default:pw@127.0.0.1:${server.port}` });
    for (const [client, url] of [
      [c, `redis://127.0.0.1:${server.port}`],
      [io, `redis://127.0.0.1:${server.port}`],
    ]) {
      await assert.rejects(new Throttle(client).backend(), (e) => {
        assert.ok(e instanceof ThrottleError);
        assert.match(e.message, /neither the redis-throttle module .* nor its Functions library `throttle`/);
        assert.ok(e.message.includes(`\`npx redis-throttle-js twin load ${url}\``), e.message);
        return true;
      });
    }
    secured.on('error', () => {});
    assert.ok(!String(secured.options?.url).includes('PASSWORD'));
    const cmd = (await import(pathToFileURL(path.join(home, 'dist/esm/twin.js')).href)).loaderCommand(secured);
    assert.equal(
      cmd,
      `npx redis-throttle-js twin load redis://:PASSWORD@127.0.0.1:${server.port}`,
      'the password is never printed',
    );
  });

  test('a plain client connected to a cluster node is refused: the cluster has more primaries', async () => {
    const node = createClient({ url: cluster.nodes[0].url });
    node.on('error', () => {});
    await node.connect();
    clients.push(node);
    await assert.rejects(
      loadTwin(node),
      /is a node of a cluster: load the twin on every primary with a cluster client/,
    );
  });
});

describe('a 3-primary cluster', () => {
  const urls = () => cluster.nodes.map((n) => n.url);
  const ports = () => cluster.ports;
  const each = async (f) => {
    const out = [];
    for (const url of urls()) {
      const c = createClient({ url });
      c.on('error', () => {});
      await c.connect();
      try {
        out.push(await f(c));
      } finally {
        await close(c);
      }
    }
    return out;
  };
  const drop = () => each((c) => c.sendCommand(['FUNCTION', 'DELETE', 'throttle']).catch(() => null));

  test(`loadTwin (${nodeRedis} and ${ioredis} cluster clients) and the CLI load on every primary; a newer twin on one refuses them all`, async () => {
    const nodes = createCluster({ rootNodes: urls().map((url) => ({ url })) });
    nodes.on('error', () => {});
    await nodes.connect();
    clients.push(nodes);
    const report = await loadTwin(nodes);
    assert.deepEqual(
      report.nodes.map((n) => n.node).sort(),
      ports()
        .map((p) => `127.0.0.1:${p}`)
        .sort(),
    );
    assert.ok(
      report.nodes.every((n) => n.action === 'loaded' && n.before === null && n.after === stated),
      JSON.stringify(report),
    );
    assert.deepEqual(
      await each((c) => c.sendCommand(['FUNCTION', 'LIST', 'LIBRARYNAME', 'throttle']).then((l) => l.length)),
      [1, 1, 1],
    );
    // Keys of every slot range decide through the twin just loaded.
    const fcalls = () =>
      each(async (c) =>
        Number(/^cmdstat_fcall:calls=(\d+)/m.exec(String(await c.sendCommand(['INFO', 'commandstats'])))?.[1] ?? 0),
      );
    const before = await fcalls();
    const t = new Throttle(nodes);
    assert.equal(await t.backend(), 'twin');
    const keys = Array.from({ length: 60 }, (_, i) => unique(`spread${i}`));
    const decided = await Promise.all(keys.map((k) => t.counter(k, { limit: 1, windowMs: 60_000 })));
    assert.ok(decided.every((d) => !d.limited && d.limit === 1));
    const later = await fcalls();
    assert.ok(
      later.every((n, i) => n > before[i]),
      `FCALLs per primary: ${before} -> ${later}`,
    );
    const io = new IORedis.Cluster(ports().map((port) => ({ host: '127.0.0.1', port })));
    io.on('error', () => {});
    clients.push(io);
    await new Promise((r) => io.once('ready', r));
    const again = await loadTwin(io);
    assert.deepEqual(
      again.nodes.map((n) => n.action),
      ['unchanged', 'unchanged', 'unchanged'],
    );
    // As a user with only the rights the README names for a cluster.
    await each((c) =>
      c.sendCommand([
        'ACL',
        'SETUSER',
        'minimal',
        'on',
        '>pw',
        '+function|load',
        '+function|list',
        '+fcall_ro',
        '+info',
        '+cluster|nodes',
      ]),
    );
    const cmd = await run('twin', 'load', urls()[1].replace('redis://', 'redis://minimal:pw@'), '--cluster', '--json');
    assert.equal(cmd.code, 0, cmd.stderr);
    assert.deepEqual(
      JSON.parse(cmd.stdout).nodes.map((n) => n.action),
      ['unchanged', 'unchanged', 'unchanged'],
    );

    await drop();
    const newer = createClient({ url: urls()[2] });
    newer.on('error', () => {});
    await newer.connect();
    clients.push(newer);
    await newer.sendCommand(['FUNCTION', 'LOAD', fake('99.0.0')]);
    const refused = await run('twin', 'load', urls()[0]);
    assert.equal(refused.code, 3, refused.stderr);
    assert.match(
      refused.stderr,
      new RegExp(`127\\.0\\.0\\.1:${ports()[2]} has the twin 99\\.0\\.0, newer than this package's`),
    );
    assert.deepEqual(
      await each((c) => c.sendCommand(['FUNCTION', 'LIST', 'LIBRARYNAME', 'throttle']).then((l) => l.length)),
      [0, 0, 1],
      'nothing was loaded anywhere',
    );
    const forced = await loadTwin(nodes, { force: true });
    assert.deepEqual(forced.nodes.map((n) => n.action).sort(), ['downgraded', 'loaded', 'loaded']);
  });
});
