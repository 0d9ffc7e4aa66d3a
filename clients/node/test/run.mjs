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
  // One file at a time: each drives 1,000 concurrent requests, and the files share the servers.
  const [major, minor] = process.versions.node.split('.').map(Number);
  const runner = (args) =>
    new Promise((resolve) => {
      const c = spawn(process.execPath, args, { stdio: 'inherit', env });
      c.on('exit', (c2) => resolve(c2 ?? 1));
    });
  if (major > 20 || (major === 20 && minor >= 10)) {
    code = await runner(['--test', '--test-concurrency=1', ...files]);
  } else {
    code = 0;
    for (const f of files) code = (await runner(['--test', f])) || code;
  }
} catch (e) {
  console.error(e);
} finally {
  for (const s of started) stopServer(s);
}
process.exit(code);
