/** Redis Cluster's hash slot of a key (CRC16/XMODEM of the key, or of its `{hash tag}`, mod 16384). */

const TABLE = (() => {
  const t = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    t[i] = c;
  }
  return t;
})();

function bytes(key: string | Uint8Array): Uint8Array {
  return typeof key === 'string' ? new TextEncoder().encode(key) : key;
}

/** The slot Redis Cluster puts `key` in. */
export function slot(key: string | Uint8Array): number {
  let b = bytes(key);
  const open = b.indexOf(0x7b); // '{'
  if (open >= 0) {
    const close = b.indexOf(0x7d, open + 1); // '}'
    if (close > open + 1) b = b.subarray(open + 1, close);
  }
  let crc = 0;
  for (const x of b) crc = ((crc << 8) & 0xffff) ^ (TABLE[((crc >> 8) ^ x) & 0xff] as number);
  return crc & 16383;
}

/** The first two keys (by index) that fall in different slots, or undefined when all share one. */
export function crossSlot(keys: ReadonlyArray<string | Uint8Array>): [number, number] | undefined {
  if (keys.length < 2) return undefined;
  const first = slot(keys[0] as string);
  for (let i = 1; i < keys.length; i++) if (slot(keys[i] as string) !== first) return [0, i];
  return undefined;
}

let tags: string[] | undefined;

/** A hash tag (decimal digits) whose slot is `s`, the smallest such number. */
function tagOf(s: number): string {
  if (tags === undefined) {
    const all: string[] = new Array(16384);
    for (let n = 0, left = 16384; left > 0; n++) {
      const t = String(n);
      let crc = 0; // CRC16 of the ASCII digits, as slot() computes it
      for (let i = 0; i < t.length; i++)
        crc = ((crc << 8) & 0xffff) ^ (TABLE[((crc >> 8) ^ t.charCodeAt(i)) & 0xff] as number);
      const k = crc & 16383;
      if (all[k] === undefined) {
        all[k] = t;
        left--;
      }
    }
    tags = all;
  }
  return tags[s] as string;
}

/**
 * The name of a key that belongs with `key` (its ban count, its block marker) and lies in the
 * same hash slot, so one cluster node holds both and a transaction may touch both:
 * `key + suffix` when that falls in `key`'s slot (always, when `key` has a hash tag), else
 * `{tag}` + `key + suffix` with a tag of `key`'s slot. With a client's key `prefix` (ioredis
 * keyPrefix), the slot is that of `prefix + key`, and the name returned goes after the prefix
 * (`prefix + sibling(…)` is the key sent), so both keys start with it.
 */
export function sibling(key: string, suffix: string, prefix = ''): string {
  const name = key + suffix;
  const s = slot(prefix + key);
  if (slot(prefix + name) === s) return name;
  const tagged = `{${tagOf(s)}}${name}`;
  if (slot(prefix + tagged) === s) return tagged;
  throw new RangeError(
    `redis-throttle: no key beside ${JSON.stringify(prefix + key)} in its hash slot (the key prefix ${JSON.stringify(prefix)} opens a hash tag it does not close)`,
  );
}
