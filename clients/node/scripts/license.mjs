// `prepack` (npm pack, npm publish): the repository's LICENSE, copied beside package.json so the
// tarball carries it (npm packs a LICENSE file whatever `files` says). Never a second copy in git
// (.gitignore): the root LICENSE is the one.
import { copyFileSync, existsSync } from 'node:fs';

const source = new URL('../../../LICENSE', import.meta.url);
if (!existsSync(source)) {
  console.error(
    `redis-throttle-js: ${source.pathname} not found: the package is packed from a checkout of the repository (its LICENSE and clients/node/)`,
  );
  process.exit(1);
}
copyFileSync(source, new URL('../LICENSE', import.meta.url));
