import { mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { DescMethod } from "@bufbuild/protobuf";
import { loadConfig, type RateLimitConfig } from "../../src/config.js";
import type { LimitName } from "../../src/transport/rate-limit.js";
import { call, type WireProtocol } from "../helpers/callers.js";
import { waitGone } from "../helpers/cluster.js";
import { checkRestResponse } from "../helpers/openapi.js";
import { reservedPort } from "../helpers/ports.js";
import { type Receiver, startReceiver } from "../helpers/receiver.js";
import {
  keys as bootstrapKeys,
  closeGrpcClient,
  type Json,
  rest,
  startServer,
  type TestServer,
} from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * The service the invariant checker drives, as `npm start` runs it on two
 * cores (a primary and two workers, the default rate limits), and every
 * call the checker makes to it. Each call is judged as it is answered: a
 * valid credential refused (401, 403, 429) below its rate limit, a 5xx, a
 * revoked key served, are violations, whatever the step was checking.
 */

/** The rate limits of a default configuration (src/config.ts), not the suites' unlimited ones. */
export const defaultRateLimits: RateLimitConfig = loadConfig({}).rateLimits;

/**
 * Limits that refuse nothing, as the other suites run with: to look for
 * the other invariants' violations while a rate-limit one is open.
 */
export const unlimitedRateLimits: RateLimitConfig = loadConfig({
  RATE_LIMIT_PUBLIC: "1000000/1s",
  RATE_LIMIT_SECRET: "1000000/1s",
  RATE_LIMIT_ADMIN: "1000000/1s",
  RATE_LIMIT_UNAUTHENTICATED: "1000000/1s",
}).rateLimits;

/** The token the service serves `/metrics` to. */
const metricsToken = "metrics-token-for-the-invariant-checker";

/** A credential the checker calls with, and whether the service must take it. */
export interface Credential {
  /** Names it in a violation ("run 3 secret key"). */
  readonly label: string;
  readonly kind: "secret" | "public" | "admin" | "metrics";
  readonly token: string;
  /** False once revoked, and for made-up keys: every call with it must be 401. */
  valid: boolean;
}

/** An invariant the service broke: which one, and what it did instead. */
export class InvariantViolation extends Error {
  constructor(
    readonly invariant: string,
    detail: string,
    /** Where it was broken, when one invariant can be broken in places of different causes. */
    readonly kind?: string,
  ) {
    super(`${invariant}${kind ? ` (${kind})` : ""}: ${detail}`);
    this.name = "InvariantViolation";
  }
}

/**
 * What a call answered, the same on every protocol: the REST JSON of the
 * result, or the error's code as REST spells it. `text` is the answer as
 * received (for the search of erased data); `status` the HTTP status on
 * REST, 0 on the other protocols.
 */
export type Outcome = {
  readonly status: number;
  readonly text: string;
  readonly headers?: Headers;
} & ({ readonly ok: true; readonly body: Json } | { readonly ok: false; readonly code: string });

/** REST's words for the error of a status without a JSON body. */
const codeOfStatus: Record<number, string> = { 401: "unauthenticated", 429: "resource_exhausted" };

/**
 * Counts the checker's own calls per limit and caller in a sliding window,
 * and holds a call back while it would take more than half a limit: the
 * service may leave a slice per worker unused at the end of its fixed
 * windows (docs/operations.md), so a refusal under half is never one the
 * documentation allows.
 */
class RateBudget {
  private readonly sent = new Map<string, number[]>();

  constructor(private readonly limits: RateLimitConfig) {}

  /** Counts a call the service counted against `limit` though the checker did not expect it to. */
  charge(limit: LimitName, caller: string): void {
    const key = `${limit}|${caller}`;
    this.sent.set(key, [...(this.sent.get(key) ?? []), performance.now()]);
  }

  /** Takes room for one call if there is some now. */
  tryReserve(limit: LimitName, caller: string): boolean {
    const rate = this.limits[limit];
    if (!rate) return true;
    const now = performance.now();
    const key = `${limit}|${caller}`;
    const recent = (this.sent.get(key) ?? []).filter((at) => at > now - rate.windowSeconds * 1000);
    this.sent.set(key, recent);
    if (recent.length + 1 > Math.floor(rate.calls / 2)) return false;
    recent.push(now);
    return true;
  }

  /** Resolves once `calls` more calls fit the half of `limit` for `caller`. */
  async reserve(limit: LimitName, caller: string, calls = 1): Promise<void> {
    const rate = this.limits[limit];
    if (!rate) return;
    const capacity = Math.floor(rate.calls / 2);
    if (calls > capacity) throw new Error(`${calls} calls never fit half the ${limit} limit`);
    const windowMs = rate.windowSeconds * 1000;
    const key = `${limit}|${caller}`;
    for (;;) {
      const now = performance.now();
      const recent = (this.sent.get(key) ?? []).filter((at) => at > now - windowMs);
      this.sent.set(key, recent);
      if (recent.length + calls <= capacity) {
        for (let index = 0; index < calls; index++) recent.push(now);
        return;
      }
      const oldest = recent[recent.length + calls - capacity - 1] ?? now;
      await sleep(Math.max(1, oldest + windowMs - now));
    }
  }
}

/**
 * How long a call may go unanswered: past it, it counts as never answered
 * (a liveness bound, far above any answer's time, not a measure of speed).
 */
const answerWithinMs = 30_000;

/** `answer`, or a rejection once it has gone unanswered for {@link answerWithinMs}. */
function answeredWithin<T>(answer: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no answer in ${answerWithinMs / 1000} s`)),
      answerWithinMs,
    );
  });
  return Promise.race([answer, late]).finally(() => clearTimeout(timer));
}

/** How long the primary holds a connection handed to a worker that died before closing it. */
const handOverGraceMs = 1_000;

/** How many fresh connections each credential is tried on, per round, after a start. */
const probesPerRound = 2;

/** The service under test, its data directory kept across kills and restarts. */
export class System {
  /** The demo application's keys, provisioned on the first start, the admin and metrics tokens. */
  readonly bootstrap: readonly Credential[] = [
    { label: "bootstrap secret key", kind: "secret", token: bootstrapKeys.secret, valid: true },
    { label: "bootstrap public key", kind: "public", token: bootstrapKeys.public, valid: true },
    { label: "admin token", kind: "admin", token: bootstrapKeys.admin, valid: true },
    { label: "metrics token", kind: "metrics", token: metricsToken, valid: true },
  ];
  private readonly budget: RateBudget;
  private readonly violations: InvariantViolation[] = [];
  /** While a kill is under way, calls that get no answer are expected. */
  private killing = false;
  /** When a worker last died (`performance.now()`): see `unanswered`. */
  private workerDiedAt = Number.NEGATIVE_INFINITY;
  /** Killed and not started again (a run failed in between). */
  private down = false;
  /** How many times the service was started: a watch of a worker's replacement ends with its start. */
  private starts = 0;
  /** Whether a worker was killed since the last start. */
  private workerKilled = false;
  /** The watch of the replacement of the workers killed, if any. */
  private replacing: Promise<void> = Promise.resolve();
  /** When the service (or a new worker) last answered ready, for the text of a refusal. */
  private readyAt = 0;
  /** Killed workers whose replacements do not serve yet. */
  private replacementsPending = 0;
  /**
   * Every worker killed before a replacement served: the port is closed
   * until one listens (docs/scaling.md, Faults), so a refused connection is
   * expected until the service answers `/readyz` again.
   */
  private portClosed = false;

  private constructor(
    private server: TestServer,
    private readonly dataDir: string,
    readonly receiver: Receiver,
    private readonly rateLimits: RateLimitConfig,
    /** Where progress goes, a line at a time. */
    readonly log: (line: string) => void,
  ) {
    this.budget = new RateBudget(rateLimits);
  }

  /**
   * Starts the service on a new data directory, as a first start does (it
   * provisions the demo keys), and checks the keys are served from the
   * moment `/readyz` answers 200.
   */
  static async start(rateLimits: RateLimitConfig, log: (line: string) => void): Promise<System> {
    const dataDir = mkdtempSync(join(tmpdir(), "referrals-invariants-"));
    const receiver = await startReceiver();
    const system = new System(
      undefined as unknown as TestServer,
      dataDir,
      receiver,
      rateLimits,
      log,
    );
    system.server = await system.startReady([]);
    return system;
  }

  /** The running service, for the helpers that take a server. */
  get target(): TestServer {
    return this.server;
  }

  /**
   * A call over any protocol with a request written as REST JSON (see
   * `call` in test/helpers/callers.ts), judged as it is answered.
   */
  async call(
    credential: Credential,
    protocol: WireProtocol,
    method: DescMethod,
    request: Record<string, unknown>,
  ): Promise<Outcome> {
    const what = `${method.parent.name}.${method.name} over ${protocol}`;
    await this.reserve(credential);
    let outcome: Outcome;
    try {
      const answered = await answeredWithin(
        call(this.server, protocol, method, request, credential.token),
      );
      outcome = answered.ok
        ? { ok: true, status: 0, body: answered.body, text: JSON.stringify(answered.body) }
        : {
            ok: false,
            status: 0,
            code: answered.code,
            text: JSON.stringify({ code: answered.code, message: answered.message }),
          };
    } catch (error) {
      return this.unanswered(what, error);
    }
    this.judge(credential, what, outcome);
    return outcome;
  }

  /**
   * A REST call (JSON), judged as it is answered. Admin calls come from
   * one of several loopback addresses (`from`, or the one with the most
   * room under its admin limit), as several operators' machines would.
   */
  async rest(
    credential: Credential,
    method: string,
    path: string,
    options: { body?: unknown; headers?: Record<string, string>; from?: string } = {},
  ): Promise<Outcome> {
    const what = `${method} ${path.split("?")[0]}`;
    if (credential.kind === "admin") return this.adminRest(credential, what, method, path, options);
    await this.reserve(credential);
    let outcome: Outcome;
    try {
      const answered = await answeredWithin(
        rest(this.server, method, path, { key: credential.token, ...options }),
      );
      const text =
        typeof answered.body === "string" ? answered.body : JSON.stringify(answered.body);
      outcome =
        answered.status < 300
          ? {
              ok: true,
              status: answered.status,
              body: answered.body,
              text,
              headers: answered.headers,
            }
          : {
              ok: false,
              status: answered.status,
              code: answered.body?.code ?? codeOfStatus[answered.status] ?? String(answered.status),
              text,
              headers: answered.headers,
            };
    } catch (error) {
      return this.unanswered(what, error);
    }
    this.judge(credential, what, outcome);
    return outcome;
  }

  private async adminRest(
    credential: Credential,
    what: string,
    method: string,
    path: string,
    options: { body?: unknown; from?: string },
  ): Promise<Outcome> {
    const from =
      options.from ?? adminAddresses.find((address) => this.budget.tryReserve("admin", address));
    const address = from ?? adminAddresses[0] ?? "127.0.0.1";
    if (from === undefined || options.from !== undefined)
      await this.budget.reserve("admin", address);
    let outcome: Outcome;
    try {
      const answered = await restFrom(
        address,
        this.server.port,
        method,
        path,
        credential.token,
        options.body,
      );
      checkRestResponse({ method, path, ...answered });
      const body = answered.body === "" ? undefined : (JSON.parse(answered.body) as Json);
      outcome =
        answered.status < 300
          ? { ok: true, status: answered.status, body, text: answered.body }
          : {
              ok: false,
              status: answered.status,
              code: body?.code ?? codeOfStatus[answered.status] ?? String(answered.status),
              text: answered.body,
            };
    } catch (error) {
      return this.unanswered(what, error);
    }
    this.judge(credential, `${what} from ${address}`, outcome);
    return outcome;
  }

  /** A GET of a REST route that is not JSON (the CSV export, `/metrics`), judged likewise. */
  async fetchText(credential: Credential, path: string): Promise<Outcome> {
    const what = `GET ${path.split("?")[0]}`;
    await this.reserve(credential);
    let outcome: Outcome;
    try {
      const response = await fetch(`${this.server.baseUrl}${path}`, {
        headers: { authorization: credential.token },
        signal: AbortSignal.timeout(answerWithinMs),
      });
      const text = await response.text();
      outcome = response.ok
        ? { ok: true, status: response.status, body: text, text, headers: response.headers }
        : {
            ok: false,
            status: response.status,
            code: codeOfStatus[response.status] ?? String(response.status),
            text,
          };
    } catch (error) {
      return this.unanswered(what, error);
    }
    this.judge(credential, what, outcome);
    return outcome;
  }

  /**
   * Opens a REST stream of Server-Sent Events and resolves with its first
   * `data:` event, parsed; the stream is left open for the caller, who
   * reads on with `next` and closes it with `close`.
   */
  async openEvents(credential: Credential, path: string): Promise<EventStream> {
    const what = `GET ${path.split("?")[0]}`;
    let aborted = new AbortController();
    let response: Response | undefined;
    // A connection closed unanswered as a worker died is opened again, as a client would.
    for (let attempt = 1; !response; attempt++) {
      await this.reserve(credential);
      aborted = new AbortController();
      try {
        response = await answeredWithin(
          fetch(`${this.server.baseUrl}${path}`, {
            headers: { authorization: credential.token },
            signal: aborted.signal,
          }),
        );
      } catch (error) {
        aborted.abort();
        this.unanswered(what, error);
        this.throwViolations();
        if (attempt >= 3) throw error;
        await sleep(200);
      }
    }
    if (!response.ok || !response.body) {
      const text = await response.text();
      this.judge(credential, what, {
        ok: false,
        status: response.status,
        code: codeOfStatus[response.status] ?? String(response.status),
        text,
      });
      throw new InvariantViolation(
        "a valid call is answered",
        `${what}: ${response.status} ${text}`,
      );
    }
    return new EventStream(response.body, aborted);
  }

  /** Throws the first violation recorded since the last call, if any. */
  throwViolations(): void {
    const [first, ...more] = this.violations.splice(0);
    if (!first) return;
    if (more.length > 0) first.message += ` (and ${more.length} more: ${more[0]?.message})`;
    throw first;
  }

  /** Records a violation found outside a call (a check of what was read). */
  violated(invariant: string, detail: string, kind?: string): void {
    this.violations.push(new InvariantViolation(invariant, detail, kind));
  }

  /** kill -9 of the primary: its workers end with it. Nothing is restarted. */
  async killPrimary(): Promise<void> {
    // A worker's replacement is not watched across the primary's death.
    this.starts += 1;
    await this.replacing;
    const cluster = this.clusterOf();
    const workers = cluster.workerPids();
    this.killing = true;
    this.down = true;
    await cluster.kill();
    await waitGone(workers);
    closeGrpcClient(this.server);
  }

  /**
   * Starts the service again on the same data directory and checks that
   * every valid credential (`credentials` and the bootstrap ones) is served
   * from the moment `/readyz` answers 200.
   */
  async restart(credentials: readonly Credential[]): Promise<void> {
    this.server = await this.startReady(credentials);
    this.killing = false;
    this.down = false;
  }

  /**
   * kill -9 of the primary and a start on the same data directory: what a
   * failed run left behind (a broken process, rate-limit windows, counted
   * failures) is gone; what it wrote stays. What the start itself breaks
   * is recorded, as after any start.
   */
  async restartClean(): Promise<void> {
    this.violations.splice(0);
    if (!this.down) await this.killPrimary();
    await this.restart([]);
  }

  /**
   * Before a run: starts the service again if the last run killed it or
   * one of its workers, and forgets that run's violations.
   */
  async recover(): Promise<void> {
    await this.replacing;
    // Each run starts with both workers serving (a new worker serves some
    // seconds after its process starts, and nothing says when): a worker
    // killed in one run is not the next one's.
    if (this.workerKilled && !this.down) await this.killPrimary();
    if (this.down) await this.restart([]);
    this.workerKilled = false;
    this.killing = false;
    this.violations.splice(0);
  }

  /**
   * kill -9 of one worker (`which` picks it); resolves once it is gone. The
   * primary starts another, after a delay that doubles with each worker
   * that died young, up to 30 s (its crash-loop backoff), so that is
   * watched in the background while the run goes on with the other
   * worker: once the new process is there, every valid credential is
   * tried on new connections (which it takes once it listens) for 1.5 s.
   */
  async killWorker(which: number, credentials: readonly Credential[]): Promise<void> {
    const cluster = this.clusterOf();
    const workers = cluster.workerPids();
    const victim = workers[which % workers.length];
    if (victim === undefined) throw new Error("the service has no worker to kill");
    this.workerKilled = true;
    // The others still serve unless each is a replacement not listening yet.
    if (this.replacementsPending >= workers.length - 1) this.portClosed = true;
    this.replacementsPending += 1;
    process.kill(victim, "SIGKILL");
    await waitGone([victim]);
    this.workerDiedAt = performance.now();
    const started = this.starts;
    const { port } = this.server;
    const replaced = async () => {
      await eventually(
        "a new worker in place of the killed one",
        () => {
          if (this.starts !== started) return true;
          const now = cluster.workerPids();
          return now.length === workers.length && !now.includes(victim);
        },
        { timeoutMs: 75_000, intervalMs: 20 },
      );
      if (this.starts !== started) return;
      // Ready once a worker answers on a new connection: at once while
      // another serves, after the replacement loads if none was left.
      await eventually(
        "the service answering /readyz",
        async () =>
          this.starts !== started ||
          (await rawGet(port, "/readyz").catch(() => ({ status: 0 }))).status === 200,
        { timeoutMs: 75_000, intervalMs: 20 },
      );
      if (this.starts !== started) return;
      this.portClosed = false;
      this.readyAt = performance.now();
      await this.probeCredentials(port, credentials, 1_500);
    };
    const watched = replaced().finally(() => {
      this.replacementsPending -= 1;
    });
    this.replacing = Promise.all([this.replacing, watched]).then(
      () => undefined,
      (error: unknown) => this.violated("a killed worker is replaced", (error as Error).message),
    );
  }

  /** Resolves once no replacement of a killed worker is being watched. */
  async settled(): Promise<void> {
    await this.replacing;
  }

  /** The last lines the service (each process since its last start) logged. */
  logTail(lines = 15): string {
    const output = this.server.cluster?.output() ?? "";
    const logged = output.split("\n").filter((line) => line.startsWith("{"));
    return logged.slice(-lines).join("\n");
  }

  /** Stops the service and removes its data directory and the receiver. */
  async stop(): Promise<void> {
    this.starts += 1;
    await this.replacing;
    closeGrpcClient(this.server);
    await this.server.stop().catch(() => {});
    rmSync(this.dataDir, { recursive: true, force: true });
    await this.receiver.close();
  }

  /** Calls with `credential` wait for room under half its limit. */
  private reserve(credential: Credential): Promise<void> {
    if (!credential.valid) return this.budget.reserve("unauthenticated", "127.0.0.1");
    if (credential.kind === "admin") return this.budget.reserve("admin", "127.0.0.1");
    if (credential.kind === "metrics") return Promise.resolve();
    return this.budget.reserve(credential.kind, credential.token);
  }

  private judge(credential: Credential, what: string, outcome: Outcome): void {
    const after = `${Math.round(performance.now() - this.readyAt)} ms after the service was ready`;
    if (!outcome.ok && (outcome.status >= 500 || ["internal", "unknown"].includes(outcome.code))) {
      this.violated("no call answers 5xx", `${what} answered ${outcome.text}`);
      return;
    }
    const refused =
      !outcome.ok &&
      ["unauthenticated", "permission_denied", "resource_exhausted"].includes(outcome.code);
    // The service counted a failed authentication against the address.
    if (!outcome.ok && outcome.code === "unauthenticated")
      this.budget.charge("unauthenticated", "127.0.0.1");
    if (credential.valid && refused) {
      const invariant =
        outcome.code === "resource_exhausted"
          ? "no valid call refused below its rate limit"
          : "no valid key refused once ready";
      this.violated(invariant, `${what} with the ${credential.label}, ${after}: ${outcome.text}`);
    } else if (!credential.valid && outcome.ok) {
      this.violated("a revoked key is refused", `${what} with the ${credential.label} was served`);
    } else if (!credential.valid && !outcome.ok && outcome.code !== "unauthenticated") {
      this.violated(
        "a failed authentication is answered 401 below its rate limit",
        `${what} with the ${credential.label}: ${outcome.text}`,
      );
    }
  }

  private unanswered(what: string, error: unknown): Outcome {
    // A connection the primary was handing to a worker as it died is closed
    // unanswered within seconds (docs/scaling.md, Faults): an error to retry
    // on, as for the calls a dying worker held. Never answering is not.
    const closedAsAWorkerDied =
      !(error instanceof Error && error.message.startsWith("no answer")) &&
      performance.now() - this.workerDiedAt < handOverGraceMs + 3_000;
    if (!this.killing && !closedAsAWorkerDied && !this.portClosed) {
      const cause = (error as { cause?: Error }).cause?.message;
      this.violated(
        "every call is answered",
        `${what}: ${(error as Error).message}${cause ? ` (${cause})` : ""}`,
      );
    }
    return { ok: false, status: 0, code: "no_answer", text: "" };
  }

  private clusterOf() {
    const { cluster } = this.server;
    if (!cluster) throw new Error("the service under test runs without workers");
    return cluster;
  }

  /**
   * Starts the service on its data directory on a port chosen here, so
   * `/readyz` can be asked from the first moment; once it answers 200,
   * every valid credential is tried at once on new connections.
   */
  private async startReady(credentials: readonly Credential[]): Promise<TestServer> {
    this.starts += 1;
    this.portClosed = false;
    const port = await reservedPort();
    const starting = startServer({
      workers: 2,
      dataDir: this.dataDir,
      env: {
        PORT: String(port),
        // Warnings and errors only: what the service says of a fault the checker caused.
        LOG_LEVEL: process.env.INVARIANTS_LOG_LEVEL ?? "warn",
        WEBHOOK_ALLOW_PRIVATE: "true",
        METRICS_TOKEN: metricsToken,
        ...rateLimitEnv(this.rateLimits),
      },
    });
    let failed: unknown;
    starting.catch((error: unknown) => {
      failed = error;
    });
    for (;;) {
      if (failed) throw failed;
      const ready = await rawGet(port, "/readyz").catch(() => undefined);
      if (ready?.status === 200) break;
      await sleep(2);
    }
    this.readyAt = performance.now();
    await this.probeCredentials(port, credentials, 1_000);
    return starting;
  }

  /**
   * Calls with every valid credential on new connections, round after
   * round for `forMs`: a credential refused in that time was refused by
   * a service that said it was ready.
   */
  private async probeCredentials(
    port: number,
    credentials: readonly Credential[],
    forMs: number,
  ): Promise<void> {
    const probed = [...this.bootstrap, ...credentials].filter(
      (credential) => credential.valid && credential.kind !== "admin",
    );
    const until = performance.now() + forMs;
    const found = this.violations.length;
    // The admin token once (its limit is 60 a minute), the keys every round.
    const admin = this.bootstrap.find((credential) => credential.kind === "admin");
    if (admin) await this.probe(port, admin);
    // Until the first refusal: each 401 counts against the address's failed authentications.
    while (performance.now() < until && this.violations.length === found) {
      await Promise.all(
        probed.flatMap((credential) =>
          Array.from({ length: probesPerRound }, () => this.probe(port, credential)),
        ),
      );
      await sleep(20);
    }
  }

  private async probe(port: number, credential: Credential): Promise<void> {
    const path = {
      secret: "/customers?limit=1",
      public: "/campaigns?environment=test",
      admin: "/admin/applications",
      metrics: "/metrics",
    }[credential.kind];
    await this.reserve(credential);
    const answer = await rawGet(port, path, credential.token).catch((error: Error) => ({
      status: 0,
      body: `no answer (${error.message})`,
    }));
    if (answer.status === 401) this.budget.charge("unauthenticated", "127.0.0.1");
    // Another kill while the probes run closes what was handed to the dying worker, as for any call.
    const closedAsAWorkerDied =
      answer.status === 0 &&
      (this.portClosed || performance.now() - this.workerDiedAt < handOverGraceMs + 3_000);
    if (answer.status !== 200 && !closedAsAWorkerDied) {
      const after = Math.round(performance.now() - this.readyAt);
      this.violated(
        answer.status === 0 ? "every call is answered" : "no valid key refused once ready",
        `GET ${path.split("?")[0]} on a new connection with the ${credential.label}, ${after} ms after the service (or a new worker) was ready: ${answer.status || ""} ${answer.body.slice(0, 300)}`,
      );
    }
  }
}

/** A Server-Sent Events stream read event by event. */
export class EventStream {
  private buffer = "";
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  private readonly decoder = new TextDecoder();
  /** Every `data:` event received so far, parsed. */
  readonly events: Json[] = [];
  /** Set once the service ended the stream. */
  ended = false;
  /** The error the service ended the stream with (an `error` event), if it did. */
  endedWith: Json | undefined;

  constructor(
    body: ReadableStream<Uint8Array>,
    private readonly aborted: AbortController,
  ) {
    this.reader = body.getReader();
  }

  /** Resolves with the next `data:` event, or undefined once the stream ended. */
  async next(): Promise<Json | undefined> {
    for (;;) {
      const end = this.buffer.indexOf("\n\n");
      if (end >= 0) {
        const block = this.buffer.slice(0, end);
        this.buffer = this.buffer.slice(end + 2);
        const lines = block.split("\n");
        const data = lines
          .filter((line) => line.startsWith("data: "))
          .map((line) => line.slice("data: ".length))
          .join("\n");
        if (data === "") continue;
        const event = JSON.parse(data) as Json;
        // An `error` event ends the stream: it is not an update.
        if (lines.includes("event: error")) {
          this.ended = true;
          this.endedWith = event;
          return undefined;
        }
        this.events.push(event);
        return event;
      }
      const { done, value } = await this.reader
        .read()
        .catch(() => ({ done: true, value: undefined }));
      if (done) {
        this.ended = true;
        return undefined;
      }
      this.buffer += this.decoder.decode(value, { stream: true });
    }
  }

  /** Closes the stream from this side. */
  close(): void {
    this.aborted.abort();
  }
}

/** The variables that set the service's rate limits to `limits`. */
function rateLimitEnv(limits: RateLimitConfig): Record<string, string> {
  const value = (limit: LimitName) => {
    const rate = limits[limit];
    return rate ? `${rate.calls}/${rate.windowSeconds}s` : "off";
  };
  return {
    RATE_LIMIT_PUBLIC: value("public"),
    RATE_LIMIT_SECRET: value("secret"),
    RATE_LIMIT_ADMIN: value("admin"),
    RATE_LIMIT_UNAUTHENTICATED: value("unauthenticated"),
  };
}

/**
 * The loopback addresses admin calls come from: the admin limit counts
 * per address, and runs need more admin calls a minute than one
 * operator makes.
 */
const adminAddresses = Array.from({ length: 16 }, (_, index) => `127.0.0.${index + 2}`);

/** A JSON REST call from a given local address, on a connection of its own. */
function restFrom(
  localAddress: string,
  port: number,
  method: string,
  path: string,
  authorization: string,
  body?: unknown,
): Promise<{ status: number; contentType: string | undefined; body: string }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        host: "127.0.0.1",
        port,
        method,
        path,
        localAddress,
        agent: false,
        headers: {
          authorization,
          ...(payload === undefined ? {} : { "content-type": "application/json" }),
        },
        signal: AbortSignal.timeout(30_000),
      },
      (response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          text += chunk;
        });
        response.on("end", () =>
          resolve({
            status: response.statusCode ?? 0,
            contentType: response.headers["content-type"],
            body: text,
          }),
        );
        response.on("error", reject);
      },
    );
    request.on("error", reject);
    request.end(payload);
  });
}

/** A GET on a connection of its own, closed after the answer: its status and body. */
function rawGet(
  port: number,
  path: string,
  authorization?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        host: "127.0.0.1",
        port,
        path,
        agent: false,
        headers: authorization ? { authorization } : {},
        signal: AbortSignal.timeout(20_000),
      },
      (response) => {
        let body = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          body += chunk;
        });
        response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
        response.on("error", reject);
      },
    );
    request.on("error", reject);
    request.end();
  });
}
