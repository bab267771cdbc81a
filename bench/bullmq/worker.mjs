// The BullMQ side's worker: a processor that returns at once, the peer of taskgate's `noop`
// tool, with as many jobs in flight as taskgate's benchmark worker (`--concurrency 256`).
// Usage: node worker.mjs REDIS_URL [CONCURRENCY]
import { Worker } from 'bullmq';

const [url, concurrency = '256'] = process.argv.slice(2);
const { hostname, port } = new URL(url);
const connection = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
const worker = new Worker('bench', async () => ({ ok: true }), { connection, concurrency: Number(concurrency) });
await worker.waitUntilReady();
console.log('ready');
const stop = async () => {
  await worker.close();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
