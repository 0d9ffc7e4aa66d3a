#!/usr/bin/env node
/**
 * `npx redis-throttle-js twin load [URL]` and `twin print`: the Functions twin this package
 * carries, loaded or printed without writing code.
 *
 * The CLI speaks RESP over a socket of its own (node:net, node:tls) instead of using node-redis
 * or ioredis: the package has no runtime dependency, so the CLI works wherever the package is
 * installed, with whichever Redis client the application uses (or none, on an operator's
 * machine), and reads TLS and credentials from the URL alone. It needs a handful of commands
 * (AUTH, INFO, CLUSTER NODES, FUNCTION LIST/LOAD, FCALL_RO), one at a time.
 */
import { readFileSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import {
  clusterPrimaries,
  loadTwinOn,
  twinLibrary,
  TwinDowngradeError,
  type TwinNode,
  type TwinReport,
} from './twin.js';

const USAGE = `Usage:
  npx redis-throttle-js twin load [URL] [--cluster] [--force] [--json] [--cacert FILE] [--insecure]
  npx redis-throttle-js twin print
  npx redis-throttle-js --version

twin load   Loads the Functions twin this package carries (library \`throttle\`) with
            FUNCTION LOAD REPLACE on the server at URL, or on every primary when it is a
            node of a cluster, and reports the version found and loaded on each. Loading
            the same library again changes nothing. A server whose twin is newer than this
            package's is refused (nothing is loaded anywhere) unless --force is given.
twin print  Writes the library to stdout, byte for byte (for
            \`npx redis-throttle-js twin print | redis-cli -x FUNCTION LOAD REPLACE\`).

URL         redis://[[USER]:PASSWORD@]HOST[:PORT] (default redis://127.0.0.1:6379),
            rediss://… for TLS, unix:///path/to/redis.sock. Special characters in
            the password are percent-encoded (%40 for @).
--cluster   Require a cluster (URL is any of its nodes); a cluster is detected without it.
--force     Replace a newer twin (a downgrade).
--json      Print the report as JSON.
--cacert F  TLS: trust the CA certificates in file F (PEM), besides the system's.
--insecure  TLS: do not verify the server's certificate.

Exit status: 0 loaded (or already there), 1 failed, 2 usage error, 3 downgrade refused.`;

class UsageError extends Error {}

// ---- RESP over a socket

class ReplyError extends Error {}

interface Target {
  host: string;
  port: number;
  path?: string;
  tls?: tls.ConnectionOptions;
  username?: string;
  password?: string;
}

/** One reply parsed from `buf` at `at`: the value and where it ends, or undefined until more bytes arrive. */
function parse(buf: Buffer, at: number): { value: unknown; end: number } | undefined {
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return undefined;
  const type = String.fromCharCode(buf[at] ?? 0);
  const line = buf.toString('utf8', at + 1, eol);
  const next = eol + 2;
  switch (type) {
    case '+':
      return { value: line, end: next };
    case '-':
    case '!':
      return { value: new ReplyError(line), end: next };
    case ':':
      return { value: Number(line), end: next };
    case '$':
    case '=': {
      const n = Number(line);
      if (n < 0) return { value: null, end: next };
      if (buf.length < next + n + 2) return undefined;
      return { value: buf.toString('utf8', next, next + n), end: next + n + 2 };
    }
    case '*':
    case '~':
    case '>':
    case '%': {
      const n = Number(line) * (type === '%' ? 2 : 1);
      if (n < 0) return { value: null, end: next };
      const items: unknown[] = [];
      let end = next;
      for (let i = 0; i < n; i++) {
        const r = parse(buf, end);
        if (!r) return undefined;
        items.push(r.value);
        end = r.end;
      }
      return { value: items, end };
    }
    case '_':
      return { value: null, end: next };
    default:
      return { value: line, end: next };
  }
}

class Connection {
  readonly #socket: net.Socket;
  #buffer: Buffer = Buffer.alloc(0);
  readonly #waiting: { resolve: (v: unknown) => void; reject: (e: Error) => void }[] = [];
  #failed: Error | undefined;

  private constructor(socket: net.Socket) {
    this.#socket = socket;
    socket.on('data', (chunk: Buffer) => {
      this.#buffer = this.#buffer.length ? Buffer.concat([this.#buffer, chunk]) : chunk;
      for (;;) {
        const r = parse(this.#buffer, 0);
        if (!r) break;
        this.#buffer = this.#buffer.subarray(r.end);
        const w = this.#waiting.shift();
        if (r.value instanceof ReplyError) w?.reject(r.value);
        else w?.resolve(r.value);
      }
    });
    const fail = (e: Error) => {
      this.#failed ??= e;
      for (const w of this.#waiting.splice(0)) w.reject(e);
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new Error('the connection closed')));
  }

  static open(t: Target, name: string, timeoutMs: number): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const options = t.path !== undefined ? { path: t.path } : { host: t.host, port: t.port };
      const socket = t.tls ? tls.connect({ ...options, ...t.tls }) : net.connect(options);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`cannot connect to ${name} within ${timeoutMs} ms`));
      }, timeoutMs);
      socket.once(t.tls ? 'secureConnect' : 'connect', () => {
        clearTimeout(timer);
        resolve(new Connection(socket));
      });
      socket.once('error', (e) => {
        clearTimeout(timer);
        reject(new Error(`cannot connect to ${name}: ${e.message}`));
      });
    });
  }

  send(args: string[], timeoutMs = 60_000): Promise<unknown> {
    if (this.#failed) return Promise.reject(this.#failed);
    const parts = [`*${args.length}\r\n`];
    for (const a of args) parts.push(`$${Buffer.byteLength(a)}\r\n`, a, '\r\n');
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const e = new Error(`no reply within ${timeoutMs} ms`);
        this.#socket.destroy(e);
      }, timeoutMs);
      this.#waiting.push({
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.#socket.write(parts.join(''));
    });
  }

  close(): void {
    this.#socket.end();
    this.#socket.destroy();
  }
}

// ---- arguments

interface Options {
  command: 'load' | 'print' | 'help' | 'version';
  url: string;
  cluster: boolean;
  force: boolean;
  json: boolean;
  cacert: string | undefined;
  insecure: boolean;
}

function options(argv: string[]): Options {
  const o: Options = {
    command: 'help',
    url: 'redis://127.0.0.1:6379',
    cluster: false,
    force: false,
    json: false,
    cacert: undefined,
    insecure: false,
  };
  const words: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === '-h' || a === '--help') return { ...o, command: 'help' };
    else if (a === '-V' || a === '--version') return { ...o, command: 'version' };
    else if (a === '--cluster') o.cluster = true;
    else if (a === '--force') o.force = true;
    else if (a === '--json') o.json = true;
    else if (a === '--insecure') o.insecure = true;
    else if (a === '--cacert') {
      const f = argv[++i];
      if (f === undefined) throw new UsageError('--cacert needs a file');
      o.cacert = f;
    } else if (a.startsWith('-')) throw new UsageError(`unknown option ${a}`);
    else words.push(a);
  }
  if (words.length === 0) throw new UsageError('no command');
  if (words[0] !== 'twin') throw new UsageError(`unknown command ${JSON.stringify(words[0])}`);
  const sub = words[1];
  if (sub === 'print' && words.length === 2) return { ...o, command: 'print' };
  if (sub === 'load' && words.length <= 3) return { ...o, command: 'load', url: words[2] ?? o.url };
  if (sub === 'load' || sub === 'print') throw new UsageError(`too many arguments for twin ${sub}`);
  throw new UsageError(sub === undefined ? 'twin: load or print?' : `unknown command twin ${JSON.stringify(sub)}`);
}

/** The server, credentials and TLS of a redis://, rediss:// or unix:// URL. */
function target(url: string, o: Options): Target {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new UsageError(`not a URL: ${JSON.stringify(url)} (redis://HOST:PORT)`);
  }
  const auth = {
    username: u.username ? decodeURIComponent(u.username) : undefined,
    password: u.password ? decodeURIComponent(u.password) : undefined,
  };
  if (u.protocol === 'unix:') return { host: '', port: 0, path: decodeURIComponent(u.pathname), ...auth };
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:')
    throw new UsageError(`unsupported scheme ${u.protocol} (redis:, rediss: or unix:)`);
  const host = u.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1';
  const t: Target = { host, port: u.port ? Number(u.port) : 6379, ...auth };
  if (u.protocol === 'rediss:') t.tls = tlsOptions(host, o);
  return t;
}

function tlsOptions(host: string, o: Options): tls.ConnectionOptions {
  const t: tls.ConnectionOptions = { rejectUnauthorized: !o.insecure };
  if (net.isIP(host) === 0) t.servername = host;
  if (o.cacert !== undefined) t.ca = [...tls.rootCertificates, readFileSync(o.cacert, 'utf8')];
  return t;
}

const name = (t: Target): string => t.path ?? (t.host.includes(':') ? `[${t.host}]:${t.port}` : `${t.host}:${t.port}`);

async function connect(t: Target): Promise<Connection> {
  const c = await Connection.open(t, name(t), 10_000);
  if (t.password !== undefined) {
    try {
      await c.send(t.username !== undefined ? ['AUTH', t.username, t.password] : ['AUTH', t.password]);
    } catch (e) {
      c.close();
      throw new Error(`${name(t)}: ${(e as Error).message}`);
    }
  }
  return c;
}

// ---- commands

async function load(o: Options): Promise<TwinReport> {
  const seed = target(o.url, o);
  const first = await connect(seed);
  const opened: Connection[] = [first];
  try {
    let info = '';
    try {
      info = String(await first.send(['INFO']));
    } catch {
      info = ''; // an ACL user without INFO: take the URL's server as it is, unless --cluster says otherwise
    }
    const isCluster = /^cluster_enabled:1/m.test(info) || o.cluster;
    let nodes: TwinNode[];
    if (!isCluster) {
      if (/^role:slave/m.test(info))
        throw new Error(`${name(seed)} is a replica: load the twin on its primary (replicas receive it from there)`);
      nodes = [{ name: name(seed), send: (args) => first.send(args) }];
    } else {
      let listed: string;
      try {
        listed = String(await first.send(['CLUSTER', 'NODES']));
      } catch (e) {
        throw new Error(
          `${name(seed)}: CLUSTER NODES: ${(e as Error).message}${o.cluster ? ' (--cluster was given: is it a cluster node?)' : ''}`,
        );
      }
      nodes = [];
      for (const p of clusterPrimaries(listed)) {
        const t: Target = { ...seed, host: p.host || seed.host, port: p.port };
        if (seed.tls) t.tls = tlsOptions(t.host, o);
        const c = await connect(t);
        opened.push(c);
        nodes.push({ name: name(t), send: (args) => c.send(args) });
      }
    }
    return await loadTwinOn(nodes, { force: o.force });
  } finally {
    for (const c of opened) c.close();
  }
}

function print(report: TwinReport): string {
  const lines = [
    `redis-throttle-js: the Functions twin ${report.version} on ${report.nodes.length === 1 ? '1 server' : `${report.nodes.length} primaries`}:`,
  ];
  const width = Math.max(...report.nodes.map((n) => n.node.length));
  for (const n of report.nodes) {
    const was =
      n.before === null
        ? 'no library before'
        : n.action === 'unchanged'
          ? 'the same library was there'
          : `was ${n.before}`;
    lines.push(`  ${n.node.padEnd(width)}  ${n.action.padEnd(10)}  ${n.after ?? '(no version)'}  (${was})`);
  }
  return lines.join('\n');
}

async function main(argv: string[]): Promise<number> {
  let o: Options;
  try {
    o = options(argv);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`redis-throttle-js: ${e.message}\n\n${USAGE}\n`);
    return 2;
  }
  switch (o.command) {
    case 'help':
      process.stdout.write(`${USAGE}\n`);
      return 0;
    case 'version':
      process.stdout.write(`${(await twinLibrary()).version}\n`);
      return 0;
    case 'print': {
      const { library } = await twinLibrary();
      await new Promise<void>((resolve, reject) => process.stdout.write(library, (e) => (e ? reject(e) : resolve())));
      return 0;
    }
    case 'load':
      try {
        const report = await load(o);
        process.stdout.write(`${o.json ? JSON.stringify(report) : print(report)}\n`);
        return 0;
      } catch (e) {
        if (e instanceof UsageError) {
          process.stderr.write(`redis-throttle-js: ${e.message}\n\n${USAGE}\n`);
          return 2;
        }
        const message = (e as Error).message.replace(/^redis-throttle: /, '');
        process.stderr.write(`redis-throttle-js: ${message}\n`);
        return e instanceof TwinDowngradeError ? 3 : 1;
      }
  }
}

process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(0);
});
main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`redis-throttle-js: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
  },
);
