import test from "ava";
import type { Json } from "../helpers/server.js";
import {
  balanceDifferences,
  erasedDataFound,
  exportDifferences,
  leaderboardDifferences,
  limitExcesses,
  lostWrites,
  parseCsv,
  recount,
  type Snapshot,
  statsDifferences,
} from "./invariants.js";

/**
 * The invariant checker's own checks, on records written by hand: each
 * finds the violation it is for, and passes what the documentation allows,
 * so a run of the checker that finds nothing means the service kept it.
 */

const at = (minute: number) => `2026-11-29T10:${String(minute).padStart(2, "0")}:00.000Z`;

function grant(fields: Json): Json {
  return {
    id: `grt_${fields.id}`,
    customerId: "cus_a",
    campaignId: "cmp_1",
    rewardId: "rwd_1",
    kind: "earned",
    status: "approved",
    value: { currency: "usd", amount: 20 },
    reward: { limit: 2, limitUnit: "rewards", limitInterval: "month" },
    limitWindow: "2026-11",
    ignoresLimit: false,
    createdAt: at(1),
    statusHistory: [{ toStatus: fields.status ?? "approved", changedAt: at(1), cause: "earned" }],
    ...fields,
  };
}

function snapshot(fields: Partial<Snapshot>): Snapshot {
  return {
    takenAt: Date.parse(at(30)),
    customers: new Map(),
    referrals: [],
    grants: [],
    balances: new Map(),
    exports: new Map(),
    campaign: { id: "cmp_1" },
    environmentTotals: {},
    campaignTotals: {},
    streamTotals: {},
    leaderboard: [],
    csv: "id,status\r\n",
    texts: [],
    ...fields,
  };
}

const balance = (approved: { amount: number; count: number }) => ({
  balances: [
    {
      currency: "usd",
      pending: { amount: 0, count: 0 },
      approved,
      fulfilled: { amount: 0, count: 0 },
      rejected: { amount: 0, count: 0 },
      voided: { amount: 0, count: 0 },
      expired: { amount: 0, count: 0 },
      capped: { amount: 0, count: 0 },
      clawbacks: {
        pending: { amount: 0, count: 0 },
        fulfilled: { amount: 0, count: 0 },
        rejected: { amount: 0, count: 0 },
      },
    },
  ],
});

test("a balance must equal the sum of the customer's grants, amount and count", (t) => {
  const grants = [
    grant({ id: 1 }),
    grant({ id: 2, kind: "manual", value: { currency: "usd", amount: 20.05 } }),
  ];
  t.deepEqual(
    balanceDifferences(
      snapshot({ grants, balances: new Map([["cus_a", balance({ amount: 40.05, count: 2 })]]) }),
    ),
    [],
  );
  const [difference] = balanceDifferences(
    snapshot({ grants, balances: new Map([["cus_a", balance({ amount: 20, count: 1 })]]) }),
  );
  t.regex(difference ?? "", /usd approved: the balance says 20 \/ 1, its listed grants 40.05 \/ 2/);
});

test("a limit is exceeded by more holders than it allows, not by capped, voided or ignoring ones", (t) => {
  const within = [
    grant({ id: 1 }),
    grant({ id: 2, status: "fulfilled" }),
    grant({ id: 3, status: "capped" }),
    grant({ id: 4, status: "voided" }),
    grant({ id: 5, kind: "manual", ignoresLimit: true }),
    grant({ id: 6, limitWindow: "2026-12" }),
  ];
  t.deepEqual(limitExcesses(snapshot({ grants: within })), []);
  t.is(
    limitExcesses(snapshot({ grants: [...within, grant({ id: 7, status: "pending" })] })).length,
    1,
  );
  // An amount limit sums the (clamped) amounts.
  const amount = { limit: 30, limitUnit: "amount", limitInterval: "month" };
  const clamped = [
    grant({ id: 8, reward: amount }),
    grant({ id: 9, reward: amount, value: { currency: "usd", amount: 10 } }),
  ];
  t.deepEqual(limitExcesses(snapshot({ grants: clamped })), []);
  t.is(
    limitExcesses(
      snapshot({
        grants: [
          ...clamped,
          grant({ id: 10, reward: amount, value: { currency: "usd", amount: 0.01 } }),
        ],
      }),
    ).length,
    1,
  );
});

test("the numbers are recounted from the records' histories", (t) => {
  const referrals = [
    {
      id: "ref_1",
      campaignId: "cmp_1",
      referrerId: "cus_a",
      refereeId: "cus_b",
      status: "accepted",
      statusHistory: [{ toStatus: "pending" }, { toStatus: "pending" }, { toStatus: "accepted" }],
    },
    {
      id: "ref_2",
      campaignId: "cmp_2",
      referrerId: "cus_a",
      refereeId: "cus_c",
      status: "flagged",
      statusHistory: [{ toStatus: "flagged" }],
    },
  ];
  const grants = [
    grant({
      id: 1,
      statusHistory: [{ toStatus: "pending" }, { toStatus: "approved" }, { toStatus: "fulfilled" }],
    }),
    grant({ id: 2, campaignId: null, kind: "manual", statusHistory: [{ toStatus: "approved" }] }),
    grant({ id: 3, kind: "clawback", value: { currency: "usd", amount: -20 } }),
  ];
  const exports = new Map([["cus_b", { checkpoints: [{ id: "chk_1", name: "purchase" }] }]]);
  const customers = new Map(["cus_a", "cus_b", "cus_c"].map((id) => [id, { id }]));
  const records = snapshot({ referrals, grants, exports, customers });
  const campaign = recount(records, "cmp_1");
  t.like(campaign, {
    customersIdentified: 3,
    referrersActive: 1,
    referralsCreated: 1,
    referralsReached: { pending: 1, flagged: 0, accepted: 1, rejected: 0, reversed: 0 },
    checkpoints: { purchase: 1 },
    cohortAccepted: 1,
  });
  t.deepEqual(campaign.committed, new Map([["usd", 2000]]));
  const environment = recount(records, null);
  t.is(environment.referralsCreated, 2);
  t.deepEqual(environment.committed, new Map([["usd", 4000]]));
  const shown = {
    customersIdentified: 3,
    referrersActive: 1,
    referralsCreated: 1,
    referralsReached: { pending: 1, flagged: 0, accepted: 1, rejected: 0, reversed: 0 },
    checkpoints: [{ name: "purchase", count: 1 }],
    conversionRate: { numerator: 1, denominator: 1 },
    cohortConversionRate: { numerator: 1, denominator: 1 },
    kFactor: { numerator: 1, denominator: 3 },
    rewards: [
      {
        currency: "usd",
        pending: { amount: 20, count: 1 },
        approved: { amount: 20, count: 1 },
        fulfilled: { amount: 20, count: 1 },
      },
    ],
    costPerAcquisition: [{ currency: "usd", committedAmount: 20 }],
  };
  t.deepEqual(statsDifferences(shown, campaign, "stats"), []);
  t.deepEqual(
    statsDifferences({ ...shown, referralsCreated: 2, checkpoints: [] }, campaign, "stats"),
    ["stats referralsCreated: 2, recounted 1", "stats checkpoints.purchase: 0, recounted 1"],
  );
});

test("the leaderboard has a row per referrer with acceptances, erased ones left out", (t) => {
  const referral = (id: string, referrerId: string, status: string) => ({
    id,
    campaignId: "cmp_1",
    referrerId,
    refereeId: `cus_of_${id}`,
    status,
  });
  const customers = new Map<string, Json>([
    ["cus_a", { id: "cus_a", name: "Ada", externalUserId: "a" }],
    ["cus_e", { id: "cus_e", name: "", externalUserId: "", deletedAt: at(2) }],
  ]);
  const records = snapshot({
    customers,
    referrals: [
      referral("ref_1", "cus_a", "accepted"),
      referral("ref_2", "cus_a", "reversed"),
      referral("ref_3", "cus_e", "accepted"),
    ],
    leaderboard: [
      {
        rank: 1,
        customerId: "cus_a",
        name: "Ada",
        externalUserId: "a",
        referralsAccepted: 1,
        referralsMade: 2,
      },
    ],
  });
  t.deepEqual(leaderboardDifferences(records, "cmp_1"), []);
  const shown = snapshot({
    ...records,
    leaderboard: [
      ...records.leaderboard,
      {
        rank: 2,
        customerId: "cus_e",
        name: "",
        externalUserId: "",
        referralsAccepted: 1,
        referralsMade: 1,
      },
    ],
  });
  t.deepEqual(leaderboardDifferences(shown, "cmp_1"), [
    "the leaderboard shows cus_e, who has no accepted referral",
  ]);
});

test("erased data is found in any text, in any case", (t) => {
  t.deepEqual(erasedDataFound([{ where: "a read", text: '{"name":"Ada"}' }], ["Zed1x0Q"]), []);
  const [found] = erasedDataFound(
    [{ where: "a replay", text: '{"referredBy":{"email":"ada.zed1x0q@example.com"}}' }],
    ["Zed1x0Q"],
  );
  t.regex(found ?? "", /^a replay holds Zed1x0Q/);
});

test("the export lists the referrals of customers not erased, each with its status", (t) => {
  const customers = new Map<string, Json>([["cus_e", { id: "cus_e", deletedAt: at(2) }]]);
  const referrals = [
    { id: "ref_1", referrerId: "cus_a", refereeId: "cus_b", status: "pending" },
    { id: "ref_2", referrerId: "cus_e", refereeId: "cus_c", status: "accepted" },
  ];
  const csv = 'id,status\r\nref_1,pending\r\n"ref_3",accepted\r\n';
  t.deepEqual(parseCsv('a,"b,""c"""\r\nd,\r\n'), [
    ["a", 'b,"c"'],
    ["d", ""],
  ]);
  t.deepEqual(exportDifferences(snapshot({ customers, referrals, csv })), []);
  t.deepEqual(
    exportDifferences(snapshot({ customers, referrals, csv: `${csv}ref_2,accepted\r\n` })),
    ["the export lists ref_2, whose customer is erased"],
  );
});

test("a record lost or changed across a kill is found; the reward sweep's own moves are not", (t) => {
  const pending = grant({
    id: 1,
    status: "pending",
    statusReason: "goodwill",
    statusHistory: [{ toStatus: "pending", cause: "manual", changedAt: at(1) }],
  });
  // The sweep's move carries no reason of its own.
  const swept = {
    ...pending,
    status: "approved",
    statusReason: null,
    updatedAt: at(3),
    statusHistory: [
      ...pending.statusHistory,
      { toStatus: "approved", cause: "hold_ended", changedAt: at(3) },
    ],
  };
  const before = snapshot({ grants: [pending], referrals: [{ id: "ref_1", status: "accepted" }] });
  t.deepEqual(lostWrites(before, snapshot({ grants: [swept], referrals: before.referrals })), []);
  t.deepEqual(lostWrites(before, snapshot({ grants: [swept] })), ["referral ref_1 is gone"]);
  const reviewed = {
    ...swept,
    statusHistory: [
      ...pending.statusHistory,
      { toStatus: "approved", cause: "review", changedAt: at(3) },
    ],
  };
  t.is(lostWrites(before, snapshot({ grants: [reviewed], referrals: before.referrals })).length, 1);
});
