import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { CallObserver, ProtocolName, Rpc } from "./pipeline.js";

/** Everything `GET /metrics` shows, in one registry per app (tests run several). */
export interface Metrics {
  readonly registry: Registry;
  /** Store operations, by collection and operation (the store calls it). */
  observeStore(collection: string, operation: string, seconds: number): void;
  /** A webhook delivery attempt, by outcome (the delivery workers call it). */
  countDelivery(outcome: "succeeded" | "failed" | "skipped"): void;
  /** A call refused by a rate limit, by the kind of limit. */
  countRateLimited(limit: string): void;
  /** Reports the delivery queue at each scrape: pending deliveries and the oldest one's due time. */
  watchDeliveryQueue(read: () => Promise<{ pending: number; oldestDueAt: Date | null }>): void;
  /** Reports at each scrape the deliveries this instance's workers hold and have not attempted. */
  watchDeliveriesInHand(read: () => number): void;
  /** Reports the store's disk at each scrape (embedded engine): free bytes and the database's size. */
  watchDisk(read: () => { freeBytes: number; storeBytes: number } | undefined): void;
  /** Reports the embedded writer's group commits at each scrape: commits and the writes in them, and the writes waiting. */
  watchCommits(read: () => { groups: number; writes: number }, queued: () => number): void;
}

// Buckets from 0.5 ms: most calls on the embedded store take a few milliseconds.
const latencyBuckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/**
 * Creates the registry with the process metrics and the service's own. In
 * a cluster the process metrics carry `processLabels` (which worker), so
 * the sum the primary serves keeps one series per process for them and
 * adds up the service's own.
 */
export function createMetrics(
  processLabels?: Record<string, string>,
): Metrics & { readonly calls: CallMetrics } {
  const registry = new Registry();
  collectDefaultMetrics({
    register: registry,
    ...(processLabels ? { labels: processLabels } : {}),
  });
  // A call adds one to its series' count; the counter takes the counts at
  // each scrape. prom-client's own inc() validates and hashes the labels
  // every time, which a call should not pay twice (the histogram pays once).
  const series: CallCount[] = [];
  const calls: CallMetrics = {
    total: new Counter({
      name: "rpc_calls_total",
      help: "Calls finished, by RPC, protocol and code.",
      labelNames: ["rpc", "protocol", "code"],
      registers: [registry],
      collect() {
        for (const counted of series) {
          if (counted.count > counted.reported) {
            this.inc(counted.labels, counted.count - counted.reported);
            counted.reported = counted.count;
          }
        }
      },
    }),
    duration: new Histogram({
      name: "rpc_duration_seconds",
      help: "Time from the call entering the pipeline to its outcome, by RPC, protocol and code.",
      labelNames: ["rpc", "protocol", "code"],
      buckets: latencyBuckets,
      registers: [registry],
    }),
    inFlight: 0,
    streamsOpen: 0,
    streamsEnded: new Counter({
      name: "rpc_streams_ended_total",
      help: "Server streams ended after their opening (counted in rpc_calls_total), by RPC, protocol and code: canceled when the client went away, unavailable when the service drained.",
      labelNames: ["rpc", "protocol", "code"],
      registers: [registry],
    }),
    count(labels) {
      const counted = { labels, count: 0, reported: 0 };
      series.push(counted);
      return counted;
    },
  };
  // Read at each scrape, so a call only moves a number.
  new Gauge({
    name: "rpc_in_flight",
    help: "Calls in the pipeline now.",
    registers: [registry],
    collect() {
      this.set(calls.inFlight);
    },
  });
  new Gauge({
    name: "rpc_streams_open",
    help: "Server streams opened and not yet ended (a drain ends them).",
    registers: [registry],
    collect() {
      this.set(calls.streamsOpen);
    },
  });
  const rateLimited = new Counter({
    name: "rpc_rate_limited_total",
    help: "Calls refused with RESOURCE_EXHAUSTED by a rate limit, by limit.",
    labelNames: ["limit"],
    registers: [registry],
  });
  const store = new Histogram({
    name: "store_operation_duration_seconds",
    help: "Store operations, by collection and operation.",
    labelNames: ["collection", "operation"],
    buckets: latencyBuckets,
    registers: [registry],
  });
  const deliveries = new Counter({
    name: "webhook_deliveries_total",
    help: "Webhook delivery attempts, by outcome.",
    labelNames: ["outcome"],
    registers: [registry],
  });
  type Queue = { pending: number; oldestDueAt: Date | null };
  let readQueue: (() => Promise<Queue>) | undefined;
  let queue: Promise<Queue> | undefined;
  let lastQueue: Queue = { pending: 0, oldestDueAt: null };
  // One read of the store serves both gauges of a scrape. A read the store
  // fails (a full disk, MongoDB out of reach) leaves the last values: the
  // scrape still answers every other series, when an operator needs them most.
  const queueNow = () => {
    queue ??= (readQueue?.() ?? Promise.resolve(lastQueue))
      .then(
        (read) => {
          lastQueue = read;
          return read;
        },
        () => lastQueue,
      )
      .finally(() => {
        queue = undefined;
      });
    return queue;
  };
  new Gauge({
    name: "webhook_queue_depth",
    help: "Deliveries waiting for an attempt.",
    registers: [registry],
    async collect() {
      this.set((await queueNow()).pending);
    },
  });
  new Gauge({
    name: "webhook_oldest_pending_age_seconds",
    help: "How long the most overdue pending delivery has been due (0 when none is).",
    registers: [registry],
    async collect() {
      const { oldestDueAt } = await queueNow();
      this.set(oldestDueAt ? Math.max(0, (Date.now() - oldestDueAt.getTime()) / 1000) : 0);
    },
  });
  let readInHand: (() => number) | undefined;
  new Gauge({
    name: "webhook_deliveries_in_hand",
    help: "Deliveries handed to this instance's webhook workers, not attempted yet; a new event's wait in its outbox meanwhile, not in the queue.",
    registers: [registry],
    collect() {
      this.set(readInHand?.() ?? 0);
    },
  });
  let readCommits: (() => { groups: number; writes: number }) | undefined;
  let readQueued: (() => number) | undefined;
  const commitCounter = (name: string, help: string, field: "groups" | "writes") => {
    // The store counts; the counter catches up at each scrape.
    let reported = 0;
    return new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        const now = readCommits?.()[field] ?? 0;
        if (now > reported) this.inc(now - reported);
        reported = now;
      },
    });
  };
  commitCounter(
    "store_group_commits_total",
    "Commits of the embedded store's writer, each of a group of writes (writes per commit: store_committed_writes_total over this).",
    "groups",
  );
  commitCounter(
    "store_committed_writes_total",
    "Writes the embedded store's writer committed.",
    "writes",
  );
  new Gauge({
    name: "store_write_queue",
    help: "Writes waiting for the embedded store's next commit (at WRITE_QUEUE_LIMIT, calls that would write are refused).",
    registers: [registry],
    collect() {
      this.set(readQueued?.() ?? 0);
    },
  });
  let readDisk: (() => { freeBytes: number; storeBytes: number } | undefined) | undefined;
  new Gauge({
    name: "store_disk_free_bytes",
    help: "Free bytes of DATA_DIR's file system, as the store's health last read them (embedded store).",
    registers: [registry],
    collect() {
      const disk = readDisk?.();
      if (disk) this.set(disk.freeBytes);
    },
  });
  new Gauge({
    name: "store_size_bytes",
    help: "Bytes the embedded database takes on disk: its file, write-ahead log and shared memory.",
    registers: [registry],
    collect() {
      const disk = readDisk?.();
      if (disk) this.set(disk.storeBytes);
    },
  });
  // The children of the few label sets in use are kept, so an operation
  // builds no labels object (prom-client still checks and hashes the
  // child's labels on every observation, about 0.3 µs).
  const storeChildren = new Map<string, ReturnType<typeof store.labels>>();
  return {
    registry,
    calls,
    observeStore(collection, operation, seconds) {
      const key = `${collection}/${operation}`;
      let child = storeChildren.get(key);
      if (!child) {
        child = store.labels({ collection, operation });
        storeChildren.set(key, child);
      }
      child.observe(seconds);
    },
    countDelivery: (outcome) => deliveries.inc({ outcome }),
    countRateLimited: (limit) => rateLimited.inc({ limit }),
    watchDeliveryQueue(read) {
      readQueue = read;
    },
    watchDeliveriesInHand(read) {
      readInHand = read;
    },
    watchDisk(read) {
      readDisk = read;
    },
    watchCommits(read, queued) {
      readCommits = read;
      readQueued = queued;
    },
  };
}

/** The per-call instruments. */
export interface CallMetrics {
  readonly total: Counter<"rpc" | "protocol" | "code">;
  /** A series of `total`, counted by the caller (see {@link CallCount}). */
  count(labels: CallLabels): CallCount;
  readonly duration: Histogram<"rpc" | "protocol" | "code">;
  /** Calls in the pipeline now. */
  inFlight: number;
  /** Server streams whose opening succeeded and that have not ended yet. */
  streamsOpen: number;
  /** How streams ended; a stream's call is counted once, by `total`, at its opening. */
  readonly streamsEnded: Counter<"rpc" | "protocol" | "code">;
}

/** Counts and times every call, whatever its outcome. */
export function measureCalls(calls: CallMetrics): CallObserver {
  // The instruments of each (rpc, protocol, code), made on first use and
  // found without building a key or a labels object. The count skips
  // prom-client entirely (see `CallCount`); the histogram's child still
  // checks and hashes its labels on every observation.
  const byRpc = new Map<Rpc, Map<ProtocolName, Map<string, CallInstruments>>>();
  const instrumentsOf = (rpc: Rpc, protocol: ProtocolName, code: string) => {
    let byProtocol = byRpc.get(rpc);
    if (!byProtocol) {
      byProtocol = new Map();
      byRpc.set(rpc, byProtocol);
    }
    let byCode = byProtocol.get(protocol);
    if (!byCode) {
      byCode = new Map();
      byProtocol.set(protocol, byCode);
    }
    let found = byCode.get(code);
    if (!found) {
      const labels = { rpc: rpc.name, protocol, code };
      found = { total: calls.count(labels), duration: calls.duration.labels(labels) };
      byCode.set(code, found);
    }
    return found;
  };
  return {
    enter() {
      calls.inFlight++;
    },
    leave(call, code, elapsedMs) {
      calls.inFlight--;
      if (code === "ok" && call.responseStream) calls.streamsOpen++;
      const instruments = instrumentsOf(call.rpc, call.protocol, code);
      instruments.total.count++;
      instruments.duration.observe(elapsedMs / 1000);
    },
    // Streams are few and long: prom-client's own labelled counter is cheap enough.
    streamEnded(call, code) {
      calls.streamsOpen--;
      calls.streamsEnded.inc({ rpc: call.rpc.name, protocol: call.protocol, code });
    },
  };
}

/** The labels of a call's series. */
type CallLabels = Record<"rpc" | "protocol" | "code", string>;

/** One series of `rpc_calls_total`: its labels, the calls counted, and those the counter has. */
export interface CallCount {
  readonly labels: CallLabels;
  count: number;
  reported: number;
}

interface CallInstruments {
  readonly total: CallCount;
  readonly duration: ReturnType<CallMetrics["duration"]["labels"]>;
}
