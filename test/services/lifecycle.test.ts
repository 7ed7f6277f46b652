import test from "ava";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { call, type Outcome, type Protocol, protocols } from "../helpers/callers.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";

/**
 * The referral lifecycle on every protocol: identify, create and
 * re-attribute, the fraud rules, conversion by the reward trigger, and
 * review. The service's clock is ours, so the time rules can be reached; the
 * velocity limit is 3 so the rule fires quickly. The tests share the clock,
 * so they run serially.
 */
const start = new Date("2026-05-01T09:00:00.000Z").getTime();
let elapsed = 0;
const advance = (ms: number) => {
  elapsed += ms;
};
const server = useServer({
  clock: () => new Date(start + elapsed),
  env: { REFERRAL_VELOCITY_LIMIT: "3" },
});
const minute = 60_000;
const day = 24 * 60 * minute;

let keyIds: { secret: string; public: string };
test.serial.before(async () => {
  const applicationId = server.app.demo?.applicationId;
  const listed = await rest(server, "GET", `/admin/applications/${applicationId}/api-keys`, {
    key: keys.admin,
  });
  const idOf = (kind: string) => listed.body.find((k: Json) => k.kind === kind).id;
  keyIds = { secret: idOf("secret"), public: idOf("public") };
});

function ok(outcome: Outcome): Json {
  if (!outcome.ok) throw new Error(`call failed: ${outcome.code} ${outcome.message}`);
  return outcome.body;
}

/** The calls of one protocol, with REST-shaped requests and results. */
function client(protocol: Protocol) {
  const id = (name: string) => `${protocol}-${name}`;
  return {
    id,
    identify: async (name: string, fields: Record<string, unknown> = {}, key = keys.public) =>
      ok(
        await call(
          server,
          protocol,
          CustomersService.method.identifyCustomer,
          { externalUserId: id(name), name, ...fields },
          key,
        ),
      ),
    refer: (referralCode: string, refereeName: string, key = keys.public) =>
      call(
        server,
        protocol,
        ReferralsService.method.createReferral,
        { referralCode, refereeExternalUserId: id(refereeName) },
        key,
      ),
    review: (referralId: string, status: string | undefined, reason?: string, key = keys.secret) =>
      call(
        server,
        protocol,
        ReferralsService.method.updateReferralStatus,
        { id: referralId, ...(status ? { status } : {}), ...(reason ? { reason } : {}) },
        key,
      ),
    ingest: async (name: string, customerName: string) =>
      ok(
        await call(
          server,
          protocol,
          CheckpointsService.method.ingestCheckpoint,
          { name, externalUserId: id(customerName), environment: "production" },
          keys.public,
        ),
      ),
    customer: async (customerId: string) =>
      ok(
        await call(
          server,
          protocol,
          CustomersService.method.getCustomer,
          { id: customerId },
          keys.secret,
        ),
      ),
    referral: async (referralId: string): Promise<Json> => {
      const page = ok(
        await call(
          server,
          protocol,
          ReferralsService.method.listReferrals,
          { limit: 100 },
          keys.secret,
        ),
      );
      return page.data.find((referral: Json) => referral.id === referralId);
    },
  };
}

const fraudTypes = (referral: Json) => referral.suspectedFrauds.map((f: Json) => f.type);

for (const protocol of protocols) {
  const api = client(protocol);

  test.serial(
    `${protocol}: identify is an idempotent upsert that merges customProperties`,
    async (t) => {
      const first = await api.identify("ada", {
        email: `${protocol}.Ada.Lovelace@Example.com`,
        customProperties: { plan: "pro", seats: 3 },
      });
      // Changing an existing customer takes the secret key (or a userHash, see trust.test.ts).
      const again = await api.identify(
        "ada",
        { name: "Ada L.", customProperties: { seats: null, team: "core" } },
        keys.secret,
      );
      t.is(again.id, first.id);
      t.is(again.referralCode, first.referralCode);
      t.is(again.name, "Ada L.");
      t.is(
        again.email,
        `${protocol}.Ada.Lovelace@Example.com`,
        "email is kept when not given, and as given",
      );
      t.deepEqual(again.customProperties, { plan: "pro", team: "core" });
      const found = await call(
        server,
        protocol,
        CustomersService.method.listCustomers,
        { email: `${protocol}.ada.lovelace@EXAMPLE.com` },
        keys.secret,
      );
      t.deepEqual(
        ok(found).data.map((c: Json) => c.id),
        [first.id],
        "emails match case-insensitively",
      );
    },
  );

  test.serial(
    `${protocol}: create, retry, re-attribute, convert, then refuse re-attribution`,
    async (t) => {
      const first = await api.identify("first-referrer");
      const second = await api.identify("second-referrer");
      const friend = await api.identify("friend");

      const created = ok(await api.refer(first.referralCode, "friend"));
      t.is(created.status, "pending");
      t.is(created.referrerId, first.id);
      t.is(created.refereeId, friend.id);
      t.deepEqual(created.suspectedFrauds, []);
      t.like(created.statusHistory, [
        {
          fromStatus: null,
          toStatus: "pending",
          cause: "created",
          actorId: keyIds.public,
          reason: null,
        },
      ]);

      advance(minute);
      t.deepEqual(
        ok(await api.refer(first.referralCode, "friend")),
        created,
        "a retry changes nothing",
      );

      // Moved by the backend: a public key alone cannot move one (test/services/trust.test.ts).
      const moved = ok(await api.refer(second.referralCode, "friend", keys.secret));
      t.is(moved.id, created.id);
      t.is(moved.referrerId, second.id);
      t.is(moved.status, "pending");
      t.is(moved.statusHistory.length, 1, "the status did not change");
      t.like(await api.customer(friend.id), {
        referredById: second.id,
        referredByReferralId: created.id,
      });

      await api.ingest("signup", "friend");
      t.is((await api.referral(created.id)).status, "pending", "other checkpoints convert nothing");

      await api.ingest("purchase", "friend");
      const accepted = await api.referral(created.id);
      t.is(accepted.status, "accepted");
      t.like(accepted.statusHistory[1], {
        fromStatus: "pending",
        toStatus: "accepted",
        cause: "checkpoint",
      });
      t.regex(accepted.statusHistory[1].actorId, /^chk_/);
      t.like(await api.customer(second.id), {
        visitedReferralsCount: 1,
        convertedReferralsCount: 1,
      });
      t.like(await api.customer(first.id), {
        visitedReferralsCount: 0,
        convertedReferralsCount: 0,
      });

      await api.ingest("purchase", "friend");
      t.deepEqual(await api.referral(created.id), accepted, "the trigger again changes nothing");

      const refused = await api.refer(first.referralCode, "friend");
      t.like(refused, {
        ok: false,
        code: "failed_precondition",
        message: "referral already accepted",
      });
      t.deepEqual(await api.referral(created.id), accepted, "a refused call changes nothing");
      const retried = ok(await api.refer(second.referralCode, "friend"));
      t.is(retried.status, "accepted", "the converting referrer's retry is still idempotent");
    },
  );

  test.serial(
    `${protocol}: the parties must be customers of the campaign's environment`,
    async (t) => {
      const referrer = await api.identify("env-referrer");
      const testReferrer = await api.identify("env-test-referrer", { environment: "test" });
      const referee = await api.identify("env-referee");
      await api.identify("env-other");
      await api.identify("env-test-referee", { environment: "test" });
      const create = (body: Record<string, unknown>) =>
        call(server, protocol, ReferralsService.method.createReferral, body, keys.public);

      t.like(await create({ referralCode: testReferrer.referralCode, refereeId: referee.id }), {
        ok: false,
        code: "not_found",
        message: `referral code ${testReferrer.referralCode} not found: it is a test customer's code, and the campaign is a production campaign`,
      });
      t.like(
        await create({
          referralCode: referrer.referralCode,
          refereeExternalUserId: api.id("env-test-referee"),
        }),
        {
          ok: false,
          code: "not_found",
          message: `referee with external user id ${api.id("env-test-referee")} not found`,
        },
      );
      t.like(
        await create({
          referralCode: referrer.referralCode,
          refereeId: referee.id,
          refereeExternalUserId: api.id("env-other"),
        }),
        { ok: false, code: "invalid_argument" },
      );
      const both = ok(
        await create({
          referralCode: referrer.referralCode,
          refereeId: referee.id,
          refereeExternalUserId: api.id("env-referee"),
        }),
      );
      t.is(both.refereeId, referee.id);
    },
  );

  test.serial(
    `${protocol}: self_referral fires for the same customer and for the same mailbox`,
    async (t) => {
      const solo = await api.identify("solo");
      const self = ok(await api.refer(solo.referralCode, "solo"));
      t.is(self.status, "flagged");
      t.deepEqual(self.suspectedFrauds, [
        {
          type: "self_referral",
          message: "the referee is the referrer",
          action: "flag",
          severity: "high",
          ruleVersion: 1,
          evidence: { sameCustomer: true },
          shadow: false,
        },
      ]);
      t.deepEqual(self.risk, { level: "high", score: 50 });
      t.like(self.statusHistory, [
        { toStatus: "flagged", cause: "created", reason: "self_referral" },
      ]);

      const jane = await api.identify("jane", { email: `${protocol}.jane.doe@gmail.com` });
      await api.identify("jane-again", { email: ` ${protocol}JaneDoe+second@GoogleMail.com` });
      const sameMailbox = ok(await api.refer(jane.referralCode, "jane-again"));
      t.is(sameMailbox.status, "flagged");
      t.like(sameMailbox.suspectedFrauds, [
        { type: "self_referral", message: "the referee has the referrer's email address" },
      ]);

      await api.identify("john", { email: `${protocol}.john@example.com` });
      t.is(
        ok(await api.refer(jane.referralCode, "john")).status,
        "pending",
        "another mailbox is fine",
      );
    },
  );

  test.serial(
    `${protocol}: existing_customer fires for a referee identified over 7 days before`,
    async (t) => {
      const referrer = await api.identify("old-referrer");
      await api.identify("old-friend");
      await api.identify("new-friend-later");
      advance(8 * day);
      await api.identify("new-friend");
      const late = ok(await api.refer(referrer.referralCode, "old-friend"));
      t.is(late.status, "flagged");
      t.like(late.suspectedFrauds, [
        {
          type: "existing_customer",
          message: "the referee was identified 8 days before the referral (limit 7 days)",
          action: "flag",
          severity: "medium",
          evidence: { refereeAgeSeconds: 8 * 24 * 60 * 60 },
        },
      ]);
      t.is(late.suspectedFrauds.length, 1);
      t.is(ok(await api.refer(referrer.referralCode, "new-friend")).status, "pending");
    },
  );

  test.serial(
    `${protocol}: velocity fires once a referrer has 3 referrals in the last hour`,
    async (t) => {
      const busy = await api.identify("busy");
      for (const friend of ["v1", "v2", "v3", "v4", "v5"]) await api.identify(friend);
      for (const friend of ["v1", "v2", "v3"]) {
        t.is(ok(await api.refer(busy.referralCode, friend)).status, "pending", friend);
      }
      const fourth = ok(await api.refer(busy.referralCode, "v4"));
      t.is(fourth.status, "flagged");
      t.like(fourth.suspectedFrauds, [
        {
          type: "velocity",
          message: "the referrer already has at least 3 referrals in the last hour (its limit)",
          evidence: { referrerReferralsLastHour: 3 },
        },
      ]);
      t.is(fourth.suspectedFrauds.length, 1);
      advance(61 * minute);
      await api.identify("v5");
      t.is(
        ok(await api.refer(busy.referralCode, "v5")).status,
        "pending",
        "an hour later the window is clear",
      );
    },
  );

  test.serial(
    `${protocol}: duplicate_referee_email fires when the mailbox was already referred`,
    async (t) => {
      const referrer = await api.identify("dup-referrer");
      const otherReferrer = await api.identify("dup-other-referrer");
      await api.identify("dup-1", { email: `${protocol}.dup@example.com` });
      await api.identify("dup-2", { email: ` ${protocol.toUpperCase()}.Dup+again@example.com` });
      await api.identify("dup-3", { email: `${protocol}.dup.3@example.com` });
      t.is(ok(await api.refer(referrer.referralCode, "dup-1")).status, "pending");
      const second = ok(await api.refer(otherReferrer.referralCode, "dup-2"));
      t.is(second.status, "flagged");
      t.deepEqual(fraudTypes(second), ["duplicate_referee_email"]);
      t.is(ok(await api.refer(referrer.referralCode, "dup-3")).status, "pending");
    },
  );

  test.serial(
    `${protocol}: a flagged referral waits for review when the trigger arrives`,
    async (t) => {
      const referrer = await api.identify("shady", { email: `${protocol}.shady@example.com` });
      await api.identify("shady-twin", { email: `${protocol}.shady+twin@example.com` });
      const flagged = ok(await api.refer(referrer.referralCode, "shady-twin"));
      t.is(flagged.status, "flagged");
      await api.ingest("purchase", "shady-twin");
      t.is((await api.referral(flagged.id)).status, "flagged");
      const accepted = ok(await api.review(flagged.id, "accepted", "verified by support"));
      t.is(accepted.status, "accepted");
      t.is(accepted.environment, "production");
      t.like(accepted.statusHistory[1], {
        fromStatus: "flagged",
        toStatus: "accepted",
        cause: "review",
        actorId: keyIds.secret,
        reason: "verified by support",
      });
    },
  );

  test.serial(
    `${protocol}: review walks the allowed transitions and refuses the others`,
    async (t) => {
      const referrer = await api.identify("reviewed-referrer");
      await api.identify("reviewed-friend");
      const referral = ok(await api.refer(referrer.referralCode, "reviewed-friend"));
      const refuse = async (status: string, from: string) => {
        const before = await api.referral(referral.id);
        t.like(await api.review(referral.id, status), {
          ok: false,
          code: "failed_precondition",
          message: `a ${from} referral cannot become ${status}`,
        });
        t.deepEqual(await api.referral(referral.id), before, "a refused review changes nothing");
      };
      await refuse("pending", "pending");
      t.is(ok(await api.review(referral.id, "flagged", "looks odd")).status, "flagged");
      await refuse("flagged", "flagged");
      t.is(ok(await api.review(referral.id, "pending")).status, "pending");
      const rejected = ok(await api.review(referral.id, "rejected", "duplicate account"));
      t.is(rejected.status, "rejected");
      t.deepEqual(
        rejected.statusHistory.map((c: Json) => [c.fromStatus, c.toStatus, c.cause]),
        [
          [null, "pending", "created"],
          ["pending", "flagged", "review"],
          ["flagged", "pending", "review"],
          ["pending", "rejected", "review"],
        ],
      );
      for (const status of ["pending", "flagged", "accepted", "rejected"])
        await refuse(status, "rejected");
      await api.identify("reviewed-accepted");
      const accepted = ok(await api.refer(referrer.referralCode, "reviewed-accepted"));
      t.is(ok(await api.review(accepted.id, "accepted")).status, "accepted");
      const before = await api.referral(accepted.id);
      t.like(await api.review(accepted.id, "pending"), {
        ok: false,
        code: "failed_precondition",
        message: "an accepted referral cannot become pending",
      });
      t.deepEqual(await api.referral(accepted.id), before, "a refused review changes nothing");

      t.like(await api.review("ref_missing", "accepted"), { ok: false, code: "not_found" });
      t.like(await api.review(referral.id, undefined), { ok: false, code: "invalid_argument" });
      t.like(await api.review(referral.id, "accepted", undefined, keys.public), {
        ok: false,
        code: "permission_denied",
      });
    },
  );

  test.serial(
    `${protocol}: re-attribution re-runs the rules but keeps a reviewer's flag`,
    async (t) => {
      const self = await api.identify("ra-self");
      const honest = await api.identify("ra-honest");
      const flaggedByRule = ok(await api.refer(self.referralCode, "ra-self"));
      t.is(flaggedByRule.status, "flagged");
      // Another referrer for the same referee (from the backend): self_referral no longer fires.
      const cleared = ok(await api.refer(honest.referralCode, "ra-self", keys.secret));
      t.is(cleared.status, "pending");
      t.deepEqual(cleared.suspectedFrauds, []);
      t.like(cleared.statusHistory[1], {
        fromStatus: "flagged",
        toStatus: "pending",
        cause: "reattributed",
      });

      await api.identify("ra-friend");
      const referral = ok(await api.refer(honest.referralCode, "ra-friend"));
      ok(await api.review(referral.id, "flagged", "manual check"));
      const kept = ok(await api.refer(self.referralCode, "ra-friend", keys.secret));
      t.is(kept.referrerId, self.id);
      t.is(kept.status, "flagged", "re-attribution does not clear a human decision");
    },
  );
}

test.serial("a campaign that is not live takes no referrals", async (t) => {
  const applicationId = server.app.demo?.applicationId;
  const campaign = await rest(server, "POST", `/admin/applications/${applicationId}/campaigns`, {
    key: keys.admin,
    body: { name: "Paused", environment: "production", isLive: false },
  });
  t.is(campaign.status, 201, JSON.stringify(campaign.body));
  const api = client("rest");
  const referrer = await api.identify("paused-referrer");
  await api.identify("paused-friend");
  const refused = await rest(server, "POST", "/referrals", {
    key: keys.public,
    body: {
      campaignId: campaign.body.id,
      referralCode: referrer.referralCode,
      refereeExternalUserId: api.id("paused-friend"),
    },
  });
  t.is(refused.status, 400);
  t.like(refused.body, {
    code: "failed_precondition",
    message: `campaign ${campaign.body.id} is not live`,
  });
});
