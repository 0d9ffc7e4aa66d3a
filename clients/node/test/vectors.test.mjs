// The shared vectors (tests/vectors at the repository's root, read by every language's tests):
// the replies this package decodes and the twin loader's protocol, against the installed
// package's own modules. No server.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { root } from './harness.mjs';

const read = (name) => JSON.parse(readFileSync(path.join(root, 'tests', 'vectors', name), 'utf8'));
// The installed package's modules behind its exports (the decoder and the loader are not API).
const dist = path.join(
  path.dirname(createRequire(import.meta.url).resolve('redis-throttle-js/package.json')),
  'dist',
  'esm',
);
const internal = (file) => import(pathToFileURL(path.join(dist, file)).href);
const { decision } = await internal('wire.js');
const { compareVersions, findLibrary, loadTwinOn, twinLibrary, TwinDowngradeError } = await internal('twin.js');

/** A decision as the vectors state it. */
const neutral = (d) => ({
  limited: d.limited,
  limit: d.limit,
  remaining: d.remaining,
  retry_after_ms: d.retryAfterMs,
  reset_after_ms: d.resetAfterMs,
});

test('replies of five integers decode as the vectors say', () => {
  for (const v of read('replies.json').decode.filter((v) => v.what === 'five')) {
    if (v.error) assert.throws(() => decision(v.reply), undefined, JSON.stringify(v.reply));
    else assert.deepEqual(neutral(decision(v.reply)), v.decoded, JSON.stringify(v.reply));
  }
});

test('versions compare as the vectors say', () => {
  for (const v of read('twin-loader.json').versions) {
    assert.equal(compareVersions(v.a, v.b) ?? null, v.order, `${v.a} ~ ${v.b}`);
  }
});

test('FUNCTION LIST replies read as the vectors say', () => {
  for (const v of read('twin-loader.json').function_list) {
    const found = findLibrary(v.reply);
    assert.deepEqual(found === undefined ? null : { code: found.code ?? null, functions: found.functions }, v.library);
  }
});

test('the loader plans as the vectors say, one primary answering as each vector states', async () => {
  const loader = read('twin-loader.json');
  const { library, version } = await twinLibrary();
  for (const p of loader.plans) {
    const before = loader.found_versions[p.found] ?? (p.found === 'same' ? version : null);
    const code = p.same_code ? library : '#!lua name=throttle\n-- another';
    const listing =
      p.found === 'none'
        ? []
        : [
            [
              'library_name',
              'throttle',
              'functions',
              p.found === 'unversioned'
                ? [['name', 'cl_throttle']]
                : [
                    ['name', 'cl_throttle'],
                    ['name', 'cl_version'],
                  ],
              'library_code',
              code,
            ],
          ];
    const sent = [];
    const node = {
      name: 'vector:1',
      async send(args) {
        sent.push(args[0] === 'FUNCTION' && args[1] === 'LOAD' ? 'LOAD' : args.join(' '));
        if (args[0] === 'FUNCTION' && args[1] === 'LIST') return listing;
        if (args[0] === 'FCALL_RO') return sent.includes('LOAD') ? version : before;
        return 'throttle';
      },
    };
    const what = JSON.stringify(p);
    if (p.action === 'refused') {
      await assert.rejects(loadTwinOn([node], { force: p.force }), TwinDowngradeError, what);
      assert.ok(!sent.includes('LOAD'), `${what}: nothing loaded`);
    } else {
      const report = await loadTwinOn([node], { force: p.force });
      assert.equal(report.nodes[0].action, p.action, what);
      assert.equal(sent.includes('LOAD'), p.action !== 'unchanged', `${what}: loaded or not`);
    }
  }
});
