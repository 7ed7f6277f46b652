import cluster, { type Worker } from "node:cluster";
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from "prom-client";
import { RateLimiterClusterMaster } from "rate-limiter-flexible";
import type { Config } from "../config.js";
import { rootLogger } from "../logging.js";
import { answerStoreRequest, StoreReplyBatches } from "../store/forwarded-writes.js";
import type { Store } from "../store/store.js";
import { StreamCounts } from "../transport/streams-by-key.js";
import { closeConnectionsLeftBy, heldConnectionsVisible } from "./handed-connections.js";
import {
  isWorkerMessage,
  type MetricsJson,
  type PrimaryMessage,
  type WorkerMessage,
} from "./messages.js";

/**
 * The primary of a cluster (WORKERS above 1): it holds the store's writer
 * and the background jobs (`app`, built as the writer), forks the workers
 * that serve the port, answers their writes, relays what one worker tells
 * the others, adds up their metrics, replaces a worker that dies or stops
 * answering, and drains them all before itself.
 */
export interface Primary {
  /** Resolves with the port once every worker serves it; rejects with a worker's start-up failure. */
  readonly started: Promise<number>;
  /**
   * Tells the workers the service is ready (what they serve is committed:
   * the demo keys); resolves once every worker serves, so the banner and
   * `/readyz` never come before a worker that would refuse a valid key.
   * Workers started later are told as they link.
   */
  ready(): Promise<void>;
  /** Drains the workers (each finishes its calls), then the writer. */
  stop(): Promise<void>;
}

/** How often the primary checks each worker's event loop. */
const heartbeatMs = 1_000;
/** Restart delays after a worker dies: doubling from the first, up to the last. */
const firstRestartMs = 250;
const longestRestartMs = 30_000;
/** A worker that lived this long died of something new: its restarts start over. */
const stableAfterMs = 60_000;
/**
 * How long a connection the primary held as a worker died may stay held
 * before it is taken for that worker's (a live worker takes one in
 * milliseconds; see `closeConnectionsLeftBy`): a client waits at most this
 * long on a dead worker. A live worker whose loop is blocked longer than
 * this as another dies may lose a connection too: a failed call, never a
 * hang.
 */
const handOverGraceMs = 1_000;
/** How long the primary waits for a worker's metrics. */
const metricsTimeoutMs = 2_000;

/** What the primary runs beside its workers: the service built as the writer (`buildApp`'s `App`). */
export interface WriterApp {
  readonly store: Store;
  writesRefused(): string | undefined;
  onWritesRefused(listener: (reason: string | undefined) => void): void;
  metricsJson(): Promise<MetricObjectWithValues<MetricValue<string>>[]>;
  noteStoreFailure(error: unknown): void;
  notifyWebhooks(): void;
  forgetKey(hash: string): void;
  close(): Promise<void>;
}

export function startPrimary(config: Config, app: WriterApp, env: NodeJS.ProcessEnv): Primary {
  const logger = rootLogger(config).child({ worker: "primary" });
  if ("dataDir" in config.store) {
    // The rate limits' counters, one budget per key for every worker.
    new RateLimiterClusterMaster();
  }
  const store = app.store;
  // On the embedded engine the primary is the writer; on MongoDB each worker writes itself.
  const writer = store.engine === "embedded" && store.role === "writer" ? store : undefined;
  let stopping = false;
  // The store may refuse writes from the start (a disk under its floor).
  let writesRefused = app.writesRefused();
  let ready = false;
  /** The workers yet to say they serve, and who waits for them. */
  const notServing = new Set<number>();
  let allServing: (() => void) | undefined;
  const served = (workerId: number) => {
    notServing.delete(workerId);
    if (notServing.size === 0) allServing?.();
  };
  /** When each serving worker was sent the ping it has not answered yet. */
  const pingedAt = new Map<number, number>();
  const startedAt = new Map<number, number>();
  let failures = 0;
  let nextMetricsId = 1;
  const metricsWaiting = new Map<number, (metrics: MetricsJson) => void>();
  let resolveStarted: (port: number) => void = () => {};
  let rejectStarted: (error: Error) => void = () => {};
  const started = new Promise<number>((resolve, reject) => {
    resolveStarted = resolve;
    rejectStarted = reject;
  });
  const listening = new Set<number>();
  /**
   * PORT=0 asks for any free port. Workers that listen with the same PORT
   * share the one socket the primary binds for them (node:cluster), so the
   * first workers, all forked with 0, serve the same port, and so does a
   * replacement forked with 0 while any of them listens. The port is not
   * chosen ahead with a probe: another process could take it between the
   * probe's close and the workers' bind (seen in a parallel test run). Once
   * every worker has exited, the shared socket is gone and 0 would move the
   * service: the next workers bind the port served before by its number.
   */
  let workerPort = config.port;
  /** The port the service serves: known once the first worker listens. */
  let servedPort: number | undefined;
  /** Until every worker first serves the port; a failure meanwhile fails the start. */
  let phase: "starting" | "serving" | "failed" = "starting";

  const live = () =>
    Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
  const send = (worker: Worker, message: PrimaryMessage) => {
    if (!worker.isConnected()) return;
    // A worker that exits between the check and the send: its channel is closed.
    worker.send(message, (error: Error | null) => void error);
  };
  const storeReplies = new StoreReplyBatches<Worker>(send);
  const broadcast = (message: PrimaryMessage, except?: Worker) => {
    for (const worker of live()) if (worker !== except) send(worker, message);
  };

  app.onWritesRefused((reason) => {
    writesRefused = reason;
    broadcast({ type: "writes-refused", reason });
  });
  writer?.statsChanged((scopes) => broadcast({ type: "stats-changed", scopes: [...scopes] }));
  // Every worker's open streams per key: STREAMS_PER_KEY holds for the whole
  // service, and a worker that dies gives its slots back.
  const streamCounts = new StreamCounts(config.streamsPerKey);
  cluster.on("exit", (worker) => streamCounts.dropHolder(worker.id));

  const metricsOf = (worker: Worker): Promise<MetricsJson> =>
    new Promise((resolve) => {
      const id = nextMetricsId++;
      const timer = setTimeout(() => {
        metricsWaiting.delete(id);
        resolve([]);
      }, metricsTimeoutMs);
      metricsWaiting.set(id, (metrics) => {
        clearTimeout(timer);
        resolve(metrics);
      });
      send(worker, { type: "metrics-json", id });
    });
  const clusterMetrics = async (): Promise<string> => {
    // A process whose metrics cannot be read leaves the others' to show.
    const own = app.metricsJson().catch((error: unknown) => {
      logger.error({ err: error }, "could not read the primary's metrics");
      return [];
    });
    const all = await Promise.all([own, ...live().map(metricsOf)]);
    return AggregatorRegistry.aggregate(all).metrics();
  };

  const handle = (worker: Worker, message: WorkerMessage) => {
    switch (message.type) {
      case "store":
        if (!writer) return;
        for (const request of message.requests) {
          void answerStoreRequest(request, (command) => writer.runCommand(command)).then(
            (reply) => {
              if (reply.error) app.noteStoreFailure(Object.assign(new Error(), reply.error));
              storeReplies.add(worker, reply);
            },
          );
        }
        return;
      case "webhooks":
        app.notifyWebhooks();
        return;
      case "key-revoked":
        app.forgetKey(message.hash);
        broadcast({ type: "key-revoked", hash: message.hash }, worker);
        return;
      case "stream-slot":
        send(worker, {
          type: "stream-slot-reply",
          id: message.id,
          granted: streamCounts.take(worker.id, message.keyId),
        });
        return;
      case "stream-slot-freed":
        streamCounts.free(worker.id, message.keyId);
        return;
      case "metrics":
        void clusterMetrics().then(
          (text) => send(worker, { type: "metrics-reply", id: message.id, text }),
          (error: unknown) => {
            logger.error({ err: error }, "could not add up the metrics");
            send(worker, { type: "metrics-reply", id: message.id, text: "" });
          },
        );
        return;
      case "metrics-json-reply":
        metricsWaiting.get(message.id)?.(message.metrics);
        metricsWaiting.delete(message.id);
        return;
      case "pong":
        pingedAt.delete(worker.id);
        return;
      case "linked":
        if (writesRefused !== undefined)
          send(worker, { type: "writes-refused", reason: writesRefused });
        if (ready) send(worker, { type: "ready" });
        return;
      case "ready":
        served(worker.id);
        return;
      case "listening":
        servedPort ??= message.port;
        if (message.port !== servedPort) {
          // Forked with 0 as the last workers serving the port exited.
          logger.error(
            { replacedWorker: worker.id, port: message.port, servedPort },
            "a worker listened on another port; replacing it",
          );
          worker.process.kill("SIGTERM");
          return;
        }
        listening.add(worker.id);
        if (phase === "starting" && listening.size >= config.workers) {
          phase = "serving";
          resolveStarted(message.port);
        }
        return;
      case "start-failed":
        if (phase === "starting") {
          phase = "failed";
          rejectStarted(new Error(message.message));
        } else if (phase === "serving") {
          logger.error({ reason: message.message }, "a worker could not start");
        }
        return;
    }
  };

  if (!heldConnectionsVisible()) {
    logger.warn(
      "this Node hides the primary's handles: a connection handed to a worker as it dies may hang (nodejs/node#21746)",
    );
  }
  const fork = () => {
    if (workerPort === 0 && servedPort !== undefined && listening.size === 0) {
      workerPort = servedPort;
    }
    const worker = cluster.fork({ ...env, PORT: String(workerPort) });
    startedAt.set(worker.id, Date.now());
    worker.on("message", (message: unknown) => {
      if (isWorkerMessage(message)) handle(worker, message);
    });
    worker.on("exit", (code, signal) => {
      closeConnectionsLeftBy(handOverGraceMs, (count) =>
        logger.warn(
          { exitedWorker: worker.id, closedConnections: count },
          "closed the connections the exited worker never took",
        ),
      );
      pingedAt.delete(worker.id);
      listening.delete(worker.id);
      served(worker.id);
      if (stopping || phase === "failed") return;
      if (phase === "starting") {
        phase = "failed";
        rejectStarted(new Error(`a worker exited while starting (${signal ?? `code ${code}`})`));
        return;
      }
      const lived = Date.now() - (startedAt.get(worker.id) ?? 0);
      failures = lived >= stableAfterMs ? 1 : failures + 1;
      const delayMs = Math.min(longestRestartMs, firstRestartMs * 2 ** (failures - 1));
      logger.error(
        { exitedWorker: worker.id, code, signal, restartInMs: delayMs },
        "a worker exited; starting another",
      );
      setTimeout(() => {
        if (!stopping) fork();
      }, delayMs).unref();
    });
  };

  // A worker whose event loop stopped answering (an endless loop, a deadlock)
  // serves nobody: it is killed, and replaced like one that died. It is
  // watched once it serves the port: until then it loads its code and builds
  // its app, which holds its event loop for seconds at a time on a busy
  // machine (after it first answered a ping too). Stuck means a ping left
  // unanswered past the timeout, not a time since the last answer, which
  // would count the heartbeat's own period and the primary's lateness and
  // take a worker answering at once for a stuck one.
  const heartbeat = setInterval(() => {
    const now = Date.now();
    for (const worker of live()) {
      if (!listening.has(worker.id)) continue;
      const since = pingedAt.get(worker.id);
      if (since === undefined) {
        pingedAt.set(worker.id, now);
        send(worker, { type: "ping" });
      } else if (now - since > config.workerStuckTimeoutMs) {
        // After the answers already waiting on the channel are read: a primary
        // that was busy itself reads them only now.
        setImmediate(() => {
          if (stopping || pingedAt.get(worker.id) !== since || worker.isDead()) return;
          logger.error(
            { stuckWorker: worker.id, unansweredMs: Date.now() - since },
            "a worker stopped answering; replacing it",
          );
          worker.process.kill("SIGKILL");
        });
      }
    }
  }, heartbeatMs);
  heartbeat.unref();

  for (let index = 0; index < config.workers; index++) fork();

  let stopped: Promise<void> | undefined;
  return {
    started,
    ready() {
      ready = true;
      const waiting = live().filter((worker) => !worker.isDead());
      for (const worker of waiting) notServing.add(worker.id);
      const all = new Promise<void>((resolve) => {
        allServing = resolve;
      });
      if (notServing.size === 0) allServing?.();
      broadcast({ type: "ready" });
      return all;
    },
    stop() {
      stopped ??= (async () => {
        stopping = true;
        clearInterval(heartbeat);
        const workers = live();
        const exited = workers.map(
          (worker) =>
            new Promise<void>((resolve) => {
              if (worker.isDead()) return resolve();
              worker.once("exit", () => resolve());
            }),
        );
        for (const worker of workers) {
          // A worker still starting serves nothing and may not hear a drain
          // yet: a signal ends it (or drains it, once it listens for one).
          if (listening.has(worker.id)) send(worker, { type: "drain" });
          else worker.process.kill("SIGTERM");
        }
        // Each worker drains within SHUTDOWN_GRACE; one that does not is ended.
        const deadline = setTimeout(() => {
          for (const worker of live()) worker.process.kill("SIGKILL");
        }, config.connections.shutdownGraceMs + 5_000);
        await Promise.all(exited);
        clearTimeout(deadline);
        // Every write a worker sent is answered: the writer drains last.
        await app.close();
      })();
      return stopped;
    },
  };
}
