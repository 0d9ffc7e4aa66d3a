/**
 * The limiter commands on a connection: one limiter (CL.<NAME> or FCALL cl_<name>), several at
 * one instant (CL.ALL), leases and pacing (the module only), and the answer for a GCRA key under a
 * block (see store.ts), which the commands refuse as not their state. Keys are sent as they are.
 */
import type { Connection } from './connection.js';
import { crossSlot } from './slot.js';
import { ThrottleError } from './errors.js';
import type { AcquireParams, AllDecision, Backend, Decision, Limiter, PaceDecision, PaceParams } from './types.js';
import { decision, exact, int, params, s } from './wire.js';

/** The value of a GCRA key under a block (Throttle.block): not a TAT, so CL.THROTTLE refuses it. */
export const BLOCKED = 'redis-throttle:blocked';

/** The server's refusal of a key whose value is not the command's state (e.g. BLOCKED under CL.THROTTLE). */
const invalidState = (e: unknown): boolean => e instanceof Error && e.message.includes('does not hold valid');

const MODULE_ONLY =
  'the server runs the Functions twin (no module): CL.ACQUIRE, CL.RELEASE and CL.PACE exist only in the redis-throttle module';

/** One limiter by its algorithm name. */
export async function decide(c: Connection, l: Limiter): Promise<Decision> {
  const words = params(l);
  if (l.quantity !== undefined) exact(l.quantity, 'quantity');
  const args = command(await c.backend(), l, words);
  const send = async (): Promise<Decision> => decision(await c.call(l.key, args));
  if (l.algorithm !== 'throttle') return send();
  return answeringBlocks(send, async () => {
    const held = await blocked(c, l.key);
    if (typeof held !== 'number') return held;
    const limit = Number(BigInt(words[0] as string) + 1n);
    const units = l.quantity === undefined ? 1n : BigInt(s(l.quantity));
    return blockedDecision(limit, units, held);
  });
}

/**
 * One limiter's command, its key as it is: CL.<NAME> key … (the module) or FCALL cl_<name> 1
 * key … (the twin), then the quantity (positional, or QUANTITY for a quota), DEBIT and MS.
 */
export function command(backend: Backend, l: Limiter, words: string[] = params(l)): string[] {
  const name = l.algorithm;
  const head = backend === 'module' ? [`CL.${name.toUpperCase()}`, l.key] : ['FCALL', `cl_${name}`, '1', l.key];
  const q = l.quantity === undefined ? [] : name === 'quota' ? ['QUANTITY', s(l.quantity)] : [s(l.quantity)];
  return [...head, ...words, ...q, ...(l.debit === true ? ['DEBIT'] : []), 'MS'];
}

/**
 * `send`, unless the server refuses a key as not its state: a GCRA key under a block
 * (Throttle.block) holds BLOCKED, which CL.THROTTLE refuses. `blocked` then gives the answer,
 * or undefined (the error stands), or 'gone' when a block ended between the two round trips:
 * the key is free, so `send` again (twice at most).
 */
async function answeringBlocks<T>(send: () => Promise<T>, blocked: () => Promise<T | 'gone' | undefined>): Promise<T> {
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
 * ms left of a GCRA block on `key` (its value is BLOCKED), -1 for a block without an end; 'gone'
 * when the key is absent, undefined when it holds something else.
 */
async function blocked(c: Connection, key: string): Promise<number | 'gone' | undefined> {
  let replies: unknown[];
  try {
    replies = await c.transaction(key, [
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

/** Several limiters decided at one instant, all or nothing (CL.ALL … [DEBIT] MS DETAILS). */
export async function all(c: Connection, wired: readonly Limiter[], debit: boolean): Promise<AllDecision> {
  if (wired.length === 0) throw new ThrottleError('redis-throttle: all() needs at least one limiter');
  if (wired.some((l) => l.debit !== undefined))
    throw new ThrottleError(
      "redis-throttle: CL.ALL debits as a whole: all(limiters, { debit: true }), not a limiter's own `debit`; nothing was sent",
    );
  const keys = wired.map((l) => l.key);
  if (c.t.cluster) {
    const cross = crossSlot(keys);
    if (cross) {
      throw new ThrottleError(
        `redis-throttle: the keys of one CL.ALL decision must share a hash slot in a cluster: ${JSON.stringify(keys[cross[0]])} and ${JSON.stringify(keys[cross[1]])} do not (use a hash tag such as rl:{user42}:second and rl:{user42}:hour); nothing was sent`,
      );
    }
  }
  const words = wired.map((l) => params(l));
  for (const l of wired) if (l.quantity !== undefined) exact(l.quantity, 'quantity');
  const backend = await c.backend();
  const args = backend === 'module' ? ['CL.ALL', String(wired.length)] : ['FCALL', 'cl_all', String(wired.length)];
  args.push(...keys);
  wired.forEach((l, i) => {
    args.push(l.algorithm.toUpperCase(), ...(words[i] as string[]));
    if (l.quantity !== undefined) args.push('QUANTITY', s(l.quantity));
  });
  if (debit) args.push('DEBIT');
  args.push('MS', 'DETAILS');
  const send = async (): Promise<AllDecision> => {
    const reply = await c.call(keys[0] as string, args);
    const top = decision(reply);
    const r = reply as unknown[];
    const details = r[6];
    if (!Array.isArray(details) || details.length !== wired.length) {
      throw new ThrottleError(`redis-throttle: expected CL.ALL's reply with DETAILS, got ${JSON.stringify(reply)}`);
    }
    return { ...top, binding: int(r[5], 'index') - 1, details: details.map(decision) };
  };
  return answeringBlocks(send, () => allBlocked(c, wired));
}

/**
 * CL.ALL refused a call naming a GCRA key under a block (Throttle.block): the decision is that
 * limiter's denial (the first blocked one binds; nothing is taken), with every other limiter's
 * state read by a peek (quantity 0). undefined when no key is blocked (the error stands),
 * 'gone' when none is but a GCRA key has vanished since (its block may have just ended).
 */
async function allBlocked(c: Connection, limiters: readonly Limiter[]): Promise<AllDecision | 'gone' | undefined> {
  const state = await Promise.all(
    limiters.map((l) => (l.algorithm === 'throttle' ? blocked(c, l.key) : Promise.resolve(undefined))),
  );
  const held = state.map((h) => (h === 'gone' ? undefined : h));
  const binding = held.findIndex((h) => h !== undefined);
  if (binding < 0 && state.includes('gone')) return 'gone';
  const b = limiters[binding];
  // Only a call taking units is denied by the block (a refund or peek gets the server's error).
  if (b === undefined || (b.quantity !== undefined && BigInt(s(b.quantity)) <= 0n)) return undefined;
  const details = await Promise.all(
    limiters.map(async (l, i) => {
      const d = await decide(c, { ...l, quantity: 0 });
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

async function moduleOnly(c: Connection): Promise<void> {
  if ((await c.backend()) === 'twin') throw new ThrottleError(`redis-throttle: ${MODULE_ONLY}`);
}

/** CL.ACQUIRE (the module only). */
export async function acquire(c: Connection, key: string, p: AcquireParams): Promise<Decision> {
  await moduleOnly(c);
  exact(p.limit, 'limit');
  return decision(await c.call(key, ['CL.ACQUIRE', key, s(p.limit), s(p.leaseMs), p.id, 'MS']));
}

/** CL.RELEASE (the module only). */
export async function release(c: Connection, key: string, id: string): Promise<boolean> {
  await moduleOnly(c);
  return int(await c.call(key, ['CL.RELEASE', key, id]), 'CL.RELEASE reply') === 1;
}

/** CL.PACE (the module only). */
export async function pace(c: Connection, key: string, p: PaceParams): Promise<PaceDecision> {
  await moduleOnly(c);
  exact(p.count, 'count');
  exact(p.quantity, 'quantity');
  const args = ['CL.PACE', key, s(p.count), s(p.periodMs)];
  if (p.maxWaitMs !== undefined) args.push('MAXWAIT', s(p.maxWaitMs));
  if (p.quantity !== undefined) args.push('QUANTITY', s(p.quantity));
  args.push('MS');
  const d = decision(await c.call(key, args));
  return {
    limited: d.limited,
    waitMs: d.limit,
    queued: d.remaining,
    retryAfterMs: d.retryAfterMs,
    resetAfterMs: d.resetAfterMs,
  };
}
