// BullMQ's drain, the peer of taskgate's `drain` scenario: JOBS no-op jobs added in bulk while
// no worker runs (`Queue.addBulk`, 1,000 at a time), then one Worker at CONCURRENCY whose
// processor returns at once. Jobs per second from the first job's start to the last one's
// completion, and Redis's CPU per job over that window (`INFO cpu`, user plus system). Each run
// uses a queue of its own (`drain-<pid>-<ms>`) and obliterates it afterwards. Prints a JSON report.
// Usage: node drain.mjs REDIS_URL JOBS CONCURRENCY
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

const [url, jobs, concurrency = '256'] = process.argv.slice(2);
const { hostname, port } = new URL(url);
const connection = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
const name = `drain-${process.pid}-${Date.now()}`;
const queue = new Queue(name, { connection });
await queue.waitUntilReady();
const total = Number(jobs);
for (let added = 0; added < total; added += 1000) {
  const n = Math.min(1000, total - added);
  await queue.addBulk(Array.from({ length: n }, () => ({ name: 'noop', data: {} })));
}
// A connection of its own, for INFO.
const redis = new IORedis(url);
const cpu = async () => {
  const info = await redis.info('cpu');
  const field = (f) => Number((info.match(new RegExp(`^${f}:([0-9.]+)`, 'm')) ?? [])[1] ?? 0);
  return field('used_cpu_user') + field('used_cpu_sys');
};
const now = () => Number(process.hrtime.bigint()) / 1e6; // ms
const cpuBefore = await cpu();
let first = null;
let last = null;
let completed = 0;
let failed = 0;
let finish;
const drained = new Promise((resolve) => { finish = resolve; });
const worker = new Worker(name, async () => {
  first ??= now();
  return { ok: true };
}, { connection, concurrency: Number(concurrency), autorun: false });
worker.on('completed', () => {
  completed += 1;
  if (completed + failed === total) { last = now(); finish(); }
});
worker.on('failed', () => {
  failed += 1;
  if (completed + failed === total) { last = now(); finish(); }
});
const started = now();
worker.run();
await drained;
const cpuAfter = await cpu();
const seconds = (last - (first ?? started)) / 1000;
console.log(JSON.stringify({
  peer: 'bullmq drain',
  jobs: total,
  concurrency: Number(concurrency),
  completed,
  errors: failed,
  duration_s: seconds,
  throughput_per_s: seconds > 0 ? completed / seconds : 0,
  redis_cpu_us_per_job: (cpuAfter - cpuBefore) * 1e6 / total,
}));
await worker.close();
await queue.obliterate({ force: true });
await queue.close();
redis.disconnect();
process.exit(0);
