// Real redis-servers on free loopback ports for the tests: with the module loaded, with only the
// Functions twin (FUNCTION LOAD of functions/throttle.lua), and a 3-primary cluster with the module.
// `run.mjs` starts the shared ones once and passes their ports to every test file by environment.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';

const here = path.dirname(fileURLToPath(import.meta.url));
// The repository (the test files also run from copies in test/matrix/<cell>/test: RT_ROOT says where).
export const root = process.env.RT_ROOT ?? path.resolve(here, '../../..');
export const modulePath = process.env.THROTTLE_MODULE ?? path.join(root, 'target/release/libredis_throttle.so');
export const twinPath = path.join(root, 'functions/throttle.lua');
const serverBin = process.env.THROTTLE_SERVER ?? 'redis-server';
const cliBin = process.env.THROTTLE_CLI ?? 'redis-cli';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function portFree(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A port nothing listens on; for a cluster node, its bus port (+10000) too. */
export async function freePort(cluster = false) {
  for (let i = 0; i < 200; i++) {
    let port;
    if (cluster) port = 20000 + Math.floor(Math.random() * 35000);
    else {
      port = await new Promise((resolve, reject) => {
        const s = net.createServer();
        s.once('error', reject);
        s.listen(0, '127.0.0.1', () => {
          const p = s.address().port;
          s.close(() => resolve(p));
        });
      });
    }
    if ((await portFree(port)) && (!cluster || (port <= 55535 && (await portFree(port + 10000))))) return port;
  }
  throw new Error('no free port');
}

/**
 * Starts a redis-server. kind: 'module' (the module loaded), 'plain' (neither) or 'twin' (no module; the Functions
 * library loaded). cluster: a cluster-enabled node. args: more server arguments (the bench's
 * floor module). wrap: a command the server runs under, e.g. valgrind's (the bench's); it must
 * run the server in its own process, as valgrind does, and is given more time to start.
 */
export async function startServer({ kind = 'module', cluster = false, args: more = [], wrap = [] } = {}) {
  if (kind === 'module' && !existsSync(modulePath))
    throw new Error(`the module is not built: ${modulePath} (cargo build --release --lib, or set THROTTLE_MODULE)`);
  const port = await freePort(cluster);
  const dir = mkdtempSync(path.join(tmpdir(), 'rt-node-'));
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--dir',
    dir,
    '--daemonize',
    'no',
    '--logfile',
    path.join(dir, 'log'),
  ];
  if (kind === 'module') args.push('--loadmodule', modulePath);
  args.push(...more);
  if (cluster)
    args.push('--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000');
  const [bin, ...before] = [...wrap, serverBin];
  const child = spawn(bin, [...before, ...args], { stdio: 'ignore' });
  const server = { port, pid: child.pid, child, dir, kind, url: `redis://127.0.0.1:${port}` };
  const deadline = Date.now() + (wrap.length > 0 ? 120_000 : 10_000);
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(`redis-server exited: ${readFileSync(path.join(dir, 'log'), 'utf8').slice(-2000)}`);
    try {
      const c = createClient({ url: server.url, socket: { reconnectStrategy: false } });
      c.on('error', () => {});
      await c.connect();
      const info = await c.sendCommand(['INFO', 'server']);
      if (!String(info).includes(`process_id:${child.pid}`)) throw new Error('another server answers on this port');
      if (kind === 'twin') await c.sendCommand(['FUNCTION', 'LOAD', 'REPLACE', readFileSync(twinPath, 'utf8')]);
      await (c.close ?? c.quit).call(c);
      return server;
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await sleep(50);
    }
  }
}

export function stopServer(server) {
  try {
    process.kill(server.pid, 'SIGCONT');
  } catch {}
  try {
    process.kill(server.pid, 'SIGKILL');
  } catch {}
  rmSync(server.dir, { recursive: true, force: true });
}

/** Three primaries (no replicas), each with the module (kind 'plain': without), state ok on every node. */
export async function startCluster({ kind = 'module' } = {}) {
  const nodes = await Promise.all([0, 1, 2].map(() => startServer({ kind, cluster: true })));
  const r = spawnSync(
    cliBin,
    ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'],
    { encoding: 'utf8' },
  );
  if (r.status !== 0) throw new Error(`cluster create failed: ${r.stdout}${r.stderr}`);
  const deadline = Date.now() + 60000;
  for (const n of nodes) {
    for (;;) {
      const c = createClient({ url: n.url });
      c.on('error', () => {});
      await c.connect();
      const info = String(await c.sendCommand(['CLUSTER', 'INFO']));
      await (c.close ?? c.quit).call(c);
      if (info.includes('cluster_state:ok')) break;
      if (Date.now() > deadline) throw new Error('cluster_state never ok');
      await sleep(100);
    }
  }
  return { nodes, ports: nodes.map((n) => n.port) };
}
