// `prepare` (npm install of this folder, npm pack, npm publish): builds dist/ unless it is
// newer than everything it is built from. A source install has no devDependencies yet: they are
// installed from the lockfile first (without scripts, so this does not run again).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = fileURLToPath(new URL('..', import.meta.url));
const cli = process.env.npm_execpath ?? '';
const npm = /npm-cli\.js$/.test(cli) ? [process.execPath, cli] : ['npm'];
const run = (args) => {
  const r = spawnSync(npm[0], [...npm.slice(1), ...args], { cwd: dir, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};

const mtime = (p) => (existsSync(p) ? statSync(p).mtimeMs : Infinity);
const files = (d) =>
  readdirSync(d, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(path.join(d, e.name)) : [path.join(d, e.name)],
  );
const inputs = [
  ...files(path.join(dir, 'src')),
  ...files(path.join(dir, 'scripts')),
  ...['package.json', 'tsconfig.json', 'tsconfig.cjs.json', '../../functions/throttle.lua'].map((f) =>
    path.join(dir, f),
  ),
];
// dist/throttle.lua is written last by the build (scripts/twin.mjs).
const built = existsSync(path.join(dir, 'dist/throttle.lua'))
  ? statSync(path.join(dir, 'dist/throttle.lua')).mtimeMs
  : -Infinity;
if (inputs.every((f) => mtime(f) <= built)) {
  console.error('redis-throttle-js: dist/ is up to date');
  process.exit(0);
}
if (!existsSync(path.join(dir, 'node_modules/typescript/package.json'))) {
  console.error(
    'redis-throttle-js: building from source: installing the build tools first (npm ci --ignore-scripts in clients/node)',
  );
  run(['ci', '--ignore-scripts', '--no-audit', '--no-fund']);
}
run(['run', 'build']);
