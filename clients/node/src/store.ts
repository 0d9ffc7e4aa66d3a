/**
 * The host-library stores' helpers on a connection: a fixed-window count in plain commands (for
 * the hosts that compare a count with their own limit), blocks written on the server, a count
 * kept beside a key, and the keyed plain commands. Keys are sent as they are (already prefixed);
 * Throttle's methods of the same names document each for callers.
 */
import { BLOCKED, decide } from './commands.js';
import type { Connection } from './connection.js';
import { ThrottleError } from './errors.js';
import { slot } from './slot.js';
import type { Int, Limiter } from './types.js';
import { count as countOf, decision, exact, int, params, s } from './wire.js';

export async function hit(
  c: Connection,
  key: string,
  windowMs: Int | null,
  quantity: Int,
): Promise<{ count: number; ttlMs: number }> {
  exact(quantity, 'quantity');
  if (windowMs === null) {
    const reply = await c.transaction(key, [
      ['INCRBY', key, s(quantity)],
      ['PTTL', key],
    ]);
    return { count: countOf(reply[0], 'INCRBY reply'), ttlMs: int(reply[1], 'PTTL reply') };
  }
  const w = s(windowMs);
  const reply = await c.transaction(key, [
    ['SET', key, '0', 'PX', w, 'NX'],
    ['INCRBY', key, s(quantity)],
    ['PTTL', key],
  ]);
  const n = countOf(reply[1], 'INCRBY reply');
  let ttlMs = int(reply[2], 'PTTL reply');
  if (ttlMs === -1) {
    // Someone else's integer without an expiry: CL.COUNTER opens a window on it.
    await c.call(key, ['PEXPIRE', key, w, 'NX']);
    ttlMs = Number(w);
  }
  return { count: n, ttlMs };
}

export async function count(c: Connection, key: string): Promise<{ count: number; ttlMs: number } | undefined> {
  const [v, ttl] = await c.transaction(key, [
    ['GET', key],
    ['PTTL', key],
  ]);
  if (v == null) return undefined;
  return { count: countOf(v, 'GET reply'), ttlMs: int(ttl, 'PTTL reply') };
}

export async function block(c: Connection, l: Limiter, ms: number, marker: string | undefined): Promise<number> {
  const forever = ms === Infinity;
  if (!(forever || (Number.isFinite(ms) && ms > 0)))
    throw new ThrottleError(`redis-throttle: a block needs a positive duration in ms (or Infinity), got ${ms}`);
  if (marker !== undefined && c.t.cluster && slot(marker) !== slot(l.key)) {
    throw new ThrottleError(
      `redis-throttle: the block marker ${JSON.stringify(marker)} is not in the slot of ${JSON.stringify(l.key)}; nothing was sent`,
    );
  }
  const msInt = forever ? '' : String(Math.max(1, Math.round(ms)));
  const px = forever ? [] : ['PX', msInt];
  const send = async (commands: string[][]): Promise<void> => {
    if (marker !== undefined) commands.push(['SET', marker, '1', ...px]);
    if (commands.length === 1) await c.call(l.key, commands[0] as string[]);
    else await c.transaction(l.key, commands);
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
      const backend = await c.backend();
      const words = params(l);
      const fill =
        backend === 'module'
          ? ['CL.WINDOW', l.key, ...words, s(l.limit), 'MS']
          : ['FCALL', 'cl_window', '1', l.key, ...words, s(l.limit), 'MS'];
      const span = Number(s(l.windowMs));
      const cmds = [['DEL', l.key], fill];
      if (marker !== undefined) cmds.push(['SET', marker, '1', 'PX', String(span)]);
      const replies = await c.transaction(l.key, cmds);
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

export async function blockOnce(c: Connection, l: Limiter, ms: number): Promise<number | undefined> {
  const span = String(Math.max(1, Math.round(l.algorithm === 'window' ? Number(s(l.windowMs)) : ms)));
  const marker = c.sibling(l.key, ':blocked');
  const fresh = await c.call(marker, ['SET', marker, '1', 'PX', span, 'NX']);
  if (fresh == null) return undefined;
  let left: bigint;
  try {
    left = await remaining(c, l);
  } catch (e) {
    await c.call(marker, ['DEL', marker]).catch(() => undefined);
    throw e;
  }
  const units = l.quantity === undefined ? 1n : BigInt(s(l.quantity));
  if (left >= units) {
    // A stale denial: the limiter admits these units now, so there is nothing to go over.
    await c.call(marker, ['DEL', marker]);
    return undefined;
  }
  return block(c, l, Number(span), marker);
}

/**
 * The units `l` would admit now, taking none: a peek (quantity 0), or for a fixed window its
 * count, which CL.COUNTER and Throttle.hit store alike (so a twin-only server's plain-command
 * stores stay off FCALL).
 */
async function remaining(c: Connection, l: Limiter): Promise<bigint> {
  if (l.algorithm === 'counter') {
    const v = await c.call(l.key, ['GET', l.key]);
    if (v == null) return BigInt(s(l.limit));
    if (/^\d{1,18}$/.test(String(v))) {
      const left = BigInt(s(l.limit)) - BigInt(String(v));
      return left > 0n ? left : 0n;
    }
  }
  return BigInt((await decide(c, { ...l, quantity: 0 })).remaining);
}

export async function del(c: Connection, key: string): Promise<number> {
  return int(await c.call(key, ['DEL', key]), 'DEL reply');
}

export async function put(c: Connection, key: string, value: string, ms: number): Promise<void> {
  await c.call(
    key,
    ms === Infinity ? ['SET', key, value] : ['SET', key, value, 'PX', String(Math.max(1, Math.round(ms)))],
  );
}

export async function renew(c: Connection, key: string, ms: number): Promise<void> {
  await c.call(key, ['PEXPIRE', key, String(Math.max(1, Math.round(ms))), 'GT']);
}

export async function tally(
  c: Connection,
  key: string,
  suffix: string,
  ms: number,
  options: { extend?: boolean; by?: number },
): Promise<number> {
  const t = c.sibling(key, suffix);
  const px = String(Math.max(1, Math.round(ms)));
  const cmds = [
    ['SET', t, '0', 'PX', px, 'NX'],
    ['INCRBY', t, String(options.by ?? 1)],
  ];
  if (options.extend === true) cmds.push(['PEXPIRE', t, px, 'GT']);
  return int((await c.transaction(key, cmds))[1], 'INCRBY reply');
}

export async function tallied(c: Connection, key: string, suffix: string): Promise<number> {
  const t = c.sibling(key, suffix);
  const v = await c.call(t, ['GET', t]);
  return v == null ? 0 : countOf(v, 'GET reply');
}
