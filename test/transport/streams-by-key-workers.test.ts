import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { InsightsService } from "../../gen/referral/v1/insights_pb.js";
import type { App } from "../../src/app.js";
import { type WireProtocol, wireProtocols } from "../helpers/callers.js";
import { type SpawnedService, spawnService } from "../helpers/cluster.js";
import { closeGrpcClient, type Json, keys, rest, type TestServer } from "../helpers/server.js";
import { callStream, keepStreamOpen, type OpenStream } from "../helpers/streams.js";
import { eventually, within } from "../helpers/wait.js";

/**
 * The streams a key holds open, on the default configuration's cluster
 * (two workers): STREAMS_PER_KEY is counted for the whole service by the
 * primary, a worker that dies gives its streams' slots back, and a key
 * revoked through one worker ends its streams on every worker at once
 * (the poll is an hour here, so only the word between the workers can end
 * them). A process alone is in streams-by-key.test.ts.
 */

const watch = InsightsService.method.watchCampaignStats;
const limit = 4;
/** Protocols over HTTP/1.1, a connection per stream: the cluster shares connections out among the workers. */
const spread: readonly WireProtocol[] = ["rest", "connect", "grpc-web", "connect-binary"];

let service: SpawnedService | undefined;
let server: TestServer;
let dataDir = "";
let applicationId = "";
let campaignId = "";

test.before(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "referrals-streams-workers-"));
  service = await spawnService({
    DATA_DIR: dataDir,
    WORKERS: "2",
    ADMIN_TOKEN: keys.admin,
    BOOTSTRAP_SECRET_KEY: keys.secret,
    BOOTSTRAP_PUBLIC_KEY: keys.public,
    LOG_LEVEL: "info",
    RATE_LIMIT_PUBLIC: "1000000/1s",
    RATE_LIMIT_SECRET: "1000000/1s",
    RATE_LIMIT_ADMIN: "1000000/1s",
    RATE_LIMIT_UNAUTHENTICATED: "1000000/1s",
    STREAMS_PER_KEY: String(limit),
    STREAM_POLL_INTERVAL: "1h",
  });
  const port = service.port;
  server = {
    get app(): App {
      throw new Error("the service runs in other processes");
    },
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    dataDir,
    stop: async () => {},
  };
  const applications = await rest(server, "GET", "/admin/applications", { key: keys.admin });
  applicationId = applications.body[0].id;
  const created = await rest(server, "POST", `/admin/applications/${applicationId}/campaigns`, {
    key: keys.admin,
    body: { name: "Watched", environment: "production", isLive: true },
  });
  campaignId = created.body.id;
});

test.after.always(async () => {
  if (server) closeGrpcClient(server);
  await service?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

async function newSecretKey(): Promise<{ key: string; id: string }> {
  const created = await rest(server, "POST", `/admin/applications/${applicationId}/api-keys`, {
    key: keys.admin,
    body: { kind: "secret" },
  });
  return { key: created.body.key, id: created.body.apiKey.id };
}

/** A watch kept open once its first message arrived; undefined when it was refused. */
async function openWatch(protocol: WireProtocol, key: string): Promise<OpenStream | undefined> {
  const stream = keepStreamOpen(server, protocol, watch, { id: campaignId }, key);
  const opened = await within(
    Promise.race([stream.received(1).then(() => true), stream.ended.then(() => false)]),
    10_000,
    `${protocol}: the first message or the refusal`,
  );
  return opened ? stream : undefined;
}

/** The request log's lines of the key's watches. */
function watchLines(keyId: string): Json[] {
  const lines: Json[] = [];
  for (const line of service?.output().split("\n") ?? []) {
    if (!line.startsWith("{")) continue;
    try {
      const entry = JSON.parse(line) as Json;
      if (entry.keyId === keyId && String(entry.rpc).endsWith("/WatchCampaignStats")) {
        lines.push(entry);
      }
    } catch {
      // A line cut by the end of the output so far.
    }
  }
  return lines;
}

/** The workers the request log says answered the key's watches with `code`. */
function workersOf(keyId: string, code: string): Set<string> {
  const lines = watchLines(keyId).filter((line) => line.msg === "call" && line.code === code);
  return new Set(lines.map((line) => String(line.worker)));
}

/** How many of the key's watches the worker with this process id holds open, by its log. */
function openOn(keyId: string, pid: number): number {
  const lines = watchLines(keyId).filter((line) => line.pid === pid);
  const opened = lines.filter((line) => line.msg === "call" && line.code === "ok").length;
  return opened - lines.filter((line) => line.msg === "stream ended").length;
}

test.serial("a key revoked through one worker ends its streams on every worker", async (t) => {
  const { key, id } = await newSecretKey();
  const open: OpenStream[] = [];
  for (const protocol of spread) {
    const stream = await openWatch(protocol, key);
    if (stream) open.push(stream);
  }
  t.is(open.length, limit);
  await eventually("the request log naming both workers", () => workersOf(id, "ok").size === 2);

  const revoked = await rest(server, "POST", `/admin/api-keys/${id}/revoke`, { key: keys.admin });
  t.is(revoked.status, 200);
  for (const [index, stream] of open.entries()) {
    t.deepEqual(
      await within(stream.ended, 10_000, `${spread[index]}: the end of a revoked key's stream`),
      { code: "unauthenticated", message: "the API key was revoked" },
    );
  }
});

test.serial(
  "STREAMS_PER_KEY holds for the whole service; a cancelled stream and a killed worker give their slots back",
  async (t) => {
    t.timeout(120_000);
    const { key, id } = await newSecretKey();
    const open: OpenStream[] = [];
    const ended = new Set<OpenStream>();
    const hold = (stream: OpenStream | undefined) => {
      if (!stream) return false;
      open.push(stream);
      void stream.ended.then(() => ended.add(stream));
      return true;
    };
    try {
      for (const protocol of spread) t.true(hold(await openWatch(protocol, key)), protocol);
      await eventually("the request log naming both workers", () => workersOf(id, "ok").size === 2);

      // Every protocol, every worker: the key holds its limit.
      for (const protocol of wireProtocols) {
        const outcome = await callStream(server, protocol, watch, { id: campaignId }, key, 1);
        t.is(outcome.error?.code, "resource_exhausted", protocol);
      }
      await eventually(
        "refusals logged by both workers",
        () => workersOf(id, "resource_exhausted").size === 2,
      );

      // A stream cancelled on one worker frees a slot another worker can take.
      (open[0] as OpenStream).stop();
      ended.add(open[0] as OpenStream);
      t.true(
        hold(await eventually("a slot given back after a cancel", () => openWatch("connect", key))),
      );

      // A worker killed: its streams' slots are given back with it.
      const victim = service?.workerPids()[0] as number;
      // The victim's streams are those its log leaves open, once every opening and end is logged.
      await eventually("every opening and the cancel logged", () => {
        const lines = watchLines(id);
        const opened = lines.filter((line) => line.msg === "call" && line.code === "ok");
        const closed = lines.filter((line) => line.msg === "stream ended");
        return opened.length === open.length && closed.length === 1;
      });
      const killed = openOn(id, victim);
      t.true(killed > 0, "the victim holds some of the key's streams");
      process.kill(victim, "SIGKILL");
      await eventually("the clients of the victim's streams told", () => ended.size === 1 + killed);
      await eventually(
        "new streams in place of the killed worker's",
        async () => {
          hold(await openWatch("rest", key));
          const alive = open.filter((stream) => !ended.has(stream));
          return alive.length === limit;
        },
        { timeoutMs: 30_000 },
      );
      const refused = await callStream(server, "rest", watch, { id: campaignId }, key, 1);
      t.is(refused.error?.code, "resource_exhausted", "at the limit again");
    } finally {
      for (const stream of open) stream.stop();
    }
  },
);
