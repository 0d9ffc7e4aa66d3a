/**
 * One caller's client as the core uses it: its transport, its key prefix, the backend detected
 * once (the module or the Functions twin), and every round trip under the call's timeout with its
 * failure as a ThrottleError. Keys given here are sent as they are (already prefixed).
 */
import { ThrottleError } from './errors.js';
import { sibling } from './slot.js';
import { type Transport, transport } from './transport.js';
import { missingLibraryMessage, warnIfOutdated } from './twin.js';
import type { Backend, Limiter, RedisLike, ThrottleOptions } from './types.js';
import { asError } from './wire.js';

export class Connection {
  readonly t: Transport;
  readonly #timeoutMs: number;
  #backend: Promise<Backend> | undefined;
  /** Detection found neither the module nor the twin (see `module`). */
  #neither = false;
  /** The caller's client, for the address the missing-library error names. */
  readonly #client: RedisLike;

  constructor(client: RedisLike, options: ThrottleOptions = {}) {
    this.#client = client;
    this.t = transport(client);
    this.#timeoutMs = options.timeoutMs ?? 1000;
    if (options.backend !== undefined) this.#backend = Promise.resolve(options.backend);
  }

  /** The sibling (see `sibling`) of a key as it is sent, itself starting with the client's key prefix. */
  sibling(key: string, suffix: string): string {
    const p = this.t.prefix;
    return p + sibling(key.slice(p.length), suffix, p);
  }

  /** A caller's key as it is sent (with the client's key prefix). */
  w(key: string): string {
    return this.t.prefix + key;
  }

  wl<L extends Limiter>(l: L): L {
    return { ...l, key: this.w(l.key) };
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

  /**
   * Whether the server has the module, for a path with a plain-command equivalent to fall back
   * on: false on the twin, on a server found to have neither (asked once, remembered), and when
   * it could not be asked this time (asked again at the next call).
   */
  async module(): Promise<boolean> {
    if (this.#neither) return false;
    return (await this.backend().catch(() => undefined)) === 'module';
  }

  async #detect(): Promise<Backend> {
    let info: unknown;
    try {
      info = await this.timed(this.t.send(undefined, ['COMMAND', 'INFO', 'cl.throttle']));
    } catch (e) {
      throw asError(e);
    }
    if (Array.isArray(info) && info.some((x) => x != null)) return 'module';
    let libs: unknown;
    try {
      libs = await this.timed(this.t.send(undefined, ['FUNCTION', 'LIST', 'LIBRARYNAME', 'throttle']));
    } catch {
      libs = undefined;
    }
    if (Array.isArray(libs) && libs.length > 0) {
      await warnIfOutdated((args) => this.timed(this.t.send(undefined, args)), this.#client);
      return 'twin';
    }
    this.#neither = true;
    throw new ThrottleError(missingLibraryMessage(this.#client));
  }

  timed<T>(p: Promise<T>): Promise<T> {
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
  async call(key: string, args: string[]): Promise<unknown> {
    try {
      return await this.timed(this.t.send(key, args));
    } catch (e) {
      throw asError(e);
    }
  }

  /** A command sent as the client's own `call` does (ioredis prefixes the keys of the commands it knows). */
  async callAsClient(key: string, args: string[]): Promise<unknown> {
    try {
      return await this.timed(this.t.sendAsCall(key, args));
    } catch (e) {
      throw asError(e);
    }
  }

  /** A transaction whose keys are sent as they are (already prefixed). */
  transaction(key: string, commands: string[][]): Promise<unknown[]> {
    return this.#exec(commands, () => this.t.exec(key, commands));
  }

  /** A transaction sent as the client's own commands are (see callAsClient). */
  transactionAsClient(key: string, commands: string[][]): Promise<unknown[]> {
    return this.#exec(commands, () => this.t.execAsCall(key, commands));
  }

  async #exec(commands: string[][], send: () => Promise<unknown>): Promise<unknown[]> {
    let reply: unknown;
    try {
      reply = await this.timed(send());
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
}
