// A real Fastify app limited by @fastify/rate-limit with the given store: the one the Fastify tests
// and the key-prefix tests serve.
import { after } from 'node:test';
import Fastify from 'fastify';
import rateLimit from '@fastify/rate-limit';

/** Listens on a free port (closed after the test file); its URL. `routes(app)` adds routes. */
export async function fastifyApp(store, options = {}, routes = () => {}) {
  // Idle connections closed after 1 s (72 s by default): a burst's thousand sockets do not linger.
  const app = Fastify({ keepAliveTimeout: 1000 });
  await app.register(rateLimit, { max: 5, timeWindow: 60_000, store, ...options });
  app.get('/', async () => 'ok');
  app.get('/route', { config: { rateLimit: { max: 2, timeWindow: 30_000 } } }, async () => 'ok');
  routes(app);
  const address = await app.listen({ port: 0, host: '127.0.0.1', backlog: 2048 });
  after(() => app.close());
  return address;
}
