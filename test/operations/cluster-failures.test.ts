import test from "ava";
import { customersMissing, isRunning, type SpawnedService } from "../helpers/cluster.js";
import { eventually } from "../helpers/wait.js";
import {
  identify,
  missingThroughService,
  servedBy,
  slowIdentify,
  startCluster,
  writeLoad,
} from "./cluster-service.js";
import { isRefused } from "./service.js";

/**
 * With WORKERS=2, the service outlives its workers: one killed or stuck is
 * replaced while the other serves, and SIGTERM drains them all. Each test
 * starts its own service, as each changes its processes.
 */

test.serial(
  "a worker killed under load is replaced; the service goes on and every acknowledged write is kept",
  async (t) => {
    t.timeout(120_000);
    const { port, service } = await startCluster(t);
    const [victim, survivor] = service.workerPids() as [number, number];
    const load = writeLoad(port, "killed", 6);
    try {
      await eventually("100 acknowledged writes", () => load.acknowledged.length >= 100, {
        timeoutMs: 30_000,
      });
      const killedAt = performance.now();
      process.kill(victim, "SIGKILL");
      const pids = await eventually(
        "a new worker in place of the killed one",
        () => {
          const now = service.workerPids();
          return now.length === 2 && !now.includes(victim) && now;
        },
        { timeoutMs: 30_000 },
      );
      t.true(pids.includes(survivor), "the other worker went on");
      const replaced = performance.now();
      // The new worker (the third forked) serves calls too.
      await eventually(
        "50 acknowledged writes since, some served by the new worker",
        () => {
          const since = load.acknowledged.filter((ack) => ack.at > replaced);
          if (since.length < 50) return false;
          const served = servedBy(service);
          return since.some((ack) => served.get(ack.requestId) === "3");
        },
        { timeoutMs: 30_000 },
      );
      t.true(
        load.acknowledged.some((ack) => ack.at > killedAt),
        "writes were acknowledged after the kill",
      );
      t.regex(service.output(), /a worker exited; starting another/);
    } finally {
      await load.stop();
    }
    const acknowledged = load.acknowledged.map((ack) => ack.externalUserId);
    t.log(
      `${acknowledged.length} writes acknowledged; ${load.failures.length} calls failed (the killed worker's): ${[...new Set(load.failures.map((failure) => failure.reason))].join("; ")}`,
    );
    t.deepEqual(await missingThroughService(port, acknowledged), [], "every acknowledged write");
  },
);

test.serial(
  "a stopped worker is killed after WORKER_STUCK_TIMEOUT and replaced; the other serves meanwhile",
  async (t) => {
    t.timeout(120_000);
    const { port, service } = await startCluster(t, { WORKER_STUCK_TIMEOUT: "2s" });
    const [stuck, other] = service.workerPids() as [number, number];
    // Calls on new connections go on throughout; at most the one the primary
    // handed the stopped worker hangs (until its timeout).
    const load = writeLoad(port, "stuck", 3);
    try {
      await eventually("a few acknowledged writes", () => load.acknowledged.length >= 10, {
        timeoutMs: 30_000,
      });
      process.kill(stuck, "SIGSTOP");
      const stoppedAt = performance.now();
      let pids: number[] = [];
      try {
        pids = await eventually(
          "the stopped worker killed and replaced",
          () => {
            const now = service.workerPids();
            return !isRunning(stuck) && now.length === 2 && !now.includes(stuck) && now;
          },
          { timeoutMs: 20_000, intervalMs: 50 },
        );
      } finally {
        // Harmless once it is dead (and lets it go if the test failed).
        try {
          process.kill(stuck, "SIGCONT");
        } catch {}
      }
      const goneAt = performance.now();
      t.false(isRunning(stuck), "the stopped worker is dead");
      t.true(pids.includes(other), "the other worker was left alone");
      t.regex(service.output(), /a worker stopped answering; replacing it/);
      const meanwhile = load.acknowledged.filter(
        (ack) => ack.at > stoppedAt && ack.at < goneAt,
      ).length;
      t.true(meanwhile > 0, "calls were answered while the worker was stopped");
      t.log(
        `${meanwhile} writes acknowledged in the ${Math.round(goneAt - stoppedAt)} ms the worker was stopped`,
      );
      t.log(`calls that failed: ${load.failures.map((failure) => failure.reason).join("; ")}`);
    } finally {
      await load.stop();
    }
    // Once it listens, the new worker (the third forked) is handed calls too.
    const after: Awaited<ReturnType<typeof identify>>[] = [];
    await eventually(
      "a call served by the new worker",
      async () => {
        const answer = await identify(port, `after_stuck_${after.length}`);
        after.push(answer);
        const served = servedBy(service);
        return after.some((call) => served.get(call.requestId) === "3");
      },
      { timeoutMs: 30_000 },
    );
    t.deepEqual(
      after.map((answer) => answer.status),
      Array(after.length).fill(201),
    );
    t.deepEqual(
      await missingThroughService(
        port,
        load.acknowledged.map((ack) => ack.externalUserId),
      ),
      [],
    );
  },
);

test.serial(
  "SIGTERM drains every worker: calls in flight finish, the primary exits 0, every acknowledged write is stored",
  async (t) => {
    t.timeout(120_000);
    const { port, service, dataDir } = await startCluster(t, { SHUTDOWN_GRACE: "30s" });
    const load = writeLoad(port, "drained", 4);
    const slow = Array.from({ length: 4 }, (_, index) => slowIdentify(port, `slow_${index}`));
    let exit: Awaited<ReturnType<SpawnedService["stop"]>> | undefined;
    try {
      await Promise.all(slow.map((call) => call.continued));
      await eventually("50 acknowledged writes", () => load.acknowledged.length >= 50, {
        timeoutMs: 30_000,
      });
      const workers = service.workerPids();
      const stopped = service.stop();
      // The workers close the port at the start of their drain.
      await eventually("the port to refuse connections", () => isRefused(port), {
        timeoutMs: 20_000,
      });
      t.true(workers.every(isRunning), "the workers drain their calls in flight");
      // The calls in flight get their bodies only now, and are served.
      const answers = await Promise.all(slow.map((call) => call.finish()));
      t.deepEqual(
        answers.map((answer) => answer.status),
        Array(slow.length).fill(201),
        JSON.stringify(answers.map((answer) => answer.body)),
      );
      for (const answer of answers) t.is(answer.headers.connection, "close");
      exit = await stopped;
      t.false(workers.some(isRunning), "every worker exited");
    } finally {
      await load.stop();
    }
    t.deepEqual(exit, { code: 0, signal: null }, "the primary exits 0");

    const wanted = [
      ...load.acknowledged.map((ack) => ack.externalUserId),
      ...slow.map((call) => call.externalUserId),
    ];
    t.deepEqual(
      await customersMissing(dataDir, wanted),
      [],
      `${wanted.length} acknowledged identifies`,
    );
  },
);
