// What every test file shares: the shared servers' clients, unique keys, a concurrent HTTP burst.
import { readFileSync } from 'node:fs';
import path from 'node:path';
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
  opened.push(() => (c.close ?? c.quit).call(c).catch(() => {}));
  return c;
}

/** An ioredis client (kind: module | twin | cluster), with more options (e.g. keyPrefix). */
export async function ioredis(kind, options = {}) {
  const c =
    kind === 'cluster'
      ? new IORedis.Cluster(
          ports.cluster.map((p) => ({ host: '127.0.0.1', port: p })),
          options,
        )
      : new IORedis({ host: '127.0.0.1', port: ports[kind], ...options });
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
    // A backlog for a thousand connections at once on a loaded machine.
    const s = app.listen({ port: 0, host: '127.0.0.1', backlog: 2048 }, () => resolve(s));
  });
  servers.push(server);
  return `http://127.0.0.1:${server.address().port}`;
}
export async function closeServers() {
  await Promise.all(
    servers.splice(0).map(
      (s) =>
        new Promise((r) => {
          s.closeAllConnections?.();
          s.close(() => r());
        }),
    ),
  );
}

/** The installed version of a package (this cell's: test/run.mjs runs each cell from its folder). */
export function version(name) {
  try {
    return JSON.parse(readFileSync(path.join(process.cwd(), 'node_modules', name, 'package.json'), 'utf8')).version;
  } catch {
    return undefined;
  }
}
/** Whether the installed `name` is at least `v` (x.y.z). */
export function atLeast(name, v) {
  const have = (version(name) ?? '0.0.0').split('.').map(Number);
  const want = v.split('.').map(Number);
  for (let i = 0; i < 3; i++) if (have[i] !== want[i]) return have[i] > want[i];
  return true;
}

/**
 * `client` with a record of what it sends (commands; `multi` counts as one): to show a decision
 * made without Redis. `keyed()` is how many of them named a key (anything but the store's
 * one-time questions about the server: COMMAND INFO, FUNCTION LIST, the twin's version
 * (`FCALL_RO cl_version 0`, which names no key), its key-prefix probe).
 */
export function counting(client) {
  const log = [];
  const proxy = new Proxy(client, {
    get(target, name) {
      const v = Reflect.get(target, name);
      if (typeof v !== 'function' || name === 'constructor') return v;
      if (['sendCommand', 'call', 'multi'].includes(name)) {
        return (...args) => {
          const cmd =
            name === 'multi'
              ? ['MULTI']
              : name === 'call'
                ? args.map(String)
                : (args.find(Array.isArray) ?? [String(args[0]?.name ?? '?')]);
          log.push(cmd);
          return v.apply(target, args);
        };
      }
      return v.bind(target);
    },
  });
  const serverQuestion = (c) =>
    ['COMMAND', 'FUNCTION', 'EVAL'].includes(String(c[0]).toUpperCase()) ||
    (/^FCALL(_RO)?$/i.test(String(c[0])) && String(c[2]) === '0');
  const keyed = () => log.filter((c) => !serverQuestion(c)).length;
  return { client: proxy, sent: () => log.length, keyed, log };
}
