/**
 * The Functions twin this package carries (the repository's functions/throttle.lua, copied at
 * build time) and its loader: `loadTwin(client)` loads it with `FUNCTION LOAD REPLACE` on a
 * standalone server or on every primary of a cluster, reports the version found and loaded on
 * each, and refuses to replace a newer twin unless forced. The CLI (`npx redis-throttle-js twin
 * load`) runs the same steps over connections of its own.
 */
import { ThrottleError } from './errors.js';
import type { RedisLike } from './types.js';

/** What the loader did on one primary. */
export type TwinAction =
  /** No library `throttle` was there. */
  | 'loaded'
  /** An older twin (or one stating no version) was replaced. */
  | 'upgraded'
  /** The same version with other code (a development build) was replaced. */
  | 'replaced'
  /** The very same library was there: nothing was sent. */
  | 'unchanged'
  /** A newer twin was replaced, because `force` was given. */
  | 'downgraded';

/** `before` of a library `throttle` that has no `cl_version` (older than any twin that states one). */
export const UNVERSIONED = 'unversioned';

export interface TwinNodeReport {
  /** The primary, `host:port`. */
  node: string;
  /** The twin's version found there: null when there was no library `throttle`, `'unversioned'` for one without `cl_version`. */
  before: string | null;
  /** The version the server states now (`FCALL_RO cl_version 0`); null only if the library loaded states none. */
  after: string | null;
  action: TwinAction;
}

export interface TwinReport {
  /** The version of the twin this package carries (the package's version). */
  version: string;
  /** One entry per primary, in the order they were found. */
  nodes: TwinNodeReport[];
}

/** A refused downgrade: a primary's twin is newer than this package's (load with `force` to replace it anyway). */
export class TwinDowngradeError extends ThrottleError {}

export interface LoadTwinOptions {
  /** Replace a twin newer than this package's (a downgrade); refused without it. */
  force?: boolean;
}

/** One primary as the loader sees it: a name and a way to send it a command. */
export interface TwinNode {
  name: string;
  send(args: string[]): Promise<unknown>;
}

/** The twin this package carries, and its version (the package's). */
export async function twinLibrary(): Promise<{ library: string; version: string }> {
  const { LIBRARY, VERSION } = await import('./library.js');
  if (!LIBRARY.startsWith('#!lua') || VERSION === '') {
    throw new ThrottleError(
      'redis-throttle: this build of redis-throttle-js carries no Functions twin (dist/*/library.js is the placeholder): build it with `npm run build` in a checkout of the repository',
    );
  }
  return { library: LIBRARY, version: VERSION };
}

// ---- versions

const SEMVER = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/;

/** Semantic-version order of two versions (-1, 0, 1), or undefined when either is not one. */
export function compareVersions(a: string, b: string): number | undefined {
  const x = SEMVER.exec(a.trim());
  const y = SEMVER.exec(b.trim());
  if (!x || !y) return undefined;
  for (let i = 1; i <= 3; i++) {
    const d = Number(x[i]) - Number(y[i]);
    if (d !== 0) return Math.sign(d);
  }
  const [p, q] = [x[4], y[4]];
  if (p === undefined || q === undefined) return p === q ? 0 : p === undefined ? 1 : -1; // a release follows its pre-releases
  const ps = p.split('.');
  const qs = q.split('.');
  for (let i = 0; i < Math.max(ps.length, qs.length); i++) {
    const [u, v] = [ps[i], qs[i]];
    if (u === undefined) return -1;
    if (v === undefined) return 1;
    const [nu, nv] = [/^\d+$/.test(u), /^\d+$/.test(v)];
    if (nu && nv && Number(u) !== Number(v)) return Math.sign(Number(u) - Number(v));
    if (nu !== nv) return nu ? -1 : 1;
    if (u !== v) return u < v ? -1 : 1;
  }
  return 0;
}

// ---- replies (RESP2 arrays of pairs, RESP3 maps or objects; strings or Buffers)

function text(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v instanceof Uint8Array) return Buffer.from(v).toString('utf8');
  return undefined;
}

function pairs(v: unknown): Map<string, unknown> {
  const out = new Map<string, unknown>();
  if (Array.isArray(v)) {
    for (let i = 0; i + 1 < v.length; i += 2) {
      const k = text(v[i]);
      if (k !== undefined) out.set(k, v[i + 1]);
    }
  } else if (v instanceof Map) {
    for (const [k, x] of v) {
      const key = text(k);
      if (key !== undefined) out.set(key, x);
    }
  } else if (v != null && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) out.set(k, x);
  }
  return out;
}

/** The library `throttle` in a `FUNCTION LIST … WITHCODE` reply: its code and function names. */
export function findLibrary(reply: unknown): { code: string | undefined; functions: string[] } | undefined {
  if (!Array.isArray(reply)) return undefined;
  for (const lib of reply) {
    const fields = pairs(lib);
    if (text(fields.get('library_name')) !== 'throttle') continue;
    const fns = fields.get('functions');
    const functions = (Array.isArray(fns) ? fns : [])
      .map((f) => text(pairs(f).get('name')))
      .filter((n): n is string => n !== undefined);
    return { code: text(fields.get('library_code')), functions };
  }
  return undefined;
}

const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** The version a server's twin states, `'unversioned'`, or null without the library; and its code. */
async function found(node: TwinNode): Promise<{ before: string | null; code: string | undefined }> {
  const lib = findLibrary(await node.send(['FUNCTION', 'LIST', 'LIBRARYNAME', 'throttle', 'WITHCODE']));
  if (!lib) return { before: null, code: undefined };
  if (!lib.functions.includes('cl_version')) return { before: UNVERSIONED, code: lib.code };
  const v = text(await node.send(['FCALL_RO', 'cl_version', '0']));
  return { before: v ?? UNVERSIONED, code: lib.code };
}

/** What loading `version` over `before` does, or why it is refused (a downgrade without force). */
function plan(
  before: string | null,
  code: string | undefined,
  library: string,
  version: string,
  force: boolean,
): TwinAction | { refuse: string } {
  if (code === library) return 'unchanged';
  if (before === null) return 'loaded';
  if (before === UNVERSIONED) return 'upgraded';
  const order = compareVersions(before, version);
  if (order === undefined)
    return force
      ? 'replaced'
      : { refuse: `states the version ${JSON.stringify(before)}, which cannot be compared with ${version}` };
  if (order < 0) return 'upgraded';
  if (order === 0) return 'replaced';
  return force ? 'downgraded' : { refuse: `has the twin ${before}, newer than this package's ${version}` };
}

/** Loads the twin on each of `nodes` (primaries), after checking all of them: a refused downgrade loads nothing anywhere. */
export async function loadTwinOn(nodes: readonly TwinNode[], options: LoadTwinOptions = {}): Promise<TwinReport> {
  const { library, version } = await twinLibrary();
  if (nodes.length === 0) throw new ThrottleError('redis-throttle: no primary to load the twin on');
  const seen = await Promise.all(
    nodes.map(async (node) => {
      try {
        return await found(node);
      } catch (e) {
        throw new ThrottleError(`redis-throttle: cannot read the Functions library on ${node.name}: ${errorText(e)}`, {
          cause: e,
        });
      }
    }),
  );
  const plans = seen.map((s) => plan(s.before, s.code, library, version, options.force === true));
  const refused = plans.flatMap((p, i) => (typeof p === 'object' ? [`${nodes[i]!.name} ${p.refuse}`] : []));
  if (refused.length > 0) {
    throw new TwinDowngradeError(
      `redis-throttle: refusing to downgrade the Functions twin: ${refused.join('; ')}. Nothing was loaded. Load this package's twin anyway with force (loadTwin(client, { force: true }), or --force)`,
    );
  }
  const report: TwinNodeReport[] = [];
  for (const [i, node] of nodes.entries()) {
    const action = plans[i] as TwinAction;
    const before = seen[i]!.before;
    if (action === 'unchanged') {
      report.push({ node: node.name, before, after: before, action });
      continue;
    }
    try {
      await node.send(['FUNCTION', 'LOAD', 'REPLACE', library]);
    } catch (e) {
      const done = report.filter((r) => r.action !== 'unchanged').map((r) => r.node);
      throw new ThrottleError(
        `redis-throttle: FUNCTION LOAD failed on ${node.name}: ${errorText(e)}${done.length ? ` (already loaded on ${done.join(', ')}; loading again is safe)` : ''}`,
        { cause: e },
      );
    }
    let after: string | null = null;
    try {
      after = text(await node.send(['FCALL_RO', 'cl_version', '0'])) ?? null;
    } catch {
      after = null; // a library without cl_version (built before it existed)
    }
    report.push({ node: node.name, before, after, action });
  }
  return { version, nodes: report };
}

// ---- the caller's client

/* eslint-disable @typescript-eslint/no-explicit-any */
const isIoredis = (c: any): boolean => typeof c?.call === 'function' && typeof c?.defineCommand === 'function';
const isNodeRedisCluster = (c: any): boolean =>
  typeof c?.sendCommand === 'function' && ('masters' in c || typeof c?.getMasters === 'function');

/** A plain client's one server, as a TwinNode. */
function single(client: any, name: string): TwinNode {
  if (isIoredis(client)) return { name, send: (args) => client.call(args[0], ...args.slice(1)) };
  if (typeof client?.sendCommand === 'function') return { name, send: (args) => client.sendCommand(args) };
  throw new TypeError('redis-throttle: expected a node-redis client (sendCommand) or an ioredis client (call)');
}

/** The `host:port` lines of the primaries serving slots, from `CLUSTER NODES`. */
export function clusterPrimaries(nodes: string): { host: string; port: number; slots: boolean }[] {
  const out: { host: string; port: number; slots: boolean }[] = [];
  for (const line of nodes.split('\n')) {
    const f = line.trim().split(' ');
    if (f.length < 8) continue;
    const flags = (f[2] ?? '').split(',');
    if (!flags.includes('master') || flags.some((x) => x === 'fail' || x === 'handshake' || x === 'noaddr')) continue;
    const addr = (f[1] ?? '').split('@')[0] ?? '';
    const colon = addr.lastIndexOf(':');
    out.push({
      host: addr.slice(0, colon).replace(/^\[|\]$/g, ''),
      port: Number(addr.slice(colon + 1)),
      slots: f.length > 8,
    });
  }
  return out;
}

/** The primaries of the caller's client: every primary of a cluster client, or the one server of a plain client (refused when it is a cluster node or a replica). */
export async function primaries(client: RedisLike): Promise<TwinNode[]> {
  const c = client as any;
  if (isIoredis(c) && c.isCluster === true) {
    const masters: any[] = c.nodes('master');
    const nodes = masters.map((m) => single(m, `${m.options?.host}:${m.options?.port}`));
    await checkComplete(nodes);
    return nodes;
  }
  if (isNodeRedisCluster(c)) {
    const masters: any[] = c.masters ?? c.getMasters();
    const nodes = await Promise.all(
      masters.map(async (m) => single(await c.nodeClient(m), m.address ?? `${m.host}:${m.port}`)),
    );
    await checkComplete(nodes);
    return nodes;
  }
  const node = single(c, address(c)?.hostPort ?? 'the server');
  const info = text(await node.send(['INFO'])) ?? '';
  if (/^cluster_enabled:1/m.test(info)) {
    throw new ThrottleError(
      `redis-throttle: ${node.name} is a node of a cluster: load the twin on every primary with a cluster client (createCluster, new Redis.Cluster), or \`${loaderCommand(c)} --cluster\``,
    );
  }
  if (/^role:slave/m.test(info))
    throw new ThrottleError(
      `redis-throttle: ${node.name} is a replica: load the twin on its primary (replicas receive it from there)`,
    );
  return [node];
}

/** A cluster client that knows fewer primaries than the cluster has slot owners would skip some. */
async function checkComplete(nodes: TwinNode[]): Promise<void> {
  if (nodes.length === 0)
    throw new ThrottleError('redis-throttle: the cluster client knows no primary yet: connect it first');
  const listed = text(await nodes[0]!.send(['CLUSTER', 'NODES'])) ?? '';
  const owners = clusterPrimaries(listed).filter((p) => p.slots).length;
  if (owners > nodes.length) {
    throw new ThrottleError(
      `redis-throttle: the cluster has ${owners} primaries serving slots but the client knows ${nodes.length} (${nodes.map((n) => n.name).join(', ')}): wait for it to discover them, then load again`,
    );
  }
}

/**
 * Loads this package's Functions twin (library `throttle`) through the caller's client:
 * node-redis or ioredis, plain or cluster (every primary). Returns what it found and did on
 * each primary; refuses a downgrade (a server twin newer than the package's) unless
 * `{ force: true }`. Loading the same library again sends nothing.
 */
export async function loadTwin(client: RedisLike, options: LoadTwinOptions = {}): Promise<TwinReport> {
  return loadTwinOn(await primaries(client), options);
}

// ---- what the client says about a server's twin

interface Address {
  url: string;
  hostPort: string;
}

/** Where the caller's client connects, as a URL without its password (best effort). */
function address(c: any): Address | undefined {
  try {
    let o: any;
    if (isIoredis(c)) o = c.isCluster === true ? (c.startupNodes?.[0] ?? c.nodes?.()[0]?.options) : c.options;
    else if (isNodeRedisCluster(c)) o = c.masters?.[0] ?? c._options?.rootNodes?.[0] ?? c.options?.rootNodes?.[0];
    else o = c?.options;
    if (o == null) return undefined;
    if (typeof o === 'string') o = { url: o };
    let host: string | undefined;
    let port: number | undefined;
    let tls = false;
    let user: string | undefined;
    let secret = false;
    if (typeof o.url === 'string') {
      const u = new URL(o.url);
      host = u.hostname.replace(/^\[|\]$/g, '');
      port = u.port ? Number(u.port) : 6379;
      tls = u.protocol === 'rediss:';
      user = u.username ? decodeURIComponent(u.username) : undefined;
      secret = u.password !== '';
    }
    const socket = o.socket ?? o;
    host = socket.host ?? host;
    port = socket.port ?? port;
    tls = tls || socket.tls === true || (o.tls != null && o.tls !== false);
    user = o.username ?? user;
    secret = secret || o.password != null;
    if (host === undefined || port === undefined) return undefined;
    const h = host.includes(':') ? `[${host}]` : host;
    const auth =
      user !== undefined && user !== 'default' ? `${encodeURIComponent(user)}:PASSWORD@` : secret ? ':PASSWORD@' : '';
    return { url: `${tls ? 'rediss' : 'redis'}://${auth}${h}:${port}`, hostPort: `${h}:${port}` };
  } catch {
    return undefined;
  }
}

/** The CLI command that loads the twin on the caller's server (its address filled in when the client tells it). */
export function loaderCommand(client: unknown): string {
  return `npx redis-throttle-js twin load ${address(client)?.url ?? 'redis://HOST:PORT'}`;
}

/** The error text for a server with neither the module nor the twin. */
export function missingLibraryMessage(client: unknown): string {
  return (
    'redis-throttle: the server has neither the redis-throttle module (COMMAND INFO cl.throttle is empty) nor its Functions library `throttle` (FUNCTION LIST): ' +
    `load the twin this package carries with \`${loaderCommand(client)}\` (or loadTwin(client) from code, or \`npx redis-throttle-js twin print | redis-cli -x FUNCTION LOAD REPLACE\`), ` +
    'or the module (redis-server --loadmodule /path/to/libredis_throttle.so)'
  );
}

const warned = new Set<string>();

/**
 * Warns once per process (per server and version found) when the server's twin is older than this
 * package's, or states no version. Never fails: a server that cannot say is not warned about.
 */
export async function warnIfOutdated(send: (args: string[]) => Promise<unknown>, client: unknown): Promise<void> {
  let found: string;
  try {
    found = text(await send(['FCALL_RO', 'cl_version', '0'])) ?? UNVERSIONED;
  } catch (e) {
    if (!/function not found/i.test(errorText(e))) return;
    found = UNVERSIONED;
  }
  let version: string;
  try {
    version = (await twinLibrary()).version;
  } catch {
    return;
  }
  const order = found === UNVERSIONED ? -1 : compareVersions(found, version);
  const key = `${address(client)?.url ?? ''} ${found}`;
  if (order === undefined || order >= 0 || warned.has(key)) return;
  warned.add(key);
  const what = found === UNVERSIONED ? 'states no version (it predates cl_version)' : `is ${found}`;
  process.emitWarning(
    `the server's Functions twin ${what}, older than this package's ${version}: load this package's with \`${loaderCommand(client)}\``,
    {
      type: 'RedisThrottleWarning',
      code: 'REDIS_THROTTLE_TWIN_OUTDATED',
    },
  );
}
