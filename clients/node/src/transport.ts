/**
 * The caller's Redis client as the package sends through it: node-redis (client, cluster or pool;
 * `sendCommand`) or ioredis (Redis or Cluster; `Command` objects by slot), each with its own way
 * of running a MULTI/EXEC and of applying (or not) an ioredis `keyPrefix`.
 */
import { ThrottleError } from './errors.js';
import { slot } from './slot.js';

export type Send = (key: string | undefined, args: string[]) => Promise<unknown>;

export interface Transport {
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
export function transport(client: any): Transport {
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
