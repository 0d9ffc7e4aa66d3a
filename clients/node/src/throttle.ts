import { crossSlot, sibling, slot } from './slot.js';

/** A rate-limiting decision. Times in milliseconds; `-1` where the server says "none". */
export interface Decision {
  /** true when the call was denied (nothing was taken). */
  limited: boolean;
  /** The most units a full limiter admits at once (`X-RateLimit-Limit`). */
  limit: number;
  /** Units that could still be admitted now, after this call. */
  remaining: number;
  /** Denied: ms until the same call would be admitted; -1 when admitted, or never admissible. */
  retryAfterMs: number;
  /** ms until the limiter is full again (0: it is; -1: never, a block without an end). */
  resetAfterMs: number;
}

/** CL.ALL's decision: the binding limiter's numbers, its index (0-based), and every limiter's own. */
export interface AllDecision extends Decision {
  binding: number;
  details: Decision[];
}

/** CL.PACE's reply. */
export interface PaceDecision {
  limited: boolean;
  /** ms to wait before acting (0 = now). */
  waitMs: number;
  /** Units reserved ahead of now after this call. */
  queued: number;
  retryAfterMs: number;
  resetAfterMs: number;
}

type Int = number | bigint;
export interface ThrottleParams {
  maxBurst: Int;
  count: Int;
  periodMs: Int;
  quantity?: Int;
}
export interface WindowParams {
  limit: Int;
  windowMs: Int;
  precisionMs?: Int;
  quantity?: Int;
}
export interface BucketParams {
  capacity: Int;
  tokens: Int;
  intervalMs: Int;
  quantity?: Int;
}
export interface CounterParams {
  limit: Int;
  windowMs: Int;
  quantity?: Int;
}
export interface QuotaParams {
  limit: Int;
  per: 'MINUTE' | 'HOUR' | 'DAY' | 'WEEK' | 'MONTH' | 'YEAR';
  /** IANA name (module) or a fixed offset such as +01:00 (module and twin). */
  tz?: string;
  /** A billing anchor instant, as CL.QUOTA's ANCHOR takes it. */
  anchor?: string;
  quantity?: Int;
}
export interface AcquireParams {
  limit: Int;
  leaseMs: Int;
  id: string;
}
export interface PaceParams {
  count: Int;
  periodMs: Int;
  maxWaitMs?: Int;
  quantity?: Int;
}

/** One limiter of a CL.ALL call. */
export type Limiter =
  | ({ key: string; algorithm: 'throttle' } & ThrottleParams)
  | ({ key: string; algorithm: 'window' } & WindowParams)
  | ({ key: string; algorithm: 'bucket' } & BucketParams)
  | ({ key: string; algorithm: 'counter' } & CounterParams)
  | ({ key: string; algorithm: 'quota' } & QuotaParams);

export type Backend = 'module' | 'twin';

/** node-redis (client or cluster, 4.7 to 6) or ioredis (Redis or Cluster): anything with `sendCommand` or `call`. */
export type RedisLike = object;

export interface ThrottleOptions {
  /** Skip detection: 'module' sends CL.*, 'twin' sends FCALL cl_*. */
  backend?: Backend;
  /**
   * Milliseconds to wait for a reply before failing the call with a ThrottleError (default
   * 1000; 0 = wait forever), so a paused or unreachable server reaches the host library's
   * failure option. The command may still be applied if the server answers later.
   */
  timeoutMs?: number;
}

/** An error from the server (its text unchanged, e.g. `ERR limit must be …`, `WRONGTYPE …`) or from the caller side before sending. */
export class ThrottleError extends Error {
  override readonly name = 'ThrottleError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

type Send = (key: string | undefined, args: string[]) => Promise<unknown>;

interface Transport {
  /** Sends `args` exactly as given (keys already carry `prefix`); `key` routes it in a cluster. */
  send: Send;
  /** MULTI, `commands`, EXEC on `key`'s node: EXEC's replies (a command's error fails the call). */
  exec: (key: string, commands: string[][]) => Promise<unknown>;
  /** Sends as the client's own `call` does: ioredis prefixes the keys of the commands it knows. */
  sendAsCall: Send;
  execAsCall: (key: string, commands: string[][]) => Promise<unknown>;
  cluster: boolean;
  /**
   * The client's key prefix (ioredis `keyPrefix`), which every key the package sends carries
   * exactly once: ioredis adds it only to the commands in its own table (`SET`, `FCALL`, not
   * `CL.*`), so the package adds it itself and sends without ioredis's.
   */
  prefix: string;
}

/** The replies of commands issued one after another in this tick (a client writes them in order on one connection). */
function sendAllNow(send: (args: string[]) => Promise<unknown>, commands: string[][]): Promise<unknown[]> {
  const replies = commands.map((c) => send(c));
  return Promise.allSettled(replies).then((r) => {
    const failed = r.find((x): x is PromiseRejectedResult => x.status === 'rejected');
    if (failed) throw failed.reason;
    return r.map((x) => (x as PromiseFulfilledResult<unknown>).value);
  });
}

/* eslint-disable @typescript-eslint/no-explicit-any */
function transport(client: any): Transport {
  if (client == null || typeof client !== 'object')
    throw new TypeError('redis-throttle: expected a node-redis or ioredis client');
  // ioredis: Redis and Cluster both have `call`; Cluster has `isCluster`.
  if (typeof client.call === 'function' && typeof client.defineCommand === 'function') return ioredis(client);
  if (typeof client.sendCommand === 'function') {
    // node-redis cluster: sendCommand(firstKey, isReadonly, args, options); it has `masters`.
    const cluster = 'masters' in client || typeof client.getMasters === 'function';
    const send: Send = cluster
      ? (key, args) => client.sendCommand(key, false, args)
      : (_key, args) => client.sendCommand(args);
    // A transaction through node-redis's own MULTI (on one connection of the key's node; a
    // client pool's on one of its clients): raw MULTI/EXEC sent one by one may not stay together.
    const exec =
      typeof client.multi === 'function'
        ? async (key: string, cmds: string[][]) => {
            const m = cluster ? client.multi(key) : client.multi();
            // A cluster's addCommand: (firstKey, args) in node-redis 4, (firstKey, isReadonly, args) from 5.
            if (!cluster) for (const c of cmds) m.addCommand(c);
            else if (m.addCommand.length >= 4) for (const c of cmds) m.addCommand(key, false, c);
            else for (const c of cmds) m.addCommand(key, c);
            return m.exec();
          }
        : async (key: string, cmds: string[][]) => {
            const replies = await sendAllNow((args) => send(key, args), [['MULTI'], ...cmds, ['EXEC']]);
            return replies[replies.length - 1];
          };
    return { cluster, prefix: '', send, exec, sendAsCall: send, execAsCall: exec };
  }
  throw new TypeError('redis-throttle: expected a node-redis client (sendCommand) or an ioredis client (call)');
}

/**
 * ioredis, Redis or Cluster. Commands go out as `Command` objects built without ioredis's
 * keyPrefix (the package prefixes every key itself, see Transport.prefix); in a cluster they
 * carry their key's slot, since ioredis routes a command it does not know (CL.*) to a random
 * node and follows MOVED.
 */
function ioredis(client: any): Transport {
  const cluster = client.isCluster === true;
  const prefix: unknown = client.options?.keyPrefix ?? '';
  if (typeof prefix !== 'string')
    throw new TypeError('redis-throttle: an ioredis keyPrefix must be a string (a Buffer keyPrefix is not supported)');
  // ioredis exports Command as a property of its Redis class; a Cluster's is imported.
  let Command: any = cluster ? undefined : client.constructor?.Command;
  let loading: Promise<any> | undefined;
  const load = async (): Promise<any> => {
    if (Command) return Command;
    loading ??= import('ioredis').then(
      (mod: any) => mod.Command ?? mod.default?.Command,
      () => undefined,
    );
    Command = await loading;
    if (typeof Command !== 'function')
      throw new ThrottleError(
        "redis-throttle: ioredis.Command is unavailable: cannot send commands by slot or without ioredis's keyPrefix",
      );
    return Command;
  };
  const now = (C: any, key: string | undefined, args: string[], asCall: boolean): Promise<unknown> => {
    const command = new C(
      args[0],
      args.slice(1),
      asCall && prefix ? { replyEncoding: 'utf8', keyPrefix: prefix } : { replyEncoding: 'utf8' },
    );
    if (cluster && key !== undefined) command.slot = slot(asCall ? prefix + key : key);
    client.sendCommand(command);
    return command.promise;
  };
  const send =
    (asCall: boolean): Send =>
    async (key, args) => {
      if (cluster && key === undefined) return client.call(args[0], ...args.slice(1));
      return now(await load(), key, args, asCall);
    };
  // MULTI, the commands and EXEC issued in one tick: ioredis writes them in order on one connection.
  const exec = (asCall: boolean) => async (key: string, cmds: string[][]) => {
    const C = await load();
    const replies = await sendAllNow((args) => now(C, key, args, asCall), [['MULTI'], ...cmds, ['EXEC']]);
    return replies[replies.length - 1];
  };
  return { cluster, prefix, send: send(false), exec: exec(false), sendAsCall: send(true), execAsCall: exec(true) };
}

function asError(e: unknown): ThrottleError {
  if (e instanceof ThrottleError) return e;
  // node-redis's MULTI fails with the commands' replies: the first error is the server's text.
  const multi = e as { replies?: unknown[]; errorIndexes?: number[] } | null;
  if (multi && Array.isArray(multi.replies) && Array.isArray(multi.errorIndexes) && multi.errorIndexes.length > 0) {
    const first = multi.replies[multi.errorIndexes[0] as number];
    if (first instanceof Error) return new ThrottleError(first.message, { cause: e });
  }
  const message = e instanceof Error ? e.message : String(e);
  return new ThrottleError(message, { cause: e });
}

/** A reply's integer, as a JS number: exact, or refused (a count beyond 2^53 - 1 cannot be one). */
function int(v: unknown, what: string): number {
  let n: number | undefined;
  if (typeof v === 'number' && Number.isInteger(v)) n = v;
  else if (typeof v === 'bigint' || (typeof v === 'string' && /^-?\d+$/.test(v))) n = Number(v);
  if (n === undefined)
    throw new ThrottleError(
      `redis-throttle: expected an integer for ${what}, got ${JSON.stringify(typeof v === 'bigint' ? String(v) : v)}`,
    );
  if (!Number.isSafeInteger(n))
    throw new ThrottleError(
      `redis-throttle: ${what} ${String(v)} is beyond 2^53 - 1, which a JS number cannot hold exactly`,
    );
  return n;
}

/**
 * A count a plain command keeps (INCRBY's reply, a GET): exact up to 2^53 - 1; one beyond reads
 * as Infinity, above every limit a JS number can state (a count is only ever compared with one).
 */
function count(v: unknown, what: string): number {
  if (typeof v === 'string' && /^\d{16,}$/.test(v) && BigInt(v) > BigInt(Number.MAX_SAFE_INTEGER)) return Infinity;
  if (typeof v === 'bigint' && v > BigInt(Number.MAX_SAFE_INTEGER)) return Infinity;
  if (typeof v === 'number' && v > Number.MAX_SAFE_INTEGER) return Infinity;
  return int(v, what);
}

/**
 * Refuses, before anything is sent, a limit whose replies a JS number could not hold exactly
 * (above 2^53 - 1). Other values go to the server as they are, for its own error.
 */
function exact(v: Int | undefined, what: string): void {
  if (v === undefined) return;
  const big =
    typeof v === 'bigint'
      ? v > BigInt(Number.MAX_SAFE_INTEGER) || v < -BigInt(Number.MAX_SAFE_INTEGER)
      : Number.isInteger(v) && !Number.isSafeInteger(v);
  if (big)
    throw new ThrottleError(
      `redis-throttle: ${what} ${String(v)} is beyond 2^53 - 1: replies in JS numbers could not be exact (nothing was sent)`,
    );
}

function decision(reply: unknown): Decision {
  if (!Array.isArray(reply) || reply.length < 5)
    throw new ThrottleError(`redis-throttle: expected five integers, got ${JSON.stringify(reply)}`);
  return {
    limited: int(reply[0], 'limited') === 1,
    limit: int(reply[1], 'limit'),
    remaining: int(reply[2], 'remaining'),
    retryAfterMs: int(reply[3], 'retry_after'),
    resetAfterMs: int(reply[4], 'reset_after'),
  };
}

const s = (v: Int): string => (typeof v === 'bigint' ? v.toString() : String(v));

/** The value of a GCRA key under a block (Throttle.block): not a TAT, so CL.THROTTLE refuses it. */
const BLOCKED = 'redis-throttle:blocked';

/** The server's refusal of a key whose value is not the command's state (e.g. BLOCKED under CL.THROTTLE). */
const invalidState = (e: unknown): boolean => e instanceof Error && e.message.includes('does not hold valid');

const MODULE_ONLY =
  'the server runs the Functions twin (no module): CL.ACQUIRE, CL.RELEASE and CL.PACE exist only in the redis-throttle module';

/** The words of a limiter after its key, as CL.ALL's spec and the single command take them (without quantity). */
function params(l: Limiter): string[] {
  for (const [name, v] of Object.entries(l))
    if (name !== 'key' && name !== 'algorithm' && (typeof v === 'number' || typeof v === 'bigint')) exact(v, name);
  switch (l.algorithm) {
    case 'throttle':
      return [s(l.maxBurst), s(l.count), s(l.periodMs)];
    case 'window':
      return l.precisionMs === undefined
        ? [s(l.limit), s(l.windowMs)]
        : [s(l.limit), s(l.windowMs), 'PRECISION', s(l.precisionMs)];
    case 'bucket':
      return [s(l.capacity), s(l.tokens), s(l.intervalMs)];
    case 'counter':
      return [s(l.limit), s(l.windowMs)];
    case 'quota': {
      const w = [s(l.limit), 'PER', l.per];
      if (l.tz !== undefined) w.push('TZ', l.tz);
      if (l.anchor !== undefined) w.push('ANCHOR', l.anchor);
      return w;
    }
    default:
      throw new ThrottleError(
        `redis-throttle: unknown algorithm ${JSON.stringify((l as { algorithm: unknown }).algorithm)}`,
      );
  }
}

/**
 * The commands, one method each, through the caller's Redis client. Whether the server has the
 * module or only the Functions twin is asked once, at the first call (and again after a failed
 * detection).
 *
 * Keys are the caller's: with an ioredis client whose `keyPrefix` is set, every key this class
 * sends (in CL.*, FCALL and the plain commands alike) carries that prefix exactly once, as
 * ioredis's own commands do, and slots are those of the prefixed keys.
 */
export class Throttle {
  readonly #t: Transport;
  #backend: Promise<Backend> | undefined;
  readonly #timeoutMs: number;

  /** The caller's client, for the address the missing-library error names. */
  readonly #client: RedisLike;

  constructor(client: RedisLike, options: ThrottleOptions = {}) {
    this.#client = client;
    this.#t = transport(client);
    this.#timeoutMs = options.timeoutMs ?? 1000;
    if (options.backend !== undefined) this.#backend = Promise.resolve(options.backend);
  }

  /** Whether the client is a cluster client (keys routed by slot; CL.ALL's keys must share one). */
  get cluster(): boolean {
    return this.#t.cluster;
  }

  /** The client's key prefix (ioredis `keyPrefix`; '' for node-redis), carried by every key sent. */
  get keyPrefix(): string {
    return this.#t.prefix;
  }

  /** The sibling (see `sibling`) of a key as it is sent, itself starting with the client's key prefix. */
  #sibling(key: string, suffix: string): string {
    const p = this.#t.prefix;
    return p + sibling(key.slice(p.length), suffix, p);
  }

  /** A caller's key as it is sent (with the client's key prefix). */
  #w(key: string): string {
    return this.#t.prefix + key;
  }

  #wl<L extends Limiter>(l: L): L {
    return { ...l, key: this.#w(l.key) };
  }

  /** 'module' or 'twin', detected once: `COMMAND INFO cl.throttle`, then `FUNCTION LIST LIBRARYNAME throttle`. */
  backend(): Promise<Backend> {
    if (this.#backend === undefined) {
      const p = this.#detect();
      this.#backend = p;
      p.catch(() => {
        if (this.#backend === p) this.#backend = undefined;
      });
    }
    return this.#backend;
  }

  async #detect(): Promise<Backend> {
    let info: unknown;
    try {
      info = await this.#timed(this.#t.send(undefined, ['COMMAND', 'INFO', 'cl.throttle']));
    } catch (e) {
      throw asError(e);
    }
    if (Array.isArray(info) && info.some((x) => x != null)) return 'module';
    let libs: unknown;
    try {
      libs = await this.#timed(this.#t.send(undefined, ['FUNCTION', 'LIST', 'LIBRARYNAME', 'throttle']));
    } catch {
      libs = undefined;
    }
    const twin = await import('./twin.js');
    if (Array.isArray(libs) && libs.length > 0) {
      await twin.warnIfOutdated((args) => this.#timed(this.#t.send(undefined, args)), this.#client);
      return 'twin';
    }
    throw new ThrottleError(twin.missingLibraryMessage(this.#client));
  }

  #timed<T>(p: Promise<T>): Promise<T> {
    if (!(this.#timeoutMs > 0)) return p;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new ThrottleError(`redis-throttle: no reply from Redis within ${this.#timeoutMs} ms`)),
        this.#timeoutMs,
      );
    });
    p.catch(() => undefined);
    return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
  }

  /** A command whose keys are sent as they are (already prefixed), routed by `key`. */
  async #call(key: string, args: string[]): Promise<unknown> {
    try {
      return await this.#timed(this.#t.send(key, args));
    } catch (e) {
      throw asError(e);
    }
  }

  /** CL.<name> key … or FCALL cl_<name> 1 key …, then quantity (positional or QUANTITY) and MS. `key` is sent as it is. */
  async #single(
    name: 'throttle' | 'window' | 'bucket' | 'counter' | 'quota',
    key: string,
    words: string[],
    quantity: Int | undefined,
  ): Promise<Decision> {
    if (quantity !== undefined) exact(quantity, 'quantity');
    const backend = await this.backend();
    const head = backend === 'module' ? [`CL.${name.toUpperCase()}`, key] : ['FCALL', `cl_${name}`, '1', key];
    const q = quantity === undefined ? [] : name === 'quota' ? ['QUANTITY', s(quantity)] : [s(quantity)];
    const send = async (): Promise<Decision> => decision(await this.#call(key, [...head, ...words, ...q, 'MS']));
    if (name !== 'throttle') return send();
    return this.#answeringBlocks(send, async () => {
      const held = await this.#blocked(key);
      if (typeof held !== 'number') return held;
      const limit = Number(BigInt(words[0] as string) + 1n);
      const units = quantity === undefined ? 1n : BigInt(s(quantity));
      return blockedDecision(limit, units, held);
    });
  }

  /**
   * `send`, unless the server refuses a key as not its state: a GCRA key under a block
   * (Throttle.block) holds BLOCKED, which CL.THROTTLE refuses. `blocked` then gives the answer,
   * or undefined (the error stands), or 'gone' when a block ended between the two round trips:
   * the key is free, so `send` again (twice at most).
   */
  async #answeringBlocks<T>(send: () => Promise<T>, blocked: () => Promise<T | 'gone' | undefined>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await send();
      } catch (e) {
        if (!invalidState(e)) throw e;
        const answer = await blocked();
        if (answer === 'gone' && attempt < 3) continue;
        if (answer === undefined || answer === 'gone') throw e;
        return answer;
      }
    }
  }

  /**
   * ms left of a GCRA block on `key` (sent as it is; its value is BLOCKED), -1 for a block
   * without an end; 'gone' when the key is absent, undefined when it holds something else.
   */
  async #blocked(key: string): Promise<number | 'gone' | undefined> {
    let replies: unknown[];
    try {
      replies = await this.#transaction(key, [
        ['GET', key],
        ['PTTL', key],
      ]);
    } catch {
      return undefined; // (a key of another type: the call's own error stands)
    }
    const [value, pttl] = replies;
    if (value == null) return 'gone';
    if (String(value) !== BLOCKED) return undefined;
    const ms = int(pttl, 'PTTL reply');
    return ms === -1 ? -1 : ms > 0 ? ms : 1;
  }

  /** GCRA (redis-cell's CL.THROTTLE): max_burst + 1 at once, then `count` per `periodMs`. */
  throttle(key: string, p: ThrottleParams): Promise<Decision> {
    return this.#decide({ ...p, key: this.#w(key), algorithm: 'throttle' });
  }

  /** Sliding window: at most `limit` units in any span of `windowMs` (exact, or bucketed by `precisionMs`). */
  window(key: string, p: WindowParams): Promise<Decision> {
    return this.#decide({ ...p, key: this.#w(key), algorithm: 'window' });
  }

  /** Token bucket: `capacity` tokens, `tokens` more every whole `intervalMs`. */
  bucket(key: string, p: BucketParams): Promise<Decision> {
    return this.#decide({ ...p, key: this.#w(key), algorithm: 'bucket' });
  }

  /** Fixed window: at most `limit` per `windowMs`, the window opening at its first action. */
  counter(key: string, p: CounterParams): Promise<Decision> {
    return this.#decide({ ...p, key: this.#w(key), algorithm: 'counter' });
  }

  /** Calendar quota: at most `limit` per calendar `per`. */
  quota(key: string, p: QuotaParams): Promise<Decision> {
    return this.#decide({ ...p, key: this.#w(key), algorithm: 'quota' });
  }

  /** Several limiters decided at one instant, all or nothing (CL.ALL … MS DETAILS). In a cluster the keys must share a slot (hash tags). */
  async all(limiters: readonly Limiter[]): Promise<AllDecision> {
    if (limiters.length === 0) throw new ThrottleError('redis-throttle: all() needs at least one limiter');
    const wired = limiters.map((l) => this.#wl(l));
    const keys = wired.map((l) => l.key);
    if (this.#t.cluster) {
      const cross = crossSlot(keys);
      if (cross) {
        throw new ThrottleError(
          `redis-throttle: the keys of one CL.ALL decision must share a hash slot in a cluster: ${JSON.stringify(keys[cross[0]])} and ${JSON.stringify(keys[cross[1]])} do not (use a hash tag such as rl:{user42}:second and rl:{user42}:hour); nothing was sent`,
        );
      }
    }
    const words = wired.map((l) => params(l));
    for (const l of wired) if (l.quantity !== undefined) exact(l.quantity, 'quantity');
    const backend = await this.backend();
    const args = backend === 'module' ? ['CL.ALL', String(wired.length)] : ['FCALL', 'cl_all', String(wired.length)];
    args.push(...keys);
    wired.forEach((l, i) => {
      args.push(l.algorithm.toUpperCase(), ...(words[i] as string[]));
      if (l.quantity !== undefined) args.push('QUANTITY', s(l.quantity));
    });
    args.push('MS', 'DETAILS');
    const send = async (): Promise<AllDecision> => {
      const reply = await this.#call(keys[0] as string, args);
      const top = decision(reply);
      const r = reply as unknown[];
      const details = r[6];
      if (!Array.isArray(details) || details.length !== wired.length) {
        throw new ThrottleError(`redis-throttle: expected CL.ALL's reply with DETAILS, got ${JSON.stringify(reply)}`);
      }
      return { ...top, binding: int(r[5], 'index') - 1, details: details.map(decision) };
    };
    return this.#answeringBlocks(send, () => this.#allBlocked(wired));
  }

  /**
   * CL.ALL refused a call naming a GCRA key under a block (Throttle.block): the decision is that
   * limiter's denial (the first blocked one binds; nothing is taken), with every other limiter's
   * state read by a peek (quantity 0). undefined when no key is blocked (the error stands),
   * 'gone' when none is but a GCRA key has vanished since (its block may have just ended).
   * Keys are sent as they are.
   */
  async #allBlocked(limiters: readonly Limiter[]): Promise<AllDecision | 'gone' | undefined> {
    const state = await Promise.all(
      limiters.map((l) => (l.algorithm === 'throttle' ? this.#blocked(l.key) : Promise.resolve(undefined))),
    );
    const held = state.map((h) => (h === 'gone' ? undefined : h));
    const binding = held.findIndex((h) => h !== undefined);
    if (binding < 0 && state.includes('gone')) return 'gone';
    const b = limiters[binding];
    // Only a call taking units is denied by the block (a refund or peek gets the server's error).
    if (b === undefined || (b.quantity !== undefined && BigInt(s(b.quantity)) <= 0n)) return undefined;
    const details = await Promise.all(
      limiters.map(async (l, i) => {
        const d = await this.#decide({ ...l, quantity: 0 });
        const h = held[i];
        if (h === undefined) return d;
        const units = l.quantity === undefined ? 1n : BigInt(s(l.quantity));
        return {
          ...d,
          limited: units > 0n,
          retryAfterMs: h >= 0 && units > 0n && units <= BigInt(d.limit) ? h : -1,
          resetAfterMs: h,
        };
      }),
    );
    return { ...(details[binding] as Decision), binding, details };
  }

  /** A lease for `id` among at most `limit` live leases (CL.ACQUIRE; the module only). */
  async acquire(key: string, p: AcquireParams): Promise<Decision> {
    if ((await this.backend()) === 'twin') throw new ThrottleError(`redis-throttle: ${MODULE_ONLY}`);
    exact(p.limit, 'limit');
    const k = this.#w(key);
    return decision(await this.#call(k, ['CL.ACQUIRE', k, s(p.limit), s(p.leaseMs), p.id, 'MS']));
  }

  /** Gives `id`'s lease back: true if it held a live one (CL.RELEASE; the module only). */
  async release(key: string, id: string): Promise<boolean> {
    if ((await this.backend()) === 'twin') throw new ThrottleError(`redis-throttle: ${MODULE_ONLY}`);
    const k = this.#w(key);
    return int(await this.#call(k, ['CL.RELEASE', k, id]), 'CL.RELEASE reply') === 1;
  }

  /** Reserves the next free slot of `count` per `periodMs` within `maxWaitMs` (CL.PACE; the module only). */
  async pace(key: string, p: PaceParams): Promise<PaceDecision> {
    if ((await this.backend()) === 'twin') throw new ThrottleError(`redis-throttle: ${MODULE_ONLY}`);
    exact(p.count, 'count');
    exact(p.quantity, 'quantity');
    const k = this.#w(key);
    const args = ['CL.PACE', k, s(p.count), s(p.periodMs)];
    if (p.maxWaitMs !== undefined) args.push('MAXWAIT', s(p.maxWaitMs));
    if (p.quantity !== undefined) args.push('QUANTITY', s(p.quantity));
    args.push('MS');
    const d = decision(await this.#call(k, args));
    return {
      limited: d.limited,
      waitMs: d.limit,
      queued: d.remaining,
      retryAfterMs: d.retryAfterMs,
      resetAfterMs: d.resetAfterMs,
    };
  }

  /**
   * A fixed-window count of every hit, for the adapters whose host library compares the count
   * with its own limit (and for a count the module's commands cannot keep): plain commands in
   * one MULTI/EXEC on `key` (`SET key 0 PX windowMs NX`, `INCRBY key quantity`, `PTTL key`),
   * which store the bytes and absolute expiry CL.COUNTER stores, at a fraction of
   * `FCALL cl_counter`'s cost. The count includes denied hits (the host library's own meaning).
   * A key of another type or a string that is not an integer gets the server's error and is
   * left as it was; an integer string without an expiry (written by someone else) is counted
   * and then given the window's expiry, as CL.COUNTER does, by a second command.
   *
   * `windowMs` null: a count that never expires (`INCRBY`, `PTTL`; ttlMs -1), as
   * rate-limiter-flexible's `duration: 0`.
   */
  hit(key: string, windowMs: Int | null, quantity: Int = 1): Promise<{ count: number; ttlMs: number }> {
    return this.#hit(this.#w(key), windowMs, quantity);
  }

  async #hit(key: string, windowMs: Int | null, quantity: Int): Promise<{ count: number; ttlMs: number }> {
    exact(quantity, 'quantity');
    if (windowMs === null) {
      const reply = await this.#transaction(key, [
        ['INCRBY', key, s(quantity)],
        ['PTTL', key],
      ]);
      return { count: count(reply[0], 'INCRBY reply'), ttlMs: int(reply[1], 'PTTL reply') };
    }
    const w = s(windowMs);
    const reply = await this.#transaction(key, [
      ['SET', key, '0', 'PX', w, 'NX'],
      ['INCRBY', key, s(quantity)],
      ['PTTL', key],
    ]);
    const n = count(reply[1], 'INCRBY reply');
    let ttlMs = int(reply[2], 'PTTL reply');
    if (ttlMs === -1) {
      // Someone else's integer without an expiry: CL.COUNTER opens a window on it.
      await this.#call(key, ['PEXPIRE', key, w, 'NX']);
      ttlMs = Number(w);
    }
    return { count: n, ttlMs };
  }

  /**
   * The count Throttle.hit (or CL.COUNTER) keeps at `key` and its ms left (-1: no expiry), read
   * in one MULTI (`GET`, `PTTL`); undefined when there is no key.
   */
  async count(key: string): Promise<{ count: number; ttlMs: number } | undefined> {
    const k = this.#w(key);
    const [v, ttl] = await this.#transaction(k, [
      ['GET', k],
      ['PTTL', k],
    ]);
    if (v == null) return undefined;
    return { count: count(v, 'GET reply'), ttlMs: int(ttl, 'PTTL reply') };
  }

  /**
   * Commands in one MULTI/EXEC on `key`'s node (every key must share its slot): EXEC's replies,
   * in order. A command's error inside EXEC fails the call (after every command ran, as Redis
   * runs them). Sent as the client's own commands are: with an ioredis keyPrefix, ioredis
   * prefixes the keys of the commands it knows (as `client.call` does).
   */
  transaction(key: string, commands: string[][]): Promise<unknown[]> {
    return this.#exec(commands, () => this.#t.execAsCall(key, commands));
  }

  /** A transaction whose keys are sent as they are (already prefixed). */
  #transaction(key: string, commands: string[][]): Promise<unknown[]> {
    return this.#exec(commands, () => this.#t.exec(key, commands));
  }

  async #exec(commands: string[][], send: () => Promise<unknown>): Promise<unknown[]> {
    let reply: unknown;
    try {
      reply = await this.#timed(send());
    } catch (e) {
      throw asError(e);
    }
    if (!Array.isArray(reply) || reply.length !== commands.length) {
      throw new ThrottleError(
        `redis-throttle: expected EXEC's ${commands.length} replies, got ${JSON.stringify(reply)}`,
      );
    }
    for (const r of reply) if (r instanceof Error) throw asError(r);
    return reply;
  }

  /**
   * Blocks a limiter: writes its own key for "admits nothing before now + ms", on the server's
   * clock, so every caller of the key sees the block in the limiter's reply (`retryAfterMs`).
   * The one way the package blocks (rate-limiter-flexible's `blockDuration` and `block()`,
   * @nestjs/throttler's `blockDuration`, @fastify/rate-limit's `continueExceeding`).
   *
   * - `counter`: `SET key <limit + 1> PX ms` (over the limit, as RateLimiterRedis's block writes
   *   it, so a plain count's next hit does not read as the one going over): full until then; the
   *   key then expires, so the count starts again from zero.
   * - `throttle` (GCRA): `SET key BLOCKED PX ms`. A TAT cannot hold a block: the commands read a
   *   TAT beyond now + the limiter's tolerance as exactly empty (a clock stepped back), which
   *   admits again within one emission interval. CL.THROTTLE refuses the value BLOCKED as not its
   *   state (an error, on the denial path only): this class then answers the call as denied
   *   until the key expires (`retryAfterMs` = its PTTL), after which the limiter is full again.
   *   A CL.ALL (`all()`) naming the key gets the server's error until then.
   * - `window`: in one MULTI, `DEL key` and the window command taking `limit` units, which leaves
   *   the exact log full until now + `windowMs`, then empty at once: the block lasts one window,
   *   whatever `ms` is.
   *
   * `ms` Infinity: the key is written without an expiry, as RateLimiterRedis's `block(key, 0)`.
   * A GCRA key is then denied (`retryAfterMs` and `resetAfterMs` -1) until it is deleted; a
   * counter key holds `limit + 1` until the next counting call opens a window on it (CL.COUNTER
   * and Throttle.hit give an integer without an expiry the window's, as RateLimiterRedis's own
   * script does). A window cannot be blocked without an end.
   *
   * `marker`: a key in `key`'s slot (see `sibling`) written in the same transaction to expire when
   * the block ends. Returns the block's length in ms (`windowMs` for a window).
   */
  block(l: Limiter, ms: number, options: { marker?: string } = {}): Promise<number> {
    return this.#block(this.#wl(l), ms, options.marker === undefined ? undefined : this.#w(options.marker));
  }

  async #block(l: Limiter, ms: number, marker: string | undefined): Promise<number> {
    const forever = ms === Infinity;
    if (!(forever || (Number.isFinite(ms) && ms > 0)))
      throw new ThrottleError(`redis-throttle: a block needs a positive duration in ms (or Infinity), got ${ms}`);
    if (marker !== undefined && this.#t.cluster && slot(marker) !== slot(l.key)) {
      throw new ThrottleError(
        `redis-throttle: the block marker ${JSON.stringify(marker)} is not in the slot of ${JSON.stringify(l.key)}; nothing was sent`,
      );
    }
    const msInt = forever ? '' : String(Math.max(1, Math.round(ms)));
    const px = forever ? [] : ['PX', msInt];
    const send = async (commands: string[][]): Promise<void> => {
      if (marker !== undefined) commands.push(['SET', marker, '1', ...px]);
      if (commands.length === 1) await this.#call(l.key, commands[0] as string[]);
      else await this.#transaction(l.key, commands);
    };
    switch (l.algorithm) {
      case 'counter':
        exact(l.limit, 'limit');
        await send([['SET', l.key, (BigInt(s(l.limit)) + 1n).toString(), ...px]]);
        return forever ? Infinity : Number(msInt);
      case 'throttle':
        await send([['SET', l.key, BLOCKED, ...px]]);
        return forever ? Infinity : Number(msInt);
      case 'window': {
        if (forever)
          throw new ThrottleError(
            'redis-throttle: a window limiter cannot be blocked without an end (its log expires with the window)',
          );
        const backend = await this.backend();
        const words = params(l);
        const fill =
          backend === 'module'
            ? ['CL.WINDOW', l.key, ...words, s(l.limit), 'MS']
            : ['FCALL', 'cl_window', '1', l.key, ...words, s(l.limit), 'MS'];
        const span = Number(s(l.windowMs));
        const cmds = [['DEL', l.key], fill];
        if (marker !== undefined) cmds.push(['SET', marker, '1', 'PX', String(span)]);
        const replies = await this.#transaction(l.key, cmds);
        const d = decision(replies[1]);
        if (d.limited)
          throw new ThrottleError(
            `redis-throttle: the window refused its own limit while blocking ${JSON.stringify(l.key)}`,
          );
        return d.resetAfterMs > 0 ? d.resetAfterMs : span;
      }
      default:
        throw new ThrottleError(
          `redis-throttle: a ${l.algorithm} limiter cannot be blocked (only counter, window and throttle/GCRA)`,
        );
    }
  }

  /**
   * Blocks `l` as `block` does, unless a block started here is in force: its marker
   * (`<key>:blocked`, in the key's slot) lives exactly as long as the block, so denials during a
   * block do not extend it (the host libraries block once, at the denial that goes over). Returns
   * the block's length in ms, or undefined when none was written.
   *
   * Call it after a denial of `l` (its `quantity` the denied units). That denial was decided a
   * round trip earlier, possibly under a block that has ended since (its marker gone with it): so
   * the caller that wins the marker first asks the limiter again (a peek) and blocks only if it
   * still refuses those units, with no block in force; otherwise it gives the marker back.
   */
  blockOnce(l: Limiter, ms: number): Promise<number | undefined> {
    return this.#blockOnce(this.#wl(l), ms);
  }

  async #blockOnce(l: Limiter, ms: number): Promise<number | undefined> {
    const span = String(Math.max(1, Math.round(l.algorithm === 'window' ? Number(s(l.windowMs)) : ms)));
    const marker = this.#sibling(l.key, ':blocked');
    const fresh = await this.#call(marker, ['SET', marker, '1', 'PX', span, 'NX']);
    if (fresh == null) return undefined;
    let remaining: bigint;
    try {
      remaining = await this.#remaining(l);
    } catch (e) {
      await this.#call(marker, ['DEL', marker]).catch(() => undefined);
      throw e;
    }
    const units = l.quantity === undefined ? 1n : BigInt(s(l.quantity));
    if (remaining >= units) {
      // A stale denial: the limiter admits these units now, so there is nothing to go over.
      await this.#call(marker, ['DEL', marker]);
      return undefined;
    }
    return this.#block(l, Number(span), marker);
  }

  /**
   * The units `l` (its key sent as it is) would admit now, taking none: a peek (quantity 0), or
   * for a fixed window its count, which CL.COUNTER and Throttle.hit store alike (so a twin-only
   * server's plain-command stores stay off FCALL).
   */
  async #remaining(l: Limiter): Promise<bigint> {
    if (l.algorithm === 'counter') {
      const v = await this.#call(l.key, ['GET', l.key]);
      if (v == null) return BigInt(s(l.limit));
      if (/^\d{1,18}$/.test(String(v))) {
        const left = BigInt(s(l.limit)) - BigInt(String(v));
        return left > 0n ? left : 0n;
      }
    }
    return BigInt((await this.#decide({ ...l, quantity: 0 })).remaining);
  }

  /** One limiter by its algorithm name (what the host-library adapters use). */
  decide(l: Limiter): Promise<Decision> {
    return this.#decide(this.#wl(l));
  }

  async #decide(l: Limiter): Promise<Decision> {
    return this.#single(l.algorithm, l.key, params(l), l.quantity);
  }

  /**
   * Keyed plain commands of the adapters (the client's key prefix applied once): `del` (DEL; 1
   * when the key existed), `put` (SET, with PX unless `ms` is Infinity), `renew` (PEXPIRE … GT).
   */
  async del(key: string): Promise<number> {
    const k = this.#w(key);
    return int(await this.#call(k, ['DEL', k]), 'DEL reply');
  }

  async put(key: string, value: string, ms: number): Promise<void> {
    const k = this.#w(key);
    await this.#call(
      k,
      ms === Infinity ? ['SET', k, value] : ['SET', k, value, 'PX', String(Math.max(1, Math.round(ms)))],
    );
  }

  async renew(key: string, ms: number): Promise<void> {
    const k = this.#w(key);
    await this.#call(k, ['PEXPIRE', k, String(Math.max(1, Math.round(ms))), 'GT']);
  }

  /**
   * Counts an event beside `key`: `<key><suffix>` in the key's hash slot (see `sibling`), in one
   * MULTI of `SET … 0 PX ms NX` and `INCRBY … by` (and `PEXPIRE … GT` with `extend`), so the
   * count lives `ms` from its first event (or from its latest, with `extend`). Returns the count.
   * @fastify/rate-limit's `ban`, `exponentialBackoff` and `read` count a key's denials with it.
   */
  async tally(
    key: string,
    suffix: string,
    ms: number,
    options: { extend?: boolean; by?: number } = {},
  ): Promise<number> {
    const k = this.#w(key);
    const t = this.#sibling(k, suffix);
    const px = String(Math.max(1, Math.round(ms)));
    const cmds = [
      ['SET', t, '0', 'PX', px, 'NX'],
      ['INCRBY', t, String(options.by ?? 1)],
    ];
    if (options.extend === true) cmds.push(['PEXPIRE', t, px, 'GT']);
    return int((await this.#transaction(k, cmds))[1], 'INCRBY reply');
  }

  /** The count `tally` keeps beside `key` (0 when none). */
  async tallied(key: string, suffix: string): Promise<number> {
    const t = this.#sibling(this.#w(key), suffix);
    const v = await this.#call(t, ['GET', t]);
    return v == null ? 0 : count(v, 'GET reply');
  }

  /**
   * A raw command, routed by `key` (errors as ThrottleError). Sent as the client's own commands
   * are: with an ioredis keyPrefix, ioredis prefixes the keys of the commands it knows (as
   * `client.call` does), not those of CL.*.
   */
  async command(key: string, args: string[]): Promise<unknown> {
    try {
      return await this.#timed(this.#t.sendAsCall(key, args));
    } catch (e) {
      throw asError(e);
    }
  }
}

/** The answer for `units` of a GCRA limiter of `limit` under a block with `held` ms left (-1: no end). */
function blockedDecision(limit: number, units: bigint, held: number): Decision {
  const taking = units > 0n;
  return {
    limited: taking,
    limit,
    remaining: 0,
    retryAfterMs: held >= 0 && taking && units <= BigInt(limit) ? held : -1,
    resetAfterMs: held,
  };
}
