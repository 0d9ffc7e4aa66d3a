// The Functions twin inside the package (part of `npm run build`): the repository's
// functions/throttle.lua, copied into dist/throttle.lua (for redis-cli users) and written into
// dist/esm/library.js and dist/cjs/library.js (for loadTwin and the CLI), with the package's
// version. The library is never committed twice: these copies exist only in dist/ and the tarball.
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';

const source = new URL('../../../functions/throttle.lua', import.meta.url);
if (!existsSync(source)) {
  console.error(
    `redis-throttle-js: ${source.pathname} not found: the package is built from a checkout of the repository (its functions/ and clients/node/)`,
  );
  process.exit(1);
}
const bytes = readFileSync(source);
const library = bytes.toString('utf8');
if (!Buffer.from(library, 'utf8').equals(bytes) || !library.startsWith('#!lua name=throttle')) {
  console.error('redis-throttle-js: functions/throttle.lua is not a UTF-8 Functions library named throttle');
  process.exit(1);
}
const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const values = `LIBRARY = ${JSON.stringify(library)};\n`;
const header = '// Written by scripts/twin.mjs from functions/throttle.lua and package.json.\n';
writeFileSync(
  new URL('../dist/esm/library.js', import.meta.url),
  `${header}export const VERSION = ${JSON.stringify(version)};\nexport const ${values}`,
);
writeFileSync(
  new URL('../dist/cjs/library.js', import.meta.url),
  `"use strict";\n${header}Object.defineProperty(exports, "__esModule", { value: true });\nexports.VERSION = ${JSON.stringify(version)};\nexports.${values}`,
);
writeFileSync(new URL('../dist/throttle.lua', import.meta.url), bytes);
chmodSync(new URL('../dist/esm/cli.js', import.meta.url), 0o755);
