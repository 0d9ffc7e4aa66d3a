// The assembled Functions twin (functions/throttle.lua) and this package's version. Placeholders
// here: `npm run build` (scripts/twin.mjs) writes the real values into dist/esm/library.js and
// dist/cjs/library.js, from the repository's functions/throttle.lua and package.json, so git
// holds one copy of the library. Imported lazily: only a server with the twin (or the loader)
// pays for parsing it.
export const LIBRARY: string = '';
export const VERSION: string = '';
