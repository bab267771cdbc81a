// BullMQ's add-and-wait: CLIENTS loops, each adding a job and waiting for it to finish
// (`Queue.add`, then `Job.waitUntilFinished` on the queue's events), as taskgate's load tester
// runs a lifecycle (create a task, listen until it ends). Prints a JSON report. A job not finished
// within JOB_TIMEOUT_MS is given up (an error), so that a lost one does not stop its client.
// Usage: node add-and-wait.mjs REDIS_URL CLIENTS DURATION_S [WARMUP_S] [JOB_TIMEOUT_MS]
import { Queue, QueueEvents } from 'bullmq';

const [url, clients, durationS, warmupS = '1', jobTimeoutMs = '10000'] = process.argv.slice(2);
const { hostname, port } = new URL(url);
const connection = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
const queue = new Queue('bench', { connection });
const events = new QueueEvents('bench', { connection });
await Promise.all([queue.waitUntilReady(), events.waitUntilReady()]);
// Each waiting client listens on both for its job: more listeners than Node's default warns of.
queue.setMaxListeners(Number(clients) + 16);
events.setMaxListeners(Number(clients) + 16);

const now = () => Number(process.hrtime.bigint()) / 1e6; // ms
const start = now();
const measureFrom = start + Number(warmupS) * 1000;
const end = measureFrom + Number(durationS) * 1000;
const latencies = [];
let errors = 0;
let cpuAtStart = null;

async function client() {
  while (now() < end) {
    const t0 = now();
    try {
      const job = await queue.add('noop', {});
      await job.waitUntilFinished(events, Number(jobTimeoutMs));
      if (t0 >= measureFrom) latencies.push(now() - t0);
    } catch {
      errors += 1;
    }
  }
}

setTimeout(() => { cpuAtStart = process.cpuUsage(); }, Number(warmupS) * 1000);
await Promise.all(Array.from({ length: Number(clients) }, client));
const measured = (now() - measureFrom) / 1000;
const cpu = process.cpuUsage(cpuAtStart ?? undefined);
latencies.sort((a, b) => a - b);
const at = (q) => latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] : null;
console.log(JSON.stringify({
  peer: 'bullmq add-and-wait',
  clients: Number(clients),
  duration_s: measured,
  completed: latencies.length,
  errors,
  throughput_per_s: latencies.length / measured,
  time_to_terminal_ms: { p50: at(0.5), p90: at(0.9), p99: at(0.99), p999: at(0.999), max: latencies.at(-1) ?? null },
  client_cpu_us_per_op: latencies.length ? (cpu.user + cpu.system) / latencies.length : null,
}));
// The report is out: closing may not hold the round up.
await Promise.race([Promise.all([queue.close(), events.close()]), new Promise((done) => setTimeout(done, 5000))]);
process.exit(0);
