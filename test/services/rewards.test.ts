import { join } from "node:path";
import test from "ava";
import { embeddedDatabaseFile } from "../../src/store/embedded-file.js";
import { writeBehindTheService } from "../helpers/behind-the-service.js";
import { engineNames } from "../helpers/engines.js";
import { discount, payout } from "../helpers/rewards.js";
import { type Json, keys, rest, startServer, useServer } from "../helpers/server.js";

/**
 * The reward ledger end to end over REST, on a server whose clock is ours:
 * grants earned by conversion and by review, limits in the campaign's
 * calendar (exact under concurrency), holds, approval, expiry, review and
 * fulfilment, reversal with clawbacks, manual grants, balances, the checks
 * campaigns get, and a failure or crash between an acceptance and its grants. The
 * tests share the clock, so they run serially.
 */
const start = new Date("2026-11-10T12:00:00.000Z").getTime();
let elapsed = 0;
const clock = () => new Date(start + elapsed);
const advance = (ms: number) => {
  elapsed += ms;
};
const server = useServer({ clock, env: { REFERRAL_VELOCITY_LIMIT: "100000" } });
const minute = 60_000;
const day = 24 * 60 * minute;

const secret = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  rest(server, method, path, { key: keys.secret, body, ...(headers ? { headers } : {}) });

function expectOk<T = Json>(response: { status: number; body: Json }, status = 200): T {
  if (response.status !== status) {
    throw new Error(`expected ${status}, got ${response.status}: ${JSON.stringify(response.body)}`);
  }
  return response.body;
}

let names = 0;
/** A fresh name for each customer, so the tests share nothing. */
const fresh = (name: string) => `${name}-${++names}`;

/** A live campaign of the demo application, its reward trigger "purchase". */
async function campaignWith(rewards: Json[], fields: Json = {}): Promise<Json> {
  const applicationId = server.app.demo?.applicationId;
  const created = await rest(server, "POST", `/admin/applications/${applicationId}/campaigns`, {
    key: keys.admin,
    body: {
      name: "Rewards",
      environment: "production",
      isLive: true,
      proposedRewardTrigger: "purchase",
      rewards,
      ...fields,
    },
  });
  return expectOk(created, 201);
}

async function identify(name: string): Promise<Json> {
  const response = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: name, name },
  });
  return expectOk(response, 201);
}

async function refer(campaign: Json, referrer: Json, referee: Json): Promise<Json> {
  const response = await rest(server, "POST", "/referrals", {
    key: keys.public,
    body: { campaignId: campaign.id, referralCode: referrer.referralCode, refereeId: referee.id },
  });
  return expectOk(response, 201);
}

async function purchase(referee: Json): Promise<void> {
  const response = await rest(server, "POST", "/checkpoints/ingest", {
    key: keys.secret,
    body: { name: "purchase", externalUserId: referee.externalUserId, environment: "production" },
  });
  expectOk(response, 201);
}

/** A referrer and a referee converted in the campaign; returns both and the referral. */
async function conversion(campaign: Json, referrer?: Json) {
  const by = referrer ?? (await identify(fresh("referrer")));
  const referee = await identify(fresh("referee"));
  const referral = await refer(campaign, by, referee);
  await purchase(referee);
  return { referrer: by, referee, referral };
}

async function grantsOf(query: string): Promise<Json[]> {
  return expectOk(await secret("GET", `/reward-grants?limit=100&${query}`)).data;
}

const balanceOf = async (customer: Json) =>
  expectOk(await secret("GET", `/customers/${customer.id}/reward-balance`));

test.serial("a conversion grants each enabled reward to its party, once", async (t) => {
  const campaign = await campaignWith([
    payout(),
    discount({ discountDurationInMonth: 3 }),
    payout({ payoutAmount: 99, disabled: true }),
  ]);
  const { referrer, referee, referral } = await conversion(campaign);
  const grants = await grantsOf(`referralId=${referral.id}`);
  t.is(grants.length, 2);
  const [toReferrer, toReferee] = ["referrer", "referee"].map((party) =>
    grants.find((grant) => grant.party === party),
  );
  t.like(toReferrer, {
    kind: "earned",
    status: "approved",
    customerId: referrer.id,
    campaignId: campaign.id,
    rewardId: campaign.rewards[0].id,
    value: { type: "payout", method: "paypal", currency: "usd", amount: 20 },
    requestedAmount: 20,
    reward: { id: campaign.rewards[0].id, payoutAmount: 20, approval: "automatic" },
    limitWindow: null,
    ignoresLimit: false,
    fulfillment: null,
    reversalOf: null,
    environment: "production",
  });
  t.regex(toReferrer.id, /^grt_/);
  t.like(toReferrer.statusHistory, [{ fromStatus: null, toStatus: "approved", cause: "earned" }]);
  t.regex(toReferrer.statusHistory[0].actorId, /^chk_/);
  t.like(toReferee, {
    customerId: referee.id,
    value: { type: "discount", amount: null, discountPercentage: 15, discountDurationInMonth: 3 },
    requestedAmount: null,
  });
  // The snapshot stays as it was when earned, whatever the campaign becomes.
  await rest(server, "PATCH", `/admin/campaigns/${campaign.id}?updateMask=rewards`, {
    key: keys.admin,
    body: { rewards: [payout({ payoutAmount: 50 })] },
  });
  t.is(expectOk(await secret("GET", `/reward-grants/${toReferrer.id}`)).reward.payoutAmount, 20);
  // The trigger again converts nothing more.
  await purchase(referee);
  t.is((await grantsOf(`referralId=${referral.id}`)).length, 2);
  // A grant of another application is not found.
  t.is((await rest(server, "GET", "/reward-grants/grt_missing", { key: keys.secret })).status, 404);
});

test.serial(
  "50 conversions at once for one referrer limited to 3 a month: 3 granted, 47 capped",
  async (t) => {
    const campaign = await campaignWith([
      payout({ limit: 3, limitUnit: "rewards", limitInterval: "month" }),
      discount(),
    ]);
    const referrer = await identify(fresh("busy"));
    const referees = await Promise.all(Array.from({ length: 50 }, () => identify(fresh("friend"))));
    for (const referee of referees) await refer(campaign, referrer, referee);
    await Promise.all(referees.map((referee) => purchase(referee)));
    const grants = await grantsOf(`customerId=${referrer.id}`);
    const counts = (status: string) => grants.filter((grant) => grant.status === status).length;
    t.is(grants.length, 50);
    t.is(counts("approved"), 3);
    t.is(counts("capped"), 47);
    const capped = grants.find((grant) => grant.status === "capped");
    t.like(capped, {
      statusReason: "limit_reached",
      value: { amount: 0 },
      requestedAmount: 20,
      limitWindow: "2026-11",
    });
    t.like(capped.statusHistory, [{ toStatus: "capped", reason: "limit_reached" }]);
    // Every referee got its own, unlimited reward.
    const refereeGrants = await grantsOf(`campaignId=${campaign.id}&kind=earned`);
    t.is(refereeGrants.filter((grant) => grant.party === "referee").length, 50);
    t.like((await balanceOf(referrer)).balances, [
      { currency: "usd", approved: { amount: 60, count: 3 }, capped: { amount: 0, count: 47 } },
    ]);
  },
);

test.serial("a voided grant frees its room; a rejected one too", async (t) => {
  const campaign = await campaignWith([
    payout({ limit: 1, limitUnit: "rewards", limitInterval: "lifetime" }),
  ]);
  const first = await conversion(campaign);
  const [granted] = await grantsOf(`referralId=${first.referral.id}`);
  t.is(granted.status, "approved");
  const second = await conversion(campaign, first.referrer);
  t.is((await grantsOf(`referralId=${second.referral.id}`))[0].status, "capped");
  const voided = await secret("PATCH", `/reward-grants/${granted.id}`, {
    status: "voided",
    reason: "duplicate account",
  });
  t.like(expectOk(voided), { status: "voided", statusReason: "duplicate account" });
  const third = await conversion(campaign, first.referrer);
  const [regranted] = await grantsOf(`referralId=${third.referral.id}`);
  t.is(regranted.status, "approved", "the voided grant's room was given back");
  expectOk(await secret("PATCH", `/reward-grants/${regranted.id}`, { status: "rejected" }));
  const fourth = await conversion(campaign, first.referrer);
  t.is((await grantsOf(`referralId=${fourth.referral.id}`))[0].status, "approved");
});

test.serial("an amount limit clamps the grant to what is left, then caps", async (t) => {
  const campaign = await campaignWith([
    payout({ payoutAmount: 20.5, limit: 50, limitUnit: "amount", limitInterval: "year" }),
  ]);
  const { referrer } = await conversion(campaign);
  for (let i = 0; i < 3; i++) {
    // A minute apart, so newest-first lists them in order.
    advance(minute);
    await conversion(campaign, referrer);
  }
  const grants = (await grantsOf(`customerId=${referrer.id}`)).reverse();
  t.deepEqual(
    grants.map((grant) => [grant.status, grant.value.amount, grant.requestedAmount]),
    [
      ["approved", 20.5, 20.5],
      ["approved", 20.5, 20.5],
      ["approved", 9, 20.5],
      ["capped", 0, 20.5],
    ],
  );
  t.is(grants[0].limitWindow, "2026");
  t.like((await balanceOf(referrer)).balances, [{ approved: { amount: 50, count: 3 } }]);
});

test.serial(
  "30 conversions at once under an amount limit of 50 for payouts of 20.50: 50 granted in all, exactly",
  async (t) => {
    const campaign = await campaignWith([
      payout({ payoutAmount: 20.5, limit: 50, limitUnit: "amount", limitInterval: "year" }),
    ]);
    const referrer = await identify(fresh("amounts"));
    const referees = await Promise.all(Array.from({ length: 30 }, () => identify(fresh("pal"))));
    for (const referee of referees) await refer(campaign, referrer, referee);
    await Promise.all(referees.map((referee) => purchase(referee)));
    const grants = await grantsOf(`customerId=${referrer.id}`);
    t.is(grants.length, 30);
    const granted = grants
      .filter((grant) => grant.status === "approved")
      .map((grant) => grant.value.amount)
      .sort((a, b) => b - a);
    t.deepEqual(granted, [20.5, 20.5, 9]);
    t.is(grants.filter((grant) => grant.status === "capped").length, 27);
    t.like((await balanceOf(referrer)).balances, [{ approved: { amount: 50, count: 3 } }]);
  },
);

test.serial("limit windows follow the campaign's time zone", async (t) => {
  const campaign = await campaignWith(
    [payout({ limit: 1, limitUnit: "rewards", limitInterval: "day" })],
    { timeZone: "Asia/Tokyo" },
  );
  t.is(campaign.timeZone, "Asia/Tokyo");
  const saved = elapsed;
  // 23:59 on 30 November in Tokyo (14:59 UTC), then 00:01 and 00:30 on 1 December.
  const at = (iso: string) => {
    elapsed = new Date(iso).getTime() - start;
  };
  try {
    at("2026-11-30T14:59:00Z");
    const { referrer } = await conversion(campaign);
    at("2026-11-30T15:01:00Z");
    await conversion(campaign, referrer);
    at("2026-11-30T15:30:00Z");
    await conversion(campaign, referrer);
    const grants = (await grantsOf(`customerId=${referrer.id}`)).reverse();
    t.deepEqual(
      grants.map((grant) => [grant.limitWindow, grant.status]),
      [
        ["2026-11-30", "approved"],
        ["2026-12-01", "approved"],
        ["2026-12-01", "capped"],
      ],
    );
  } finally {
    elapsed = saved;
  }
});

test.serial(
  "a hold keeps a grant pending; the sweep approves it when the hold ends, then expires it unfulfilled",
  async (t) => {
    const campaign = await campaignWith([
      payout({ holdPeriod: "7d", expiresAfter: "30d" }),
      discount({ holdPeriod: "7d", approval: "manual" }),
    ]);
    const { referral } = await conversion(campaign);
    const grants = async () =>
      Object.fromEntries(
        (await grantsOf(`referralId=${referral.id}`)).map((grant) => [grant.party, grant]),
      );
    let { referrer, referee } = await grants();
    t.like(referrer, { status: "pending", expiresAt: null });
    t.is(Date.parse(referrer.availableAt), Date.parse(referrer.createdAt) + 7 * day);
    t.is(referee.status, "pending");

    await server.app.sweepRewards();
    t.is((await grants()).referrer.status, "pending", "still in its hold");
    advance(7 * day);
    await server.app.sweepRewards();
    ({ referrer, referee } = await grants());
    t.like(referrer, { status: "approved" });
    t.like(referrer.statusHistory[1], {
      fromStatus: "pending",
      toStatus: "approved",
      cause: "hold_ended",
      actorId: "service",
    });
    t.is(Date.parse(referrer.expiresAt), Date.parse(referrer.availableAt) + 30 * day);
    t.is(referee.status, "pending", "manual approval waits for a reviewer");

    advance(30 * day);
    await server.app.sweepRewards();
    ({ referrer } = await grants());
    t.like(referrer, { status: "expired" });
    t.like(referrer.statusHistory[2], { cause: "expiry", actorId: "service" });
    const approved = expectOk(
      await secret("PATCH", `/reward-grants/${referee.id}`, { status: "approved", reason: "ok" }),
    );
    t.like(approved, { status: "approved", statusReason: "ok", expiresAt: null });
    t.is((await server.app.sweepRewards()).approved, 0, "a sweep again changes nothing");
  },
);

test.serial("review moves a grant along its lifecycle and refuses any other move", async (t) => {
  const campaign = await campaignWith([payout({ holdPeriod: "1d" })]);
  const { referral } = await conversion(campaign);
  const [grant] = await grantsOf(`referralId=${referral.id}`);
  const patch = (body: Json) => secret("PATCH", `/reward-grants/${grant.id}`, body);

  const early = await patch({ status: "fulfilled", fulfillment: { reference: "pp-1" } });
  t.is(early.status, 400);
  t.like(early.body, {
    code: "failed_precondition",
    message: "a pending grant cannot become fulfilled",
  });
  t.like((await patch({ status: "approved", fulfillment: { reference: "x" } })).body, {
    code: "invalid_argument",
    message: "fulfillment is only for status fulfilled",
  });
  t.like((await patch({})).body, { code: "invalid_argument", message: "status is required" });
  expectOk(await patch({ status: "approved" }));
  t.like((await patch({ status: "fulfilled" })).body, {
    code: "invalid_argument",
    message: "fulfillment needs a reference or a code to fulfil a grant",
  });
  const fulfilled = expectOk(
    await patch({ status: "fulfilled", fulfillment: { reference: "pp-1", note: "batch 7" } }),
  );
  t.like(fulfilled, {
    status: "fulfilled",
    fulfillment: { reference: "pp-1", code: null, note: "batch 7" },
  });
  t.is(fulfilled.fulfillment.fulfilledAt, clock().toISOString());
  t.like((await patch({ status: "voided" })).body, {
    code: "failed_precondition",
    message: "a fulfilled grant cannot become voided",
  });
  t.is((await secret("PATCH", "/reward-grants/grt_missing", { status: "approved" })).status, 404);
  t.deepEqual(
    fulfilled.statusHistory.map((change: Json) => [change.toStatus, change.cause]),
    [
      ["pending", "earned"],
      ["approved", "review"],
      ["fulfilled", "review"],
    ],
  );
});

test.serial("of concurrent reviews of one grant exactly one applies", async (t) => {
  const campaign = await campaignWith([payout()]);
  const { referral } = await conversion(campaign);
  const [grant] = await grantsOf(`referralId=${referral.id}`);
  const bodies = [
    { status: "fulfilled", fulfillment: { reference: "a" } },
    { status: "voided" },
    { status: "rejected" },
  ];
  const outcomes = await Promise.all(
    Array.from({ length: 12 }, (_, i) =>
      secret("PATCH", `/reward-grants/${grant.id}`, bodies[i % bodies.length]),
    ),
  );
  t.is(outcomes.filter((outcome) => outcome.status === 200).length, 1);
  for (const outcome of outcomes.filter((outcome) => outcome.status !== 200)) {
    t.is(outcome.body.code, "failed_precondition");
  }
  const stored = expectOk(await secret("GET", `/reward-grants/${grant.id}`));
  t.is(stored.statusHistory.length, 2);
});

test.serial(
  "a reversal voids unpaid grants, claws back paid ones, frees room, and happens once",
  async (t) => {
    const campaign = await campaignWith([
      payout({ limit: 1, limitUnit: "rewards", limitInterval: "lifetime" }),
      discount({ discountPercentage: undefined, discountAmount: 5 }),
    ]);
    const { referrer, referee, referral } = await conversion(campaign);
    const byParty = Object.fromEntries(
      (await grantsOf(`referralId=${referral.id}`)).map((grant) => [grant.party, grant]),
    );
    expectOk(
      await secret("PATCH", `/reward-grants/${byParty.referrer.id}`, {
        status: "fulfilled",
        fulfillment: { reference: "pp-9" },
      }),
    );
    const pending = expectOk(
      await secret("PATCH", `/referrals/${referral.id}`, { status: "reversed", reason: "refund" }),
    );
    t.like(pending, { status: "reversed" });
    t.like(pending.statusHistory.at(-1), {
      fromStatus: "accepted",
      toStatus: "reversed",
      cause: "review",
      reason: "refund",
    });
    const after = await grantsOf(`referralId=${referral.id}`);
    const refereeGrant = after.find((grant) => grant.id === byParty.referee.id);
    t.like(refereeGrant, { status: "voided", statusReason: "refund" });
    t.like(refereeGrant.statusHistory.at(-1), { cause: "reversal", toStatus: "voided" });
    const clawback = after.find((grant) => grant.kind === "clawback");
    t.like(clawback, {
      status: "pending",
      customerId: referrer.id,
      reversalOf: byParty.referrer.id,
      value: { amount: -20, currency: "usd" },
      statusReason: "refund",
    });
    t.is(after.find((grant) => grant.id === byParty.referrer.id).status, "fulfilled");

    const again = await secret("PATCH", `/referrals/${referral.id}`, { status: "reversed" });
    t.like(again.body, {
      code: "failed_precondition",
      message: "a reversed referral cannot become reversed",
    });
    const { referral: other } = await conversion(campaign);
    await secret("PATCH", `/referrals/${other.id}`, { status: "reversed" }).then((r) =>
      t.is(r.status, 200),
    );
    const unconverted = await refer(campaign, referrer, await identify(fresh("pending")));
    t.like((await secret("PATCH", `/referrals/${unconverted.id}`, { status: "reversed" })).body, {
      code: "failed_precondition",
      message: "a pending referral cannot become reversed",
    });
    t.is((await grantsOf(`referralId=${referral.id}`)).length, 3, "no second clawback");

    // The operator collects the clawback.
    expectOk(
      await secret("PATCH", `/reward-grants/${clawback.id}`, {
        status: "fulfilled",
        fulfillment: { reference: "recovered-1" },
      }),
    );
    t.like((await balanceOf(referrer)).balances, [
      {
        currency: "usd",
        fulfilled: { amount: 20, count: 1 },
        clawbacks: {
          pending: { amount: 0, count: 0 },
          fulfilled: { amount: -20, count: 1 },
        },
      },
    ]);
    t.like((await balanceOf(referee)).balances, [{ voided: { amount: 5, count: 1 } }]);
  },
);

test.serial(
  "manual grants: a reward's value under its limit, past it, or a value of its own",
  async (t) => {
    const campaign = await campaignWith([
      payout({ limit: 1, limitUnit: "rewards", limitInterval: "month", holdPeriod: "2d" }),
    ]);
    const rewardId = campaign.rewards[0].id;
    const customer = await identify(fresh("support"));
    const grant = (body: Json, headers?: Record<string, string>) =>
      secret("POST", "/reward-grants", { customerId: customer.id, ...body }, headers);

    const first = expectOk(await grant({ rewardId, reason: "apology" }), 201);
    t.like(first, {
      kind: "manual",
      status: "pending",
      rewardId,
      campaignId: campaign.id,
      party: "referrer",
      referralId: null,
      limitWindow: clock().toISOString().slice(0, 7),
      statusReason: "apology",
      value: { amount: 20 },
    });
    t.like(first.statusHistory, [{ cause: "manual", toStatus: "pending", reason: "apology" }]);
    t.regex(first.statusHistory[0].actorId, /^key_/);
    t.is(expectOk(await grant({ rewardId, reason: "again" }), 201).status, "capped");
    const beyond = expectOk(await grant({ rewardId, reason: "VIP", ignoreLimit: true }), 201);
    t.like(beyond, {
      status: "pending",
      ignoresLimit: true,
      limitWindow: null,
      value: { amount: 20 },
    });
    const own = expectOk(
      await grant({
        value: { type: "payout", method: "amazon_gift_card", currency: "eur", amount: 12.34 },
        reason: "goodwill",
      }),
      201,
    );
    t.like(own, {
      status: "approved",
      rewardId: null,
      campaignId: null,
      party: null,
      reward: null,
      value: { type: "payout", currency: "eur", amount: 12.34 },
    });
    // An idempotency key makes a retried create one grant.
    const keyed = { "idempotency-key": `manual-${customer.id}` };
    const once = expectOk(await grant({ value: own.value, reason: "retry" }, keyed), 201);
    const twice = expectOk(await grant({ value: own.value, reason: "retry" }, keyed), 201);
    t.is(twice.id, once.id);
    t.is((await grantsOf(`customerId=${customer.id}`)).length, 5);
    t.like((await balanceOf(customer)).balances, [
      { currency: "eur", approved: { amount: 24.68, count: 2 } },
      { currency: "usd", pending: { amount: 40, count: 2 }, capped: { amount: 0, count: 1 } },
    ]);
  },
);

test.serial(
  "a customer's balance is the sum of its listed grants, earned and manual alike",
  async (t) => {
    const campaign = await campaignWith([
      payout({ limit: 3, limitUnit: "rewards", limitInterval: "month" }),
    ]);
    const rewardId = campaign.rewards[0].id;
    const referrer = await identify(fresh("balanced"));
    // Three earned grants approved, five more capped by the limit.
    for (let i = 0; i < 8; i++) await conversion(campaign, referrer);
    const manual = (body: Json) =>
      secret("POST", "/reward-grants", { customerId: referrer.id, reason: "by hand", ...body });
    t.is(expectOk(await manual({ rewardId }), 201).status, "capped");
    t.is(expectOk(await manual({ rewardId, ignoreLimit: true }), 201).status, "approved");

    const grants = await grantsOf(`customerId=${referrer.id}`);
    const recount = new Map<string, { count: number; cents: number }>();
    for (const grant of grants) {
      const total = recount.get(grant.status) ?? { count: 0, cents: 0 };
      const cents = grant.status === "capped" ? 0 : Math.round(grant.value.amount * 100);
      recount.set(grant.status, { count: total.count + 1, cents: total.cents + cents });
    }
    t.deepEqual(Object.fromEntries(recount), {
      approved: { count: 4, cents: 8000 },
      capped: { count: 6, cents: 0 },
    });
    const [balance] = (await balanceOf(referrer)).balances;
    t.like(balance, {
      currency: "usd",
      approved: { count: 4, amount: 80 },
      capped: { count: 6, amount: 0 },
    });
  },
);

test.serial("a manual grant's own amount is bounded as a campaign reward's is", async (t) => {
  const customer = await identify(fresh("bounded"));
  const grant = (amount: number) =>
    secret("POST", "/reward-grants", {
      customerId: customer.id,
      reason: "r",
      value: { type: "payout", method: "custom", currency: "usd", amount },
    });
  const refused = await grant(999_999_999.99);
  t.is(refused.status, 400);
  t.like(refused.body, {
    code: "invalid_argument",
    message: "value.amount must be at most 1,000,000",
  });
  t.is((await grantsOf(`customerId=${customer.id}`)).length, 0, "nothing was granted");
  t.is(expectOk(await grant(1_000_000), 201).value.amount, 1_000_000);
});

test.serial("manual grants refuse what is not a grant, naming the field", async (t) => {
  const customer = await identify(fresh("refused"));
  const testCustomer = expectOk(
    await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: { externalUserId: fresh("tester"), name: "T", environment: "test" },
    }),
    201,
  );
  const campaign = await campaignWith([payout()]);
  const value = { type: "payout", method: "custom", currency: "usd", amount: 5 };
  const refused = async (body: Json) => {
    const response = await secret("POST", "/reward-grants", body);
    return [response.status, response.body.code, response.body.message];
  };
  const base = { customerId: customer.id, reason: "r" };
  t.deepEqual(await refused({ ...base }), [
    400,
    "invalid_argument",
    "rewardId or value is required",
  ]);
  t.deepEqual(await refused({ ...base, rewardId: campaign.rewards[0].id, value }), [
    400,
    "invalid_argument",
    "value must not be given with rewardId: give one of them",
  ]);
  t.deepEqual(await refused({ ...base, value, ignoreLimit: true }), [
    400,
    "invalid_argument",
    "ignoreLimit applies to a rewardId only",
  ]);
  t.deepEqual(await refused({ customerId: customer.id, value }), [
    400,
    "invalid_argument",
    "reason is required",
  ]);
  t.deepEqual(await refused({ ...base, value: { ...value, amount: 10.005 } }), [
    400,
    "invalid_argument",
    "value.amount must have at most 2 decimal places",
  ]);
  t.deepEqual(await refused({ ...base, value: { ...value, amount: -5 } }), [
    400,
    "invalid_argument",
    "value.amount must be more than 0",
  ]);
  t.deepEqual(await refused({ ...base, value: { ...value, currency: undefined } }), [
    400,
    "invalid_argument",
    "value.currency is required with an amount",
  ]);
  t.deepEqual(
    await refused({
      ...base,
      value: { type: "discount", method: "custom", discountPercentage: 150 },
    }),
    [400, "invalid_argument", "value.discountPercentage must be more than 0 and at most 100"],
  );
  t.deepEqual(await refused({ ...base, customerId: "cus_missing", value }), [
    404,
    "not_found",
    "customer cus_missing not found",
  ]);
  t.deepEqual(
    await refused({ ...base, customerId: testCustomer.id, rewardId: campaign.rewards[0].id }),
    [
      404,
      "not_found",
      `reward ${campaign.rewards[0].id} in a campaign of the test environment not found`,
    ],
  );
  t.is((await grantsOf(`customerId=${customer.id}`)).length, 0, "nothing was granted");
});

test.serial(
  "a customer's balance: 404 for an unknown customer, empty without grants",
  async (t) => {
    const customer = await identify(fresh("nobody"));
    t.deepEqual(await balanceOf(customer), {
      customerId: customer.id,
      environment: "production",
      balances: [],
    });
    const missing = await secret("GET", "/customers/cus_missing/reward-balance");
    t.is(missing.status, 404);
    const byPublicKey = await rest(server, "GET", `/customers/${customer.id}/reward-balance`, {
      key: keys.public,
    });
    t.is(byPublicKey.status, 403);
  },
);

test.serial("campaigns are checked for the terms the ledger relies on", async (t) => {
  const applicationId = server.app.demo?.applicationId;
  const refused = async (rewards: Json[], fields: Json = {}) => {
    const response = await rest(server, "POST", `/admin/applications/${applicationId}/campaigns`, {
      key: keys.admin,
      body: { name: "Checked", environment: "production", rewards, ...fields },
    });
    return [response.status, response.body.message];
  };
  const first = "campaign.rewards[0]";
  t.deepEqual(await refused([payout({ payoutAmount: 10.005 })]), [
    400,
    `${first}.payoutAmount must have at most 2 decimal places`,
  ]);
  t.deepEqual(await refused([payout({ payoutAmount: -500 })]), [
    400,
    `${first}.payoutAmount must not be negative`,
  ]);
  t.deepEqual(await refused([payout({ payoutAmount: 1e308 })]), [
    400,
    `${first}.payoutAmount must be at most 1,000,000`,
  ]);
  t.deepEqual(await refused([payout({ currency: undefined })]), [
    400,
    `${first}.currency is required with payoutAmount`,
  ]);
  t.deepEqual(
    await refused([discount({ limit: 100, limitUnit: "amount", limitInterval: "month" })]),
    [
      400,
      `${first}.limitUnit cannot be amount for a percentage discount: limit the number of rewards`,
    ],
  );
  t.deepEqual(await refused([payout({ limit: 3 })]), [
    400,
    `${first}.limitUnit is required with the other limit fields`,
  ]);
  t.deepEqual(await refused([payout({ limit: -5, limitUnit: "rewards", limitInterval: "day" })]), [
    400,
    `${first}.limit must be a whole number from 1 to 1,000,000 (to grant nothing, set disabled)`,
  ]);
  t.deepEqual(await refused([payout({ holdPeriod: "30 days" })]), [
    400,
    `${first}.holdPeriod must be a whole number and a unit (s, m, h, d, w), such as "30d", at most 3650 days`,
  ]);
  t.deepEqual(await refused([discount({ discountPercentage: 1000 })]), [
    400,
    `${first}.discountPercentage must be more than 0 and at most 100`,
  ]);
  t.deepEqual(await refused([discount({ discountAmount: 5 })]), [
    400,
    `${first}.discountAmount or discountPercentage is required for a discount, not both`,
  ]);
  t.deepEqual(await refused([payout({ party: undefined })]), [
    400,
    `${first}.party is required: referrer or referee`,
  ]);
  t.deepEqual(await refused([], { timeZone: "Mars/Olympus_Mons" }), [
    400,
    "campaign.timeZone must be an IANA time zone such as Europe/Paris",
  ]);
  // Defaults are written out: automatic approval, UTC.
  const saved = await campaignWith([payout()]);
  t.like(saved, { timeZone: "UTC", rewards: [{ approval: "automatic", holdPeriod: null }] });
});

/**
 * On a server of the test's own: a referrer and a referee (`<prefix>-referrer`,
 * `<prefix>-referee`) identified, the referee referred; and a REST call, the secret key's by default.
 */
async function referredOn(target: Parameters<typeof rest>[0], prefix: string) {
  const call = (method: string, path: string, body?: unknown, key = keys.secret) =>
    rest(target, method, path, { key, body });
  const identifyHere = async (name: string) =>
    expectOk(
      await call("POST", "/customers/identify", { externalUserId: name, name }, keys.public),
      201,
    );
  const referrer = await identifyHere(`${prefix}-referrer`);
  const referee = await identifyHere(`${prefix}-referee`);
  const referral = expectOk(
    await call("POST", "/referrals", {
      referralCode: referrer.referralCode,
      refereeId: referee.id,
    }),
    201,
  );
  return { call, referee, referral };
}

test("a write failing at a grant undoes its acceptance: the referral stays pending, and the checkpoint sent again accepts it with both grants", async (t) => {
  // On the embedded engine the acceptance and its grants are one write.
  const failing = await startServer({ clock: () => new Date(start) });
  try {
    const { call, referee, referral } = await referredOn(failing, "failing");
    const purchase = () =>
      call("POST", "/checkpoints/ingest", {
        name: "purchase",
        externalUserId: "failing-referee",
        environment: "production",
      });
    // Any insert of a grant fails, inside the acceptance's write, as a full disk would.
    const file = join(failing.dataDir, embeddedDatabaseFile);
    await writeBehindTheService(
      file,
      `CREATE TRIGGER fail_grants BEFORE INSERT ON "rewardGrants" BEGIN SELECT RAISE(ABORT, 'simulated failure'); END`,
    );
    t.is((await purchase()).status, 500);
    await writeBehindTheService(file, "DROP TRIGGER fail_grants");
    const [after] = expectOk(await call("GET", `/referrals?refereeId=${referee.id}`)).data;
    t.is(after.status, "pending", "the acceptance went with its grants");
    t.is(after.statusHistory.length, 1);
    t.is(expectOk(await call("GET", "/reward-grants")).total, 0);
    t.is((await failing.app.sweepRewards()).made, 0, "nothing planned for the sweep");

    t.is((await purchase()).status, 201);
    const [accepted] = expectOk(await call("GET", `/referrals?refereeId=${referee.id}`)).data;
    t.is(accepted.status, "accepted");
    const made = expectOk(await call("GET", "/reward-grants")).data;
    t.deepEqual(made.map((grant: Json) => grant.party).sort(), ["referee", "referrer"]);
    t.true(made.every((grant: Json) => grant.referralId === referral.id));
    t.deepEqual(accepted.statusHistory.at(-1).toStatus, "accepted");
    // The demo campaign limits both rewards: each grant holds the first slot of its limit.
    const stored = await failing.app.store.system.rewardGrants.find({}).toArray();
    t.deepEqual(
      stored.map((grant) => grant.limitSlot?.split("#")[1]),
      ["1", "1"],
    );
    const [stillAccepted] = expectOk(await call("GET", `/referrals?refereeId=${referee.id}`)).data;
    t.false("grantPlan" in stillAccepted);
    t.is(
      (await failing.app.store.system.referrals.findOne({ _id: referral.id }))?.grantPlanPending,
      undefined,
      "no plan written",
    );
  } finally {
    await failing.stop();
  }
});

// MongoDB writes no documents together: the acceptance plans its grants and the sweep makes what a crash left.
for (const engine of engineNames.filter((name) => name === "mongodb")) {
  test(`${engine}: a crash between an acceptance and its grants loses none: the sweep makes them, once`, async (t) => {
    let now = start;
    const crashing = await startServer({ engine, clock: () => new Date(now) });
    try {
      const { call, referee, referral } = await referredOn(crashing, "crash");
      // The process "dies" after the acceptance is written: every grant write fails.
      const grants = crashing.app.store.system.rewardGrants;
      const insertOne = grants.insertOne;
      grants.insertOne = () => Promise.reject(new Error("simulated crash"));
      const ingest = await call(
        "POST",
        "/checkpoints/ingest",
        { name: "purchase", externalUserId: "crash-referee", environment: "production" },
        keys.secret,
      );
      grants.insertOne = insertOne;
      t.is(ingest.status, 500);
      const accepted = expectOk(await call("GET", `/referrals?refereeId=${referee.id}`)).data[0];
      t.is(accepted.status, "accepted", "the acceptance was written");
      t.is(expectOk(await call("GET", "/reward-grants")).total, 0, "its grants were not");

      // The sweep makes them once the plan is settled.
      t.is((await crashing.app.sweepRewards()).made, 0, "too recent: its call may still run");
      now += 10_000;
      t.is((await crashing.app.sweepRewards()).made, 1);
      t.is((await crashing.app.sweepRewards()).made, 0, "once");
      const made = expectOk(await call("GET", "/reward-grants")).data;
      t.deepEqual(made.map((grant: Json) => grant.party).sort(), ["referee", "referrer"]);
      t.true(made.every((grant: Json) => grant.referralId === referral.id));
      const stored = await crashing.app.store.system.rewardGrants.find({}).toArray();
      t.deepEqual(
        stored.map((grant) => grant.limitSlot?.split("#")[1]),
        ["1", "1"],
      );
    } finally {
      await crashing.stop();
    }
  });
}
