// DEBIT through the core (`debit: true`, all(…, { debit: true })) on the module, the twin alone
// and a cluster, and the token-budgets guide's Node.js example, run as written.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { Throttle, ThrottleError } from 'redis-throttle-js';
import { root } from './harness.mjs';
import { KINDS, SLOW, closeAll, nodeRedis, ioredis, unique } from './common.mjs';

after(closeAll);

for (const kind of KINDS) {
  describe(`DEBIT on ${kind}`, () => {
    test('a debit counts past the limit; checks and takes are refused until it is repaid', async () => {
      const client = await nodeRedis(kind);
      const t = new Throttle(client, SLOW);
      const w = unique('dw');
      const window = { limit: 10, windowMs: 60_000 };
      assert.equal((await t.window(w, { ...window, quantity: 0 })).limited, false);
      const d = await t.window(w, { ...window, quantity: 25, debit: true });
      // Counted although it overdrew: more than the limit (never admissible as one take).
      assert.deepEqual([d.limited, d.limit, d.remaining, d.retryAfterMs], [true, 10, 0, -1]);
      assert.ok(d.resetAfterMs > 59_000 && d.resetAfterMs <= 60_000, `${d.resetAfterMs}`);
      assert.equal((await t.window(w, { ...window, quantity: 0 })).limited, true);
      assert.equal((await t.window(w, window)).limited, true);

      const c = unique('dc');
      const counter = { limit: 10, windowMs: 60_000 };
      const fits = await t.counter(c, { ...counter, quantity: 4, debit: true });
      assert.deepEqual([fits.limited, fits.remaining, fits.retryAfterMs], [false, 6, -1]);
      const over = await t.counter(c, { ...counter, quantity: 10, debit: true });
      assert.deepEqual([over.limited, over.remaining], [true, 0]);
      assert.equal((await t.count(c))?.count, 14);
      assert.equal((await t.counter(c, { ...counter, quantity: 0 })).limited, true);

      // A debit of 0 is a check; a negative debit is refused, nothing written.
      const g = unique('dg');
      const gcra = { maxBurst: 4, count: 5, periodMs: 5_000 };
      assert.equal((await t.throttle(g, { ...gcra, quantity: 0, debit: true })).limited, false);
      await assert.rejects(
        t.throttle(g, { ...gcra, quantity: -1, debit: true }),
        /^ThrottleError: ERR DEBIT takes a quantity of 0 or more/,
      );
      assert.equal(await t.count(g), undefined);
    });

    test('all(…, { debit: true }) charges every limiter, overdrawn or not', async () => {
      const t = new Throttle(await ioredis(kind), SLOW);
      const tag = `{${unique('da')}}`;
      const limiters = (q) => [
        { key: `${tag}:w`, algorithm: 'window', limit: 10, windowMs: 60_000, quantity: q },
        { key: `${tag}:c`, algorithm: 'counter', limit: 5, windowMs: 60_000, quantity: q },
      ];
      const first = await t.all(limiters(3), { debit: true });
      assert.equal(first.limited, false);
      const second = await t.all(limiters(3), { debit: true });
      assert.deepEqual([second.limited, second.binding], [true, 1]);
      assert.deepEqual(
        second.details.map((d) => d.remaining),
        [4, 0],
      );
      assert.equal((await t.count(`${tag}:c`))?.count, 6);
      await assert.rejects(
        t.all([{ ...limiters(1)[0], debit: true }]),
        (e) => e instanceof ThrottleError && /debits as a whole/.test(e.message),
      );
    });
  });
}

/** The ```ts block of the token-budgets guide's "From Node.js" section. */
function guideExample() {
  const page = readFileSync(path.join(root, 'docs/src/guides/token-budgets.md'), 'utf8');
  const section = page.split(/^## From Node\.js$/m)[1]?.split(/^## /m)[0];
  const code = section?.match(/```ts\n([\s\S]*?)```/)?.[1];
  assert.ok(code, 'docs/src/guides/token-budgets.md has a ```ts block under "## From Node.js"');
  return code;
}

test("the token-budgets guide's Node.js example runs as written: a check against an estimate, then the real count", async () => {
  const client = await nodeRedis('module');
  const user = unique('llm');
  // The names the guide's prose gives the example: a connected client, a user, a model call.
  const callModel = async (prompt) => ({ text: `re: ${prompt}`, usage: { total_tokens: 150_000 } });
  // TypeScript to JavaScript with the cell's own compiler (types erased, nothing else changed).
  const { default: ts } = await import('typescript');
  const body = ts.transpileModule(guideExample().replace(/^import .*$/gm, ''), {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
  }).outputText;
  const run = new Function(
    'Throttle',
    'redis',
    'user',
    'callModel',
    `return (async () => {\n${body}\nreturn answer;\n})();`,
  );
  const answer = await run(Throttle, client, user, callModel);
  // The first request fits the budget; its real count (150,000 tokens) overdraws it.
  assert.equal((await answer('hello')).status, 200);
  const refused = await answer('again');
  assert.equal(refused.status, 429);
  // (The budget is back within its limit when the second of the debit leaves: up to 61 s.)
  assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 61_000, `${refused.retryAfterMs}`);
});
