// The TypeScript of the docs compiles: every ```ts / ```js block of README.md,
// clients/node/README.md and docs/src/guides/*.md, each as its own module, checked by tsc --strict
// against this cell's host libraries' own types (and the package's, as installed). The names a
// snippet uses without defining are the few the guide's prose gives it (see PRELUDE): a connected
// node-redis client `redis` and cluster `redisCluster`, an ioredis client `ioredis`, an Express `app`, a Fastify `fastify`,
// a `user`, an Express `res` and a model call `callModel` (the token-budgets guide's).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { root } from './harness.mjs';

const PRELUDE = `import type { RedisClientType, RedisClusterType } from 'redis';
import type { Express, Response } from 'express';
import type { FastifyInstance } from 'fastify';
declare global {
  const redis: RedisClientType;
  const redisCluster: RedisClusterType;
  const ioredis: import('ioredis').default;
  const app: Express;
  const fastify: FastifyInstance;
  const user: string;
  const res: Response;
  const callModel: (prompt: string) => Promise<{ text: string; usage: { total_tokens: number } }>;
}
export {};
`;

/** The fenced blocks of `file` whose info string is ts, typescript, js or javascript: [line, text]. */
function blocks(file) {
  const out = [];
  let open;
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      const fence = line.match(/^\s*(`{3,})(.*)$/);
      if (!open) {
        if (fence) open = { fence: fence[1], info: fence[2].trim().split(/[\s,]/)[0], line: i + 1, body: [] };
      } else if (fence && fence[1].length >= open.fence.length && fence[2].trim() === '') {
        if (['ts', 'typescript', 'js', 'javascript'].includes(open.info)) out.push([open.line, open.body.join('\n')]);
        open = undefined;
      } else open.body.push(line);
    });
  return out;
}

test("the docs' TypeScript compiles under --strict with this cell's host libraries' types", () => {
  const docs = [
    path.join(root, 'README.md'),
    path.join(root, 'clients/node/README.md'),
    ...readdirSync(path.join(root, 'docs/src/guides'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => path.join(root, 'docs/src/guides', f)),
  ];
  // Beside the cell's node_modules, so the snippets import the cell's versions.
  const dir = path.join(process.cwd(), 'test', 'docs-ts');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'prelude.ts'), PRELUDE);
  const files = ['prelude.ts'];
  const origin = {};
  for (const doc of docs) {
    for (const [line, text] of blocks(doc)) {
      const name = `${path.relative(root, doc).replace(/[/.]/g, '_')}_L${line}.ts`;
      writeFileSync(path.join(dir, name), `${text}\nexport {};\n`);
      files.push(name);
      origin[name] = `${path.relative(root, doc)}:${line}`;
    }
  }
  assert.ok(files.length >= 6, `only ${files.length - 1} TypeScript blocks found`);
  const tsconfig = {
    compilerOptions: {
      strict: true,
      noEmit: true,
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      skipLibCheck: true,
      types: ['node'],
      esModuleInterop: true,
    },
    files,
  };
  writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify(tsconfig));
  const tsc = path.join(process.cwd(), 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', path.join(dir, 'tsconfig.json')], { encoding: 'utf8' });
  // Each diagnostic names the doc and line of its block.
  const report = `${r.stdout}${r.stderr}`.replace(
    /test\/docs-ts\/(\S+?\.ts)\((\d+),(\d+)\)/g,
    (_, f, l, c) => `${origin[f] ?? f} (+${l}, col ${c})`,
  );
  assert.equal(r.status, 0, `the docs' TypeScript does not compile:\n${report}`);
});
