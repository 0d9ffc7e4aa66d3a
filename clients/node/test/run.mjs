// npm test: starts the shared servers once (module, twin only, a 3-primary cluster), runs every
// test file with node's test runner (ports passed by environment), then stops the servers.
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startCluster, startServer, stopServer } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const started = [];
let code = 1;
try {
  const [mod, twin, cluster] = await Promise.all([startServer({ kind: 'module' }), startServer({ kind: 'twin' }), startCluster()]);
  started.push(mod, twin, ...cluster.nodes);
  const only = process.argv.slice(2);
  const files = (only.length ? only : readdirSync(here).filter((f) => f.endsWith('.test.mjs')).sort()).map((f) => path.join(here, path.basename(f)));
  const env = { ...process.env, RT_MODULE_PORT: String(mod.port), RT_TWIN_PORT: String(twin.port), RT_CLUSTER_PORTS: cluster.ports.join(',') };
  code = await new Promise((resolve) => {
    const c = spawn(process.execPath, ['--test', ...files], { stdio: 'inherit', env });
    c.on('exit', (c2) => resolve(c2 ?? 1));
  });
} catch (e) {
  console.error(e);
} finally {
  for (const s of started) stopServer(s);
}
process.exit(code);
