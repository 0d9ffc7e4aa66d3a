// What every test file shares: the shared servers' clients, unique keys, a concurrent HTTP burst.
import { createClient, createCluster } from 'redis';
import IORedis from 'ioredis';

export const ports = {
  module: Number(process.env.RT_MODULE_PORT),
  twin: Number(process.env.RT_TWIN_PORT),
  cluster: (process.env.RT_CLUSTER_PORTS ?? '').split(',').filter(Boolean).map(Number),
};
if (!ports.module) throw new Error('run the tests with `npm test` (test/run.mjs starts the servers)');

let n = 0;
/** A key no other test uses. */
export const unique = (what) => `t:${process.pid}:${Date.now().toString(36)}:${++n}:${what}`;

const opened = [];
/** A connected node-redis client (kind: module | twin | cluster). */
export async function nodeRedis(kind) {
  const c =
    kind === 'cluster'
      ? createCluster({ rootNodes: ports.cluster.map((p) => ({ url: `redis://127.0.0.1:${p}` })) })
      : createClient({ url: `redis://127.0.0.1:${ports[kind]}` });
  c.on('error', () => {});
  await c.connect();
  opened.push(() => c.quit().catch(() => {}));
  return c;
}

/** An ioredis client (kind: module | twin | cluster). */
export async function ioredis(kind) {
  const c =
    kind === 'cluster'
      ? new IORedis.Cluster(ports.cluster.map((p) => ({ host: '127.0.0.1', port: p })))
      : new IORedis({ host: '127.0.0.1', port: ports[kind] });
  c.on('error', () => {});
  opened.push(() => c.quit().catch(() => {}));
  if (kind === 'cluster') await new Promise((r) => c.once('ready', r));
  return c;
}

export async function closeAll() {
  await Promise.all(opened.splice(0).map((f) => f()));
}

/** `count` concurrent GETs of `url`; the responses' statuses and headers. */
export async function burst(url, count, init = {}) {
  return Promise.all(
    Array.from({ length: count }, () =>
      fetch(url, init).then(
        async (r) => {
          await r.arrayBuffer();
          return { status: r.status, headers: r.headers };
        },
        (e) => {
          throw new Error(`fetch ${url}: ${e.cause?.code ?? ''} ${e.cause?.message ?? e.message}`);
        },
      ),
    ),
  );
}

/** A reply deadline for tests that drive 1,000 concurrent requests on a shared machine. */
export const SLOW = { timeoutMs: 15_000 };

export const KINDS = ['module', 'twin', 'cluster'];

const servers = [];
/** Listens with an Express (or node http) app on a free port; closed by closeAll(). */
export async function serve(app) {
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  servers.push(server);
  return `http://127.0.0.1:${server.address().port}`;
}
export async function closeServers() {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => { s.closeAllConnections?.(); s.close(() => r()); })));
}
