// One side of a peer's run for `chime-bench peers`: `node peer.mjs <bullmq|graphile-worker>
// <worker|enqueue>`. Workers deliver each job as the same HTTP POST Chime's executors make
// (Idempotency-Key, X-Chime-Scheduled-At) to SINK_URL, so one sink measures every system.
// The enqueuer adds the jobs the scenario describes, due when Chime's timers would be.
//
// Settings come from the environment (chime-bench sets them):
//   SINK_URL, REDIS_URL (BullMQ), DATABASE_URL (Graphile Worker), NAMESPACE (Redis key
//   prefix or PostgreSQL schema), CONCURRENCY (jobs in flight per worker process),
//   POLL_MS (Graphile Worker's poll interval for future jobs),
//   SCENARIO=burst with COUNT and DUE_MS, or SCENARIO=periodic with RATE, SECONDS, START_MS
//   and AHEAD_S (how far ahead of its second each second's jobs are added).

import { setTimeout as sleep } from "node:timers/promises";

const [peer, role] = process.argv.slice(2);
const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};
const num = (name, fallback) => Number(env(name, fallback));

const queueName = "bench";
const sinkUrl = () => env("SINK_URL");

async function deliver(data) {
  const res = await fetch(sinkUrl(), {
    method: "POST",
    headers: {
      "idempotency-key": data.key,
      "x-chime-scheduled-at": new Date(data.due).toISOString(),
      "content-type": "application/json",
    },
    body: "{}",
  });
  // Read the body so the connection goes back to the pool.
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`sink answered ${res.status}`);
}

// The jobs of the scenario, in batches of about `size`, each batch added when it is due to be
// (periodic: AHEAD_S before its second).
async function* batches(size) {
  const scenario = env("SCENARIO");
  if (scenario === "burst") {
    const count = num("COUNT");
    const due = num("DUE_MS");
    for (let i = 0; i < count; i += size) {
      const n = Math.min(size, count - i);
      yield Array.from({ length: n }, (_, j) => ({ key: `burst-${i + j}`, due }));
    }
    return;
  }
  if (scenario === "periodic") {
    const [rate, seconds, start, ahead] = [num("RATE"), num("SECONDS"), num("START_MS"), num("AHEAD_S")];
    for (let s = 0; s < seconds; s++) {
      const addAt = start + (s - ahead) * 1000;
      const wait = addAt - Date.now();
      if (wait > 0) await sleep(wait);
      for (let i = 0; i < rate; i += size) {
        const n = Math.min(size, rate - i);
        yield Array.from({ length: n }, (_, j) => ({
          key: `every-${i + j}-${s}`,
          due: start + s * 1000 + Math.floor(((i + j) * 1000) / rate),
        }));
      }
    }
    return;
  }
  throw new Error(`unknown SCENARIO ${scenario}`);
}

function redisConnection() {
  const url = new URL(env("REDIS_URL", "redis://127.0.0.1:6379"));
  // BullMQ's workers block on Redis: they must not give up on a command.
  return { host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null };
}

const peers = {
  bullmq: {
    async worker(concurrency, stopped) {
      const { Worker } = await import("bullmq");
      const worker = new Worker(queueName, (job) => deliver(job.data), {
        connection: redisConnection(),
        prefix: env("NAMESPACE"),
        concurrency,
        removeOnComplete: { count: 0 },
        removeOnFail: { count: 0 },
      });
      await worker.waitUntilReady();
      ready();
      await stopped;
      await worker.close();
    },
    async enqueue() {
      const { Queue } = await import("bullmq");
      const queue = new Queue(queueName, { connection: redisConnection(), prefix: env("NAMESPACE") });
      let added = 0;
      for await (const batch of batches(1000)) {
        const now = Date.now();
        await queue.addBulk(
          batch.map((data) => ({
            name: "fire",
            data,
            opts: { delay: Math.max(0, data.due - now), removeOnComplete: true, removeOnFail: true },
          })),
        );
        added += batch.length;
      }
      await queue.close();
      return added;
    },
  },
  "graphile-worker": {
    async worker(concurrency, stopped) {
      const { run } = await import("graphile-worker");
      const runner = await run({
        connectionString: env("DATABASE_URL"),
        schema: env("NAMESPACE"),
        concurrency,
        // The machine's PostgreSQL takes 100 connections, shared with everything else.
        maxPoolSize: Math.min(concurrency + 2, 24),
        pollInterval: num("POLL_MS", 100),
        noHandleSignals: true,
        crontab: "",
        logger: await quietLogger(),
        taskList: { fire: (payload) => deliver(payload) },
      });
      ready();
      await stopped;
      await runner.stop();
    },
    async enqueue() {
      const { makeWorkerUtils } = await import("graphile-worker");
      const utils = await makeWorkerUtils({
        connectionString: env("DATABASE_URL"),
        schema: env("NAMESPACE"),
        logger: await quietLogger(),
      });
      let added = 0;
      for await (const batch of batches(1000)) {
        await utils.addJobs(
          batch.map((data) => ({ identifier: "fire", payload: data, runAt: new Date(data.due) })),
        );
        added += batch.length;
      }
      await utils.release();
      return added;
    },
  },
};

// Graphile Worker logs every job at info level: at thousands a second that would measure
// its logging. Warnings and errors still show.
async function quietLogger() {
  const { Logger } = await import("graphile-worker");
  return new Logger(() => (level, message) => {
    if (level === "error" || level === "warning") console.error(`[${level}] ${message}`);
  });
}

function ready() {
  process.stdout.write("ready\n");
}

// Any failure ends the process at once (a pool left open would keep it alive), so the bench
// sees it exit instead of waiting for a line.
process.on("unhandledRejection", (e) => {
  console.error(e);
  process.exit(1);
});

async function main() {
  const impl = peers[peer];
  if (!impl) throw new Error(`unknown peer ${peer}: bullmq or graphile-worker`);
  if (role === "worker") {
    const stopped = new Promise((resolve) => {
      process.once("SIGTERM", resolve);
      process.once("SIGINT", resolve);
    });
    await impl.worker(num("CONCURRENCY", 50), stopped);
  } else if (role === "enqueue") {
    const began = Date.now();
    const added = await impl.enqueue();
    process.stdout.write(JSON.stringify({ added, seconds: (Date.now() - began) / 1000 }) + "\n");
  } else if (role === "migrate") {
    // Graphile Worker's schema, made before its workers start.
    if (peer === "graphile-worker") {
      const { makeWorkerUtils } = await import("graphile-worker");
      const utils = await makeWorkerUtils({
        connectionString: env("DATABASE_URL"),
        schema: env("NAMESPACE"),
        logger: await quietLogger(),
      });
      await utils.migrate();
      await utils.release();
    }
  } else {
    throw new Error(`unknown role ${role}: worker, enqueue or migrate`);
  }
}

try {
  await main();
} catch (e) {
  console.error(e);
  process.exit(1);
}
