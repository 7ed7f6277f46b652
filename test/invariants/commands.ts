import fc from "fast-check";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { RewardsService } from "../../gen/referral/v1/rewards_pb.js";
import { userHashOf } from "../../src/domain/identity.js";
import type { WireProtocol } from "../helpers/callers.js";
import type { Json } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";
import { checkAfterStep, invariant, reportLeaks } from "./checks.js";
import { erasedDataFound } from "./invariants.js";
import { type Model, slotCount } from "./model.js";
import { inPool } from "./snapshot.js";
import type { Credential, Outcome, System } from "./system.js";

/**
 * The steps of a run, one class per write RPC (and per fault), each a
 * fast-check command: `check` says from the model whether it may run now,
 * `run` makes its calls, judges each answer against what the model says
 * the service must answer, updates the model, and then checks every
 * invariant on what the service holds (see checks.ts).
 */

/** How an answer is judged: exactly as the model expects, or as any order of racing calls allows. */
type Mode = "alone" | "racing";

/** What a call may answer: "ok", or an error code as REST spells it. */
type Expected = readonly string[];

/** A step of a run. */
export abstract class Step implements fc.AsyncCommand<Model, System> {
  /** Whether the step restarts the service (then nothing read before may be lost). */
  protected readonly restarts: boolean = false;

  abstract check(model: Readonly<Model>): boolean;

  /** Makes the step's calls and judges their answers. */
  abstract act(model: Model, system: System, mode: Mode): Promise<void>;

  abstract toString(): string;

  /**
   * What the step writes, for a parallel step: two steps racing must not
   * write the same thing (their writes would decide each other's answer
   * in ways the model does not follow).
   */
  targets(_model: Readonly<Model>): string[] {
    return [];
  }

  async run(model: Model, system: System): Promise<void> {
    system.log(`run ${model.run}, step ${model.steps + 1}: ${this}`);
    await this.act(model, system, "alone");
    system.throwViolations();
    model.steps += 1;
    await checkAfterStep(system, model, { step: model.steps, restarted: this.restarts });
  }
}

/** Notes a violation unless the outcome is one of `expected` (a racing step also takes a refusal). */
function expect(
  system: System,
  mode: Mode,
  what: string,
  outcome: Outcome,
  expected: Expected,
): boolean {
  // No answer, a 5xx or a refused credential was already judged by the system.
  if (!outcome.ok && ["no_answer", "unauthenticated", "resource_exhausted"].includes(outcome.code))
    return false;
  const got = outcome.ok ? "ok" : outcome.code;
  const allowed = mode === "racing" ? [...expected, "failed_precondition"] : expected;
  if (allowed.includes(got)) return outcome.ok;
  system.violated(
    invariant.answers,
    `${what}: expected ${expected.join(" or ")}, got ${outcome.text.slice(0, 300)}`,
  );
  return false;
}

const protocols: readonly WireProtocol[] = ["rest", "rest", "rest", "grpc", "connect", "grpc-web"];
const protocol = () => fc.constantFrom(...protocols);
const slot = () => fc.integer({ min: 0, max: slotCount - 1 });
/** Picks one of what the model has (a live customer, a referral), whatever their number. */
const pick = () => fc.nat({ max: 1_000 });

function appOf(model: Readonly<Model>) {
  const app = model.app;
  if (!app) throw new Error("the run has no application");
  return app;
}

/** The run's campaign's referrer reward, as last read. */
function referrerReward(model: Readonly<Model>): Json {
  const reward = (model.campaign?.rewards ?? []).find((item: Json) => item.party === "referrer");
  if (!reward) throw new Error("the run's campaign has no referrer reward");
  return reward;
}

/** POST /customers/identify (IdentifyCustomer) of a slot: creates it, or updates it. */
export class Identify extends Step {
  constructor(
    readonly slot: number,
    readonly plan: "free" | "pro",
    readonly withPublicKey: boolean,
    /** REST with an `Idempotency-Key` (kept to be sent again), or another protocol without. */
    readonly via: WireProtocol | "idempotent",
  ) {
    super();
  }

  static arbitrary() {
    return fc
      .tuple(
        slot(),
        fc.constantFrom("free", "pro") as fc.Arbitrary<"free" | "pro">,
        fc.boolean(),
        fc.oneof(protocol(), fc.constant("idempotent" as const)),
      )
      .map(([at, plan, publicKey, via]) => new Identify(at, plan, publicKey, via));
  }

  check(model: Readonly<Model>): boolean {
    return model.slots[this.slot]?.erasedAt === undefined;
  }

  targets(): string[] {
    return [`customer ${this.slot}`];
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const customer = model.slots[this.slot];
    if (!customer) return;
    const key = this.withPublicKey ? app.public : app.secret;
    const body = {
      externalUserId: customer.externalUserId,
      name: customer.name,
      email: customer.email,
      customProperties: { note: `note of ${customer.token}`, plan: this.plan },
      environment: "test",
      // A public key changes an existing customer only with its userHash (docs/trust.md).
      ...(this.withPublicKey
        ? { userHash: userHashOf(app.identitySecret, customer.externalUserId) }
        : {}),
    };
    let outcome: Outcome;
    if (this.via === "idempotent") {
      const idempotencyKey = `run-${model.run}-write-${model.next()}`;
      const path = "/customers/identify";
      outcome = await system.rest(key, "POST", path, {
        body,
        headers: { "idempotency-key": idempotencyKey },
      });
      if (outcome.ok) {
        model.idempotent.push({
          key,
          path,
          body,
          idempotencyKey,
          identifiedSlot: this.slot,
          status: outcome.status,
          text: outcome.text,
          keptOrder: model.next(),
        });
      }
    } else {
      outcome = await system.call(key, this.via, CustomersService.method.identifyCustomer, body);
    }
    if (!expect(system, mode, this.toString(), outcome, ["ok"]) || !outcome.ok) return;
    const identified = outcome.body;
    if (customer.id !== undefined && identified.id !== customer.id) {
      system.violated(
        invariant.answers,
        `${this} answered customer ${identified.id}, the slot is ${customer.id}`,
      );
    }
    customer.id = identified.id;
    customer.referralCode = identified.referralCode;
    customer.plan = this.plan;
  }

  toString(): string {
    return `Identify(${this.slot}, ${this.plan}, ${this.withPublicKey ? "public" : "secret"} key, ${this.via})`;
  }
}

/** The moves of the referral lifecycle a review may make (docs/api.md). */
const referralMoves: Record<string, readonly string[]> = {
  pending: ["accepted", "flagged", "rejected"],
  flagged: ["pending", "accepted", "rejected"],
  accepted: ["reversed"],
  rejected: [],
  reversed: [],
};

/** POST /referrals (CreateReferral): a new referral, a re-attribution, or the same one again. */
export class Refer extends Step {
  constructor(
    /** Picks the referrer among the live customers, and the referee among the others. */
    readonly referrerPick: number,
    readonly refereePick: number,
    readonly via: WireProtocol | "idempotent",
  ) {
    super();
  }

  static arbitrary() {
    return fc
      .tuple(pick(), pick(), fc.oneof(protocol(), fc.constant("idempotent" as const)))
      .map(([referrer, referee, via]) => new Refer(referrer, referee, via));
  }

  /** The referrer's and the referee's slots. */
  private parties(model: Readonly<Model>): [number, number] | undefined {
    const live = model.liveSlots();
    if (live.length < 2) return undefined;
    const referrer = this.referrerPick % live.length;
    const referee = (referrer + 1 + (this.refereePick % (live.length - 1))) % live.length;
    return [live[referrer] as number, live[referee] as number];
  }

  check(model: Readonly<Model>): boolean {
    return this.parties(model) !== undefined;
  }

  targets(model: Readonly<Model>): string[] {
    return [`referee ${this.parties(model)?.[1]}`];
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const [from, to] = this.parties(model) ?? [];
    const referrer = model.slots[from ?? -1];
    const referee = model.slots[to ?? -1];
    if (!referrer?.referralCode || !referee?.id || to === undefined) return;
    const known = model.referrals.get(to);
    // A final referral is returned unchanged to its own referrer, refused to another.
    const final = known && ["accepted", "rejected", "reversed"].includes(known.status);
    const expected = final && known.referrerId !== referrer.id ? ["failed_precondition"] : ["ok"];
    const body = {
      referralCode: referrer.referralCode,
      refereeId: referee.id,
      campaignId: app.campaignId,
      // The referee's own verified call: only it (or a secret key) moves a referral (docs/trust.md).
      userHash: userHashOf(app.identitySecret, referee.externalUserId),
    };
    let outcome: Outcome;
    if (this.via === "idempotent") {
      const idempotencyKey = `run-${model.run}-write-${model.next()}`;
      outcome = await system.rest(app.public, "POST", "/referrals", {
        body,
        headers: { "idempotency-key": idempotencyKey },
      });
      if (outcome.ok) {
        model.idempotent.push({
          key: app.public,
          path: "/referrals",
          body,
          idempotencyKey,
          status: outcome.status,
          text: outcome.text,
          keptOrder: model.next(),
        });
      }
    } else {
      outcome = await system.call(
        app.public,
        this.via,
        ReferralsService.method.createReferral,
        body,
      );
    }
    expect(system, mode, `${this}: customer ${from} refers ${to}`, outcome, expected);
  }

  toString(): string {
    return `Refer(live #${this.referrerPick} refers another, #${this.refereePick}, ${this.via})`;
  }
}

/**
 * POST /checkpoints/ingest (IngestCheckpoint) for several customers at
 * once, referees first: conversions. From the app's public key they hold
 * their grants (the campaign's `publicCheckpoints` is `hold`); from the
 * backend's secret key they convert, and confirm what the app's held.
 */
export class Convert extends Step {
  constructor(
    readonly picks: readonly number[],
    readonly trigger: boolean,
    readonly fromBackend: boolean,
    readonly via: WireProtocol,
  ) {
    super();
  }

  static arbitrary() {
    return fc
      .tuple(
        fc.array(pick(), { minLength: 1, maxLength: 4 }),
        fc.boolean(),
        fc.boolean(),
        protocol(),
      )
      .map(([picks, trigger, fromBackend, via]) => new Convert(picks, trigger, fromBackend, via));
  }

  /** The customers converting: live referees, or any live customer when there is none. */
  private customers(model: Readonly<Model>): number[] {
    const referees = model.liveSlots().filter((slot) => model.referrals.has(slot));
    const among = referees.length > 0 ? referees : model.liveSlots();
    if (among.length === 0) return [];
    return [...new Set(this.picks.map((at) => among[at % among.length] as number))];
  }

  check(model: Readonly<Model>): boolean {
    return this.customers(model).length > 0;
  }

  targets(model: Readonly<Model>): string[] {
    return this.customers(model).map((referee) => `referee ${referee}`);
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    await Promise.all(
      this.customers(model).map(async (referee) => {
        const customer = model.slots[referee];
        if (!customer) return;
        const outcome = await system.call(
          this.fromBackend ? app.secret : app.public,
          this.via,
          CheckpointsService.method.ingestCheckpoint,
          {
            name: this.trigger ? app.trigger : "signup",
            externalUserId: customer.externalUserId,
            environment: "test",
          },
        );
        expect(system, mode, `${this}: customer ${referee}`, outcome, ["ok"]);
      }),
    );
  }

  toString(): string {
    return `Convert(referees #${this.picks.join(", #")}, ${this.trigger ? "the trigger" : "another checkpoint"}, ${this.fromBackend ? "secret key" : "public key"}, ${this.via})`;
  }
}

/** PATCH /referrals/{id} (UpdateReferralStatus): a review, or a reversal (a refund). */
export class ReviewReferral extends Step {
  constructor(
    readonly pick: number,
    readonly to: string,
    readonly via: WireProtocol,
  ) {
    super();
  }

  static arbitrary() {
    return fc
      .tuple(
        pick(),
        fc.constantFrom("accepted", "rejected", "flagged", "pending", "reversed", "reversed"),
        protocol(),
      )
      .map(([at, to, via]) => new ReviewReferral(at, to, via));
  }

  /** The referee's slot of the referral reviewed. */
  private referee(model: Readonly<Model>): number | undefined {
    const referees = [...model.referrals.keys()].sort((a, b) => a - b);
    return referees[this.pick % Math.max(1, referees.length)];
  }

  check(model: Readonly<Model>): boolean {
    return this.referee(model) !== undefined;
  }

  targets(model: Readonly<Model>): string[] {
    return [`referee ${this.referee(model)}`];
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const referee = this.referee(model);
    const known = referee === undefined ? undefined : model.referrals.get(referee);
    if (!known) return;
    const allowed = referralMoves[known.status]?.includes(this.to);
    const outcome = await system.call(
      app.secret,
      this.via,
      ReferralsService.method.updateReferralStatus,
      { id: known.id, status: this.to, reason: "the checker's review" },
    );
    expect(system, mode, `${this}: the referral of ${referee}, ${known.status}`, outcome, [
      allowed ? "ok" : "failed_precondition",
    ]);
  }

  toString(): string {
    return `ReviewReferral(#${this.pick} to ${this.to}, ${this.via})`;
  }
}

/** POST /reward-grants (CreateRewardGrant): a campaign reward by hand, past its limit or not, or a value of its own. */
export class GrantManually extends Step {
  constructor(
    readonly pick: number,
    readonly what: "reward" | "reward ignoring its limit" | "a value",
    readonly cents: number,
    readonly via: WireProtocol,
  ) {
    super();
  }

  static arbitrary() {
    return fc
      .tuple(
        pick(),
        fc.constantFrom("reward", "reward ignoring its limit", "a value") as fc.Arbitrary<
          GrantManually["what"]
        >,
        fc.integer({ min: 1, max: 5_000 }),
        protocol(),
      )
      .map(([at, what, cents, via]) => new GrantManually(at, what, cents, via));
  }

  check(model: Readonly<Model>): boolean {
    return model.liveSlots().length > 0;
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const live = model.liveSlots();
    const recipient = live[this.pick % live.length];
    const customerId = model.slots[recipient ?? -1]?.id;
    const reason = "goodwill, from the checker";
    const request =
      this.what === "a value"
        ? {
            customerId,
            reason,
            value: { type: "payout", method: "paypal", currency: "usd", amount: this.cents / 100 },
          }
        : {
            customerId,
            reason,
            rewardId: referrerReward(model).id,
            ignoreLimit: this.what === "reward ignoring its limit",
          };
    const outcome = await system.call(
      app.secret,
      this.via,
      RewardsService.method.createRewardGrant,
      request,
    );
    expect(system, mode, `${this}: to customer ${recipient}`, outcome, ["ok"]);
  }

  toString(): string {
    const value = this.what === "a value" ? ` of ${this.cents / 100} usd` : "";
    return `GrantManually(to live #${this.pick}, ${this.what}${value}, ${this.via})`;
  }
}

/** The moves of a grant (docs/rewards.md): a clawback's own, every other kind's. */
function grantMoveAllowed(kind: string, from: string, to: string): boolean {
  if (kind === "clawback") return from === "pending" && ["fulfilled", "rejected"].includes(to);
  if (from === "pending") return ["approved", "rejected", "voided"].includes(to);
  if (from === "approved") return ["fulfilled", "rejected", "voided"].includes(to);
  return false;
}

/** PATCH /reward-grants/{id} (UpdateRewardGrantStatus): approve, fulfil, reject or void a grant. */
export class MoveGrant extends Step {
  constructor(
    readonly pick: number,
    readonly to: "approved" | "fulfilled" | "rejected" | "voided",
    readonly via: WireProtocol,
  ) {
    super();
  }

  static arbitrary() {
    return fc
      .tuple(
        fc.nat({ max: 1_000 }),
        fc.constantFrom("approved", "fulfilled", "fulfilled", "rejected", "voided") as fc.Arbitrary<
          MoveGrant["to"]
        >,
        protocol(),
      )
      .map(([pick, to, via]) => new MoveGrant(pick, to, via));
  }

  check(model: Readonly<Model>): boolean {
    return model.grants.length > 0;
  }

  targets(model: Readonly<Model>): string[] {
    return [`grant ${this.pick % Math.max(1, model.grants.length)}`];
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const grant = model.grants[this.pick % model.grants.length];
    if (!grant) return;
    // A pending grant whose hold is ending may be approved by the sweep first.
    const from = grant.mayBeSwept ? ["pending", "approved"] : [grant.status];
    const expected = [
      ...new Set(
        from.map((status) =>
          grantMoveAllowed(grant.kind, status, this.to) ? "ok" : "failed_precondition",
        ),
      ),
    ];
    const outcome = await system.call(
      app.secret,
      this.via,
      RewardsService.method.updateRewardGrantStatus,
      {
        id: grant.id,
        status: this.to,
        reason: "the checker's review",
        ...(this.to === "fulfilled" ? { fulfillment: { reference: `paid-${grant.id}` } } : {}),
      },
    );
    expect(system, mode, `${this} (${grant.kind} ${grant.status})`, outcome, expected);
  }

  toString(): string {
    return `MoveGrant(#${this.pick} to ${this.to}, ${this.via})`;
  }
}

/**
 * DELETE /customers/{id} (EraseCustomer), then every kept copy sent again:
 * each write made with an `Idempotency-Key` retried with it, and each
 * webhook delivery that held the customer's data redelivered. The reads
 * after the step search everything else.
 */
export class Erase extends Step {
  constructor(
    readonly pick: number,
    readonly via: WireProtocol,
  ) {
    super();
  }

  static arbitrary() {
    return fc.tuple(pick(), protocol()).map(([at, via]) => new Erase(at, via));
  }

  check(model: Readonly<Model>): boolean {
    return model.liveSlots().length > 0;
  }

  /**
   * The customer erased: an even pick takes a referrer when there is one
   * (its referees hold its data: the harder erasure), an odd one anyone.
   */
  private erased(model: Readonly<Model>): number | undefined {
    const live = model.liveSlots();
    const referrers = live.filter((slot) =>
      [...model.referrals.values()].some(
        (referral) => referral.referrerId === model.slots[slot]?.id,
      ),
    );
    const among = this.pick % 2 === 0 && referrers.length > 0 ? referrers : live;
    return among[Math.floor(this.pick / 2) % Math.max(1, among.length)];
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const customer = model.slots[this.erased(model) ?? -1];
    if (!customer?.id) return;
    const outcome = await system.call(app.secret, this.via, CustomersService.method.eraseCustomer, {
      id: customer.id,
    });
    if (!expect(system, mode, this.toString(), outcome, ["ok"]) || !outcome.ok) return;
    // Acknowledged now: anything read or sent from here on must be without it.
    customer.erasedAt = Date.now();
    customer.erasedOrder = model.next();
    const tokens = model.erased().map((erased) => erased.token);
    const leaks: string[] = erasedDataFound(
      [{ where: "the tombstone", text: outcome.text }],
      tokens,
    );
    for (const write of model.idempotent) {
      const identified =
        write.identifiedSlot === undefined ? undefined : model.slots[write.identifiedSlot];
      // Sent again, an erased customer's own identify makes it anew, as documented.
      if (identified?.erasedAt !== undefined) continue;
      const replay = await system.rest(write.key, "POST", write.path, {
        body: write.body,
        headers: { "idempotency-key": write.idempotencyKey },
      });
      leaks.push(
        ...erasedDataFound(
          [
            {
              where: `POST ${write.path} sent again with Idempotency-Key ${write.idempotencyKey}`,
              text: replay.text,
            },
          ],
          tokens,
        ),
      );
      const ranAgain = replay.headers?.get("idempotent-replayed") !== "true";
      if (identified && replay.ok && ranAgain) {
        identified.plan = write.body.customProperties.plan;
      }
      // Run again, its new outcome is what the key replays from now on.
      if (ranAgain && replay.status > 0 && replay.status < 500 && replay.status !== 429) {
        write.status = replay.status;
        write.text = replay.text;
        write.keptOrder = model.next();
      }
    }
    leaks.push(...(await redeliverWhatHeld(system, model, customer.token, customer.erasedAt)));
    reportLeaks(system, leaks);
  }

  toString(): string {
    return `Erase(#${this.pick}: ${this.pick % 2 === 0 ? "a referrer, if any" : "anyone"} live, ${this.via})`;
  }
}

/**
 * Redelivers the run's webhook deliveries whose events, as first received,
 * held `token`; returns where the redeliveries still hold it. They are
 * asked for once the clock is a whole second past the erasure, so their
 * `webhook-timestamp` (whole seconds) tells them from earlier attempts.
 */
async function redeliverWhatHeld(
  system: System,
  model: Model,
  token: string,
  erasedAt: number,
): Promise<string[]> {
  const app = appOf(model);
  const held = new Set(
    system.receiver.received
      .filter(
        (request) =>
          request.path === app.webhookPath &&
          request.body.toLowerCase().includes(token.toLowerCase()),
      )
      .map((request) => String(request.headers["webhook-id"])),
  );
  if (held.size === 0) return [];
  const deliveries: Json[] = [];
  for (;;) {
    const page = await system.rest(
      app.secret,
      "GET",
      `/webhooks/${app.webhookId}/deliveries?limit=100&offset=${deliveries.length}`,
    );
    if (!page.ok) return [];
    deliveries.push(...page.body.data);
    if (page.body.data.length === 0 || deliveries.length >= page.body.total) break;
  }
  // The newest few: each redelivery is waited for.
  const chosen = deliveries.filter((delivery) => held.has(delivery.eventId)).slice(0, 8);
  const after = Math.ceil(erasedAt / 1000);
  await eventually("the clock to pass the erasure's second", () => Date.now() >= after * 1000);
  const mark = system.receiver.received.length;
  await inPool(chosen, 4, async (delivery) => {
    const outcome = await system.rest(
      app.secret,
      "POST",
      `/webhooks/${app.webhookId}/deliveries/${delivery.id}/redeliver`,
      { body: {} },
    );
    expect(system, "alone", `the redelivery of ${delivery.id}`, outcome, ["ok"]);
  });
  const redelivered = (eventId: string) =>
    system.receiver.received
      .slice(mark)
      .find(
        (request) =>
          request.path === app.webhookPath &&
          request.headers["webhook-id"] === eventId &&
          Number(request.headers["webhook-timestamp"]) >= after,
      );
  // "Sends it again now" (docs/webhooks.md): a while for all of them together.
  await eventually(
    "the redeliveries",
    () => chosen.every((delivery) => redelivered(delivery.eventId)),
    { timeoutMs: 30_000 },
  ).catch(() => undefined);
  const found: string[] = [];
  for (const delivery of chosen) {
    const request = redelivered(delivery.eventId);
    if (!request) {
      system.violated(
        invariant.answers,
        `the redelivery of ${delivery.id} (${delivery.eventType} ${delivery.eventId}) was answered 200 and not sent in 30 s`,
      );
      continue;
    }
    found.push(
      ...erasedDataFound(
        [
          {
            where: `the redelivery of ${delivery.eventType} ${delivery.eventId}`,
            text: request.body,
          },
        ],
        [token],
      ),
    );
  }
  return found;
}

/** A change of the run's campaign through the admin API. */
type CampaignChange =
  | {
      readonly kind: "limit";
      readonly unit: "rewards" | "amount";
      readonly limit: number;
      readonly interval: string;
    }
  | { readonly kind: "hold"; readonly hold: string | null }
  | { readonly kind: "approval"; readonly approval: "automatic" | "manual" }
  | { readonly kind: "time zone"; readonly timeZone: string }
  | { readonly kind: "public leaderboard" };

/** PATCH /admin/campaigns/{id} (UpdateCampaign): the reward's limit, hold, approval; the time zone; the public leaderboard. */
export class EditCampaign extends Step {
  constructor(readonly change: CampaignChange) {
    super();
  }

  static arbitrary(): fc.Arbitrary<EditCampaign> {
    const interval = fc.constantFrom("day", "week", "month", "year", "lifetime");
    return fc
      .oneof(
        fc.record({
          kind: fc.constant("limit" as const),
          unit: fc.constant("rewards" as const),
          limit: fc.integer({ min: 1, max: 3 }),
          interval,
        }),
        fc.record({
          kind: fc.constant("limit" as const),
          unit: fc.constant("amount" as const),
          limit: fc.constantFrom(30, 50),
          interval,
        }),
        fc.record({ kind: fc.constant("hold" as const), hold: fc.constantFrom(null, "2s", "1d") }),
        fc.record({
          kind: fc.constant("approval" as const),
          approval: fc.constantFrom("automatic", "manual") as fc.Arbitrary<"automatic" | "manual">,
        }),
        fc.record({
          kind: fc.constant("time zone" as const),
          timeZone: fc.constantFrom(
            "UTC",
            "Europe/Paris",
            "Asia/Tokyo",
            "Pacific/Kiritimati",
            "America/St_Johns",
          ),
        }),
        fc.record({ kind: fc.constant("public leaderboard" as const) }),
      )
      .map((change) => new EditCampaign(change as CampaignChange));
  }

  check(model: Readonly<Model>): boolean {
    return model.campaign !== undefined;
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const change = this.change;
    const referrer = (edit: (reward: Json) => Json) =>
      (model.campaign.rewards as Json[]).map((reward) =>
        reward.party === "referrer" ? edit(reward) : reward,
      );
    const [mask, body]: [string, Json] =
      change.kind === "limit"
        ? [
            "rewards",
            {
              rewards: referrer((reward) => ({
                ...reward,
                limit: change.limit,
                limitUnit: change.unit,
                limitInterval: change.interval,
              })),
            },
          ]
        : change.kind === "hold"
          ? ["rewards", { rewards: referrer((reward) => ({ ...reward, holdPeriod: change.hold })) }]
          : change.kind === "approval"
            ? [
                "rewards",
                { rewards: referrer((reward) => ({ ...reward, approval: change.approval })) },
              ]
            : change.kind === "time zone"
              ? ["timeZone", { timeZone: change.timeZone }]
              : ["leaderboard", { leaderboard: { public: true, minimumAccepted: 0 } }];
    const outcome = await system.rest(
      system.bootstrap.find((credential) => credential.kind === "admin") as Credential,
      "PATCH",
      `/admin/campaigns/${app.campaignId}?updateMask=${mask}`,
      { body },
    );
    if (expect(system, mode, this.toString(), outcome, ["ok"]) && outcome.ok)
      model.campaign = outcome.body;
  }

  toString(): string {
    const { kind, ...change } = this.change;
    return `EditCampaign(${kind} ${JSON.stringify(change)})`;
  }
}

/** The admin token. */
function adminOf(system: System): Credential {
  return system.bootstrap.find((credential) => credential.kind === "admin") as Credential;
}

/** POST /admin/applications/{id}/api-keys (CreateApiKey), then calls with the key at once. */
export class CreateKey extends Step {
  constructor(readonly kind: "secret" | "public") {
    super();
  }

  static arbitrary() {
    return fc
      .constantFrom("secret", "public")
      .map((kind) => new CreateKey(kind as "secret" | "public"));
  }

  check(model: Readonly<Model>): boolean {
    return model.extraKeys.length < 4;
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const outcome = await system.rest(
      adminOf(system),
      "POST",
      `/admin/applications/${app.applicationId}/api-keys`,
      { body: { kind: this.kind, name: `checker key ${model.next()}` } },
    );
    if (!expect(system, mode, this.toString(), outcome, ["ok"]) || !outcome.ok) return;
    const credential: Credential = {
      label: `run ${model.run}'s ${this.kind} key ${outcome.body.apiKey.id}`,
      kind: this.kind,
      token: outcome.body.key,
      valid: true,
    };
    model.extraKeys.push({ id: outcome.body.apiKey.id, credential });
    // A committed key is served by every worker from the answer on.
    await Promise.all(
      Array.from({ length: 6 }, (_, index) =>
        this.kind === "secret"
          ? system.rest(credential, "GET", "/customers?limit=1")
          : system.call(
              credential,
              protocols[index % protocols.length] ?? "rest",
              CampaignsService.method.listCampaigns,
              {
                environment: "test",
              },
            ),
      ),
    );
  }

  toString(): string {
    return `CreateKey(${this.kind})`;
  }
}

/**
 * POST /admin/api-keys/{id}/revoke (RevokeApiKey) of a key the run made;
 * a stats stream opened with it before must end, not go on updating, and
 * a call with it is refused.
 */
export class RevokeKey extends Step {
  constructor(readonly pick: number) {
    super();
  }

  static arbitrary() {
    return fc.nat({ max: 100 }).map((pick) => new RevokeKey(pick));
  }

  check(model: Readonly<Model>): boolean {
    return model.extraKeys.some((key) => key.credential.valid);
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const valid = model.extraKeys.filter((key) => key.credential.valid);
    const key = valid[this.pick % valid.length];
    if (!key) return;
    const stream =
      key.credential.kind === "secret"
        ? await system.openEvents(key.credential, `/campaigns/${app.campaignId}/stats/stream`)
        : undefined;
    try {
      await stream?.next();
      const outcome = await system.rest(
        adminOf(system),
        "POST",
        `/admin/api-keys/${key.id}/revoke`,
        {
          body: {},
        },
      );
      if (!expect(system, mode, this.toString(), outcome, ["ok"])) return;
      key.credential.valid = false;
      // Refused now (the system's judge expects 401).
      await system.rest(key.credential, "GET", "/customers?limit=1");
      if (!stream) return;
      // Something the stream would show, written with the run's own key.
      await system.rest(app.public, "POST", "/customers/identify", {
        body: {
          externalUserId: `fresh-${model.run}-${model.next()}`,
          name: "Fresh",
          environment: "test",
        },
      });
      const next = await Promise.race([
        stream.next(),
        new Promise<"open">((resolve) => setTimeout(() => resolve("open"), 10_000)),
      ]);
      if (next === undefined && stream.endedWith && stream.endedWith.code !== "unauthenticated") {
        system.violated(
          "a revoked key's stream ends",
          `the stats stream opened with the revoked key ended with ${JSON.stringify(stream.endedWith)}, not unauthenticated`,
        );
      }
      if (next !== undefined) {
        system.violated(
          "a revoked key's stream ends",
          next === "open"
            ? "the stats stream opened with the revoked key is still open 10 s after the revocation"
            : `the stats stream opened with the revoked key sent an update after the revocation: ${JSON.stringify(next).slice(0, 200)}`,
        );
      }
    } finally {
      stream?.close();
    }
  }

  toString(): string {
    return `RevokeKey(#${this.pick})`;
  }
}

/**
 * Many calls at once with one key, far below its rate limit: reads, or
 * identifies of the run's customers as they are.
 */
export class Burst extends Step {
  constructor(
    readonly size: number,
    readonly withPublicKey: boolean,
    readonly writes: boolean,
  ) {
    super();
  }

  static arbitrary() {
    return fc
      .tuple(fc.integer({ min: 10, max: 100 }), fc.boolean(), fc.boolean())
      .map(([size, publicKey, writes]) => new Burst(size, publicKey, writes));
  }

  check(model: Readonly<Model>): boolean {
    return !this.writes || model.slots.some((_, index) => model.isLive(index));
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const key = this.withPublicKey ? app.public : app.secret;
    const live = model.slots.filter((_, index) => model.isLive(index));
    await Promise.all(
      Array.from({ length: this.size }, async (_, index) => {
        const via = protocols[index % protocols.length] ?? "rest";
        const customer = live[index % Math.max(1, live.length)];
        const outcome =
          this.writes && customer
            ? await system.call(key, via, CustomersService.method.identifyCustomer, {
                externalUserId: customer.externalUserId,
                name: customer.name,
                email: customer.email,
                customProperties: {
                  note: `note of ${customer.token}`,
                  plan: customer.plan ?? "free",
                },
                environment: "test",
                ...(this.withPublicKey
                  ? { userHash: userHashOf(app.identitySecret, customer.externalUserId) }
                  : {}),
              })
            : this.withPublicKey
              ? await system.call(key, via, CampaignsService.method.listCampaigns, {
                  environment: "test",
                })
              : await system.call(key, via, CustomersService.method.listCustomers, { limit: 1 });
        expect(system, mode, `${this} call ${index}`, outcome, ["ok"]);
      }),
    );
  }

  toString(): string {
    return `Burst(${this.size} ${this.writes ? "identifies" : "reads"} at once, ${this.withPublicKey ? "public" : "secret"} key)`;
  }
}

/**
 * A few calls at once with a made-up key (each must be 401, far below the
 * failed-authentication limit), then an admin call and a metrics scrape
 * from the same address, which must be served.
 */
export class WrongKeys extends Step {
  constructor(readonly size: number) {
    super();
  }

  static arbitrary() {
    return fc.integer({ min: 1, max: 6 }).map((size) => new WrongKeys(size));
  }

  check(): boolean {
    return true;
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const app = appOf(model);
    const wrong: Credential = {
      label: "made-up key",
      kind: "secret",
      token: `sk_made_up_${model.run}_${model.next()}`,
      valid: false,
    };
    await Promise.all(
      Array.from({ length: this.size }, () => system.rest(wrong, "GET", "/customers?limit=1")),
    );
    // From the address the made-up keys came from: a few failures must not block it.
    const admin = await system.rest(
      adminOf(system),
      "GET",
      `/admin/applications/${app.applicationId}/api-keys`,
      { from: "127.0.0.1" },
    );
    expect(system, mode, `${this}: the admin call after them`, admin, ["ok"]);
    const metrics = system.bootstrap.find(
      (credential) => credential.kind === "metrics",
    ) as Credential;
    const scrape = await system.fetchText(metrics, "/metrics");
    expect(system, mode, `${this}: the metrics scrape after them`, scrape, ["ok"]);
  }

  toString(): string {
    return `WrongKeys(${this.size} at once)`;
  }
}

/** kill -9 of the primary between steps, and a restart on the same data directory. */
export class KillPrimary extends Step {
  protected override readonly restarts = true;

  static arbitrary() {
    return fc.constant(new KillPrimary());
  }

  check(): boolean {
    return true;
  }

  async act(model: Model, system: System): Promise<void> {
    await system.killPrimary();
    await system.restart(model.validCredentials());
  }

  toString(): string {
    return "KillPrimary()";
  }
}

/** kill -9 of a worker; the primary starts another. */
export class KillWorker extends Step {
  protected override readonly restarts = true;

  constructor(readonly which: number) {
    super();
  }

  static arbitrary() {
    return fc.integer({ min: 0, max: 1 }).map((which) => new KillWorker(which));
  }

  check(): boolean {
    return true;
  }

  async act(model: Model, system: System): Promise<void> {
    await system.killWorker(this.which, model.validCredentials());
  }

  toString(): string {
    return `KillWorker(${this.which})`;
  }
}

/**
 * kill -9 of the primary while identifies of new customers are in flight;
 * after the restart every identify answered 201 is found.
 */
export class KillDuringWrites extends Step {
  protected override readonly restarts = true;

  constructor(readonly size: number) {
    super();
  }

  static arbitrary() {
    return fc.integer({ min: 6, max: 30 }).map((size) => new KillDuringWrites(size));
  }

  check(): boolean {
    return true;
  }

  async act(model: Model, system: System): Promise<void> {
    const app = appOf(model);
    const acknowledged: string[] = [];
    let killed: Promise<void> | undefined;
    const kill = () => {
      killed ??= system.killPrimary();
    };
    const externalUserIds = Array.from(
      { length: this.size },
      () => `fresh-${model.run}-${model.next()}`,
    );
    await Promise.all(
      externalUserIds.map(async (externalUserId) => {
        const outcome = await system.rest(app.public, "POST", "/customers/identify", {
          body: { externalUserId, name: "Fresh", environment: "test" },
        });
        if (outcome.ok) acknowledged.push(externalUserId);
        if (acknowledged.length >= this.size / 3) kill();
      }),
    );
    kill();
    await killed;
    await system.restart(model.validCredentials());
    const lost: string[] = [];
    await inPool(acknowledged, 6, async (externalUserId) => {
      const found = await system.rest(
        app.secret,
        "GET",
        `/customers?environment=test&externalUserId=${externalUserId}`,
      );
      if (found.ok && found.body.total !== 1) lost.push(externalUserId);
    });
    if (lost.length > 0) {
      system.violated(
        invariant.lost,
        `identifies answered 201 before the kill, not found after it: ${lost.join(", ")}`,
      );
    }
  }

  toString(): string {
    return `KillDuringWrites(${this.size} identifies)`;
  }
}

/**
 * A write sent again with its `Idempotency-Key`: answered as the first
 * time, unless it held data erased since (then without it).
 */
export class Replay extends Step {
  constructor(readonly pick: number) {
    super();
  }

  static arbitrary() {
    return fc.nat({ max: 1_000 }).map((pick) => new Replay(pick));
  }

  check(model: Readonly<Model>): boolean {
    return model.idempotent.length > 0;
  }

  async act(model: Model, system: System, mode: Mode): Promise<void> {
    const write = model.idempotent[this.pick % model.idempotent.length];
    if (!write) return;
    const identified =
      write.identifiedSlot === undefined ? undefined : model.slots[write.identifiedSlot];
    if (identified?.erasedAt !== undefined) return;
    // An erasure forgets every kept outcome that names the erased customer
    // (its data, or its id: a referral it made); the write then runs again
    // and answers what the service holds now (docs/privacy.md). An outcome
    // kept after the erasure is the service's answer since: a referral of
    // the erased customer refused as not found names its id, and is replayed.
    const erased = model.erased();
    const forgotten = erased.some(
      (slot) =>
        (slot.erasedOrder ?? 0) > write.keptOrder &&
        (write.text.includes(slot.token) ||
          (slot.id !== undefined && write.text.includes(slot.id))),
    );
    const replay = await system.rest(write.key, "POST", write.path, {
      body: write.body,
      headers: { "idempotency-key": write.idempotencyKey },
    });
    expect(
      system,
      mode,
      this.toString(),
      replay,
      forgotten
        ? ["ok", "not_found", "failed_precondition", "invalid_argument"]
        : [keptCode(write)],
    );
    if (forgotten && replay.headers?.get("idempotent-replayed") === "true") {
      system.violated(
        invariant.answers,
        `${this}: replayed an outcome that names an erased customer: ${write.text.slice(0, 200)}`,
      );
    }
    const tokens = erased.map((slot) => slot.token);
    reportLeaks(
      system,
      erasedDataFound(
        [
          {
            where: `${write.path} sent again with Idempotency-Key ${write.idempotencyKey}`,
            text: replay.text,
          },
        ],
        tokens,
      ),
    );
    if (replay.headers?.get("idempotent-replayed") === "true" && !forgotten) {
      if (replay.status !== write.status || replay.text !== write.text) {
        system.violated(
          invariant.answers,
          `${this}: replayed ${replay.status} ${replay.text.slice(0, 200)}, first answered ${write.status} ${write.text.slice(0, 200)}`,
        );
      }
    }
  }

  toString(): string {
    return `Replay(#${this.pick})`;
  }
}

/** What a kept outcome replays as: `ok`, or the code of the error it kept. */
function keptCode(write: { status: number; text: string }): string {
  if (write.status < 300) return "ok";
  try {
    return (JSON.parse(write.text) as { code?: string }).code ?? String(write.status);
  } catch {
    return String(write.status);
  }
}

/** Steps that may race each other: writes of several clients at once. */
const racingArbitraries = () => [
  Identify.arbitrary(),
  Refer.arbitrary(),
  Convert.arbitrary(),
  GrantManually.arbitrary(),
  MoveGrant.arbitrary(),
  ReviewReferral.arbitrary(),
];

/** Two to four writes sent at once by as many clients; each answer may be any a linearisation allows. */
export class Parallel extends Step {
  constructor(readonly steps: readonly Step[]) {
    super();
  }

  static arbitrary() {
    return fc
      .array(fc.oneof(...racingArbitraries()), { minLength: 2, maxLength: 4 })
      .map((steps) => new Parallel(steps));
  }

  check(model: Readonly<Model>): boolean {
    if (!this.steps.every((step) => step.check(model))) return false;
    const targets = this.steps.flatMap((step) => step.targets(model));
    return new Set(targets).size === targets.length;
  }

  async act(model: Model, system: System): Promise<void> {
    await Promise.all(this.steps.map((step) => step.act(model, system, "racing")));
  }

  toString(): string {
    return `Parallel(${this.steps.join(" | ")})`;
  }
}

/** Every step, weighted: writes often, faults now and then. */
export function stepArbitraries(): fc.Arbitrary<Step>[] {
  return [
    fc.oneof(
      { arbitrary: Identify.arbitrary(), weight: 8 },
      { arbitrary: Refer.arbitrary(), weight: 8 },
      { arbitrary: Convert.arbitrary(), weight: 6 },
      { arbitrary: ReviewReferral.arbitrary(), weight: 3 },
      { arbitrary: GrantManually.arbitrary(), weight: 4 },
      { arbitrary: MoveGrant.arbitrary(), weight: 4 },
      { arbitrary: Erase.arbitrary(), weight: 3 },
      { arbitrary: EditCampaign.arbitrary(), weight: 2 },
      { arbitrary: CreateKey.arbitrary(), weight: 1 },
      { arbitrary: RevokeKey.arbitrary(), weight: 1 },
      { arbitrary: Burst.arbitrary(), weight: 2 },
      { arbitrary: WrongKeys.arbitrary(), weight: 1 },
      { arbitrary: Replay.arbitrary(), weight: 2 },
      { arbitrary: Parallel.arbitrary(), weight: 4 },
      { arbitrary: KillPrimary.arbitrary(), weight: 1 },
      { arbitrary: KillWorker.arbitrary(), weight: 1 },
      { arbitrary: KillDuringWrites.arbitrary(), weight: 1 },
    ),
  ];
}
