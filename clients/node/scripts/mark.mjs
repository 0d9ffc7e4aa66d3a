// dist/cjs holds CommonJS in a package of type "module": say so for that folder.
import { writeFileSync } from 'node:fs';
writeFileSync(new URL('../dist/cjs/package.json', import.meta.url), '{ "type": "commonjs" }\n');
