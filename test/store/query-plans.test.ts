import test from "ava";
import type { Document } from "mongodb";
import { ruleCatalogue } from "../../src/domain/fraud-rules.js";
import type { QueryPlan } from "../../src/store/engine/sqlite-database.js";
import { type CollectionName, fieldFanout, indexDeclarations } from "../../src/store/indexes.js";
import { queryPlansOf } from "../../src/store/store.js";
import { startReceiver } from "../helpers/receiver.js";
import { type Json, keys, rest, startServer, type TestServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * Every query the repositories make must be served by an index, on both
 * engines. The test drives every RPC (and the webhook relay and workers)
 * against the embedded engine, then reads SQLite's plan for each distinct
 * query it ran: a full table scan fails it. For each query it also names
 * the declared index MongoDB would use (equality fields first), so a query
 * no declared index serves fails here too, before production sees a
 * collection scan.
 */

/** Queries that read a whole (small, operator-only) collection by design. */
const wholeCollectionReads: { collection: string; why: string }[] = [
  { collection: "applications", why: "ListApplications and the first-start check list them all" },
];

test("every repository query is served by an index on SQLite and on MongoDB", async (t) => {
  const receiver = await startReceiver();
  receiver.respond = () => 204;
  // The embedded engine plans with declared statistics (not sampled ones),
  // so the plans of this small data set are the plans of a large one.
  const server = await startServer({ env: { WEBHOOK_ALLOW_PRIVATE: "true" } });
  try {
    await driveEveryRpc(server, receiver.url);
    await receiver.waitFor((received) => received.length >= 10);
    const plans = queryPlansOf(server.app.store);
    t.true(plans.length > 30, `the workload ran ${plans.length} distinct queries`);

    const report: string[] = [];
    for (const query of plans) {
      const allowed = wholeCollectionReads.some((entry) => entry.collection === query.collection);
      const mongoIndex = bestDeclaredIndex(query);
      report.push(
        `${describeQuery(query)}\n    SQLite: ${query.plan.join("; ")}\n    MongoDB: ${mongoIndex?.name ?? "(whole collection, by design)"}`,
      );
      if (allowed) continue;
      if (query.collection === "stats") {
        // The counters' own tables (MongoStats declares their MongoDB
        // indexes); a scan of json_each or of a VALUES list walks the
        // statement's own list, not a table.
        const scans = query.plan.filter(
          (step) => /^SCAN /.test(step) && !/VIRTUAL TABLE|VALUES CLAUSE/.test(step),
        );
        t.deepEqual(scans, [], `a table scan: ${query.sql}`);
        continue;
      }
      // A bounded count reads its subquery's rows (at most its limit), and
      // several counts in one statement select from no table: neither is a table.
      const scans = query.plan.filter(
        (step) =>
          /^SCAN /.test(step) &&
          !/^SCAN \(subquery-\d+\)$/.test(step) &&
          step !== "SCAN CONSTANT ROW" &&
          !scansPartialIndexOfItsRows(query, step),
      );
      t.deepEqual(scans, [], `a table scan: ${describeQuery(query)}`);
      t.truthy(mongoIndex, `no declared index serves it on MongoDB: ${describeQuery(query)}`);
      // A query on a selective field (an id, a code, an email) needs an index
      // on it, and SQLite must use it, not walk the tenant's list of everything.
      const fields = queryFields(query);
      const selectiveFields = [...fields.equality, ...fields.range].filter(
        (field) => !broadFields.has(field) && field !== "_id",
      );
      if (selectiveFields.length > 0 && !fields.equality.has("_id")) {
        t.true(
          mongoIndex?.selective,
          `no declared index on ${selectiveFields.join(", ")}: ${describeQuery(query)}`,
        );
      }
      if (mongoIndex?.selective) {
        t.true(
          usesSelectiveIndex(query),
          `SQLite walks a broad index where a selective one exists: ${describeQuery(query)} -> ${query.plan.join("; ")}`,
        );
      }
    }
    t.log(`${plans.length} queries\n${report.join("\n")}`);
  } finally {
    await server.stop();
    await receiver.close();
  }
});

function describeQuery(query: QueryPlan): string {
  const filter = Object.fromEntries(
    Object.entries(query.filter).map(([key, value]) => [key, shape(value)]),
  );
  const sort = query.sort ? ` sort ${JSON.stringify(query.sort)}` : "";
  return `${query.collection} ${JSON.stringify(filter)}${sort}`;
}

function shape(value: unknown): unknown {
  if (value === null) return null;
  if (typeof value === "object" && !(value instanceof Date) && !Array.isArray(value)) {
    return Object.fromEntries(Object.keys(value).map((key) => [key, "?"]));
  }
  return "?";
}

/** Fields shared by many documents: an index that binds only these still walks a tenant. */
const broadFields = new Set(
  Object.entries(fieldFanout)
    .filter(([, fanout]) => fanout <= 100)
    .map(([field]) => field),
);

interface QueryFields {
  readonly equality: ReadonlySet<string>;
  readonly range: ReadonlySet<string>;
}

function queryFields(query: QueryPlan): QueryFields {
  const equality = new Set<string>();
  const range = new Set<string>();
  for (const [field, condition] of Object.entries(query.filter)) {
    if (field.startsWith("$")) continue;
    const operators =
      typeof condition === "object" && condition !== null && !(condition instanceof Date)
        ? Object.keys(condition as Document)
        : [];
    if (operators.length === 0 || operators.every((op) => op === "$eq" || op === "$in")) {
      equality.add(field);
    } else if (operators.some((op) => ["$gt", "$gte", "$lt", "$lte"].includes(op))) {
      range.add(field);
    }
  }
  return { equality, range };
}

/** The leading keys of an index that a query's equalities (then one range) bound. */
function boundKeys(key: Record<string, number>, fields: QueryFields): string[] {
  const bound: string[] = [];
  for (const field of Object.keys(key)) {
    if (fields.equality.has(field)) bound.push(field);
    else {
      if (fields.range.has(field)) bound.push(field);
      break;
    }
  }
  return bound;
}

function indexName(key: Record<string, number>): string {
  return Object.entries(key)
    .map(([field, direction]) => `${field}_${direction}`)
    .join("_");
}

/**
 * The declared index MongoDB's planner would pick: the one whose leading
 * keys bind a selective field, else the most keys; `_id` equality is
 * MongoDB's own index. Undefined when no index leads with a filtered field,
 * which on MongoDB is a collection scan.
 */
function bestDeclaredIndex(query: QueryPlan): { name: string; selective: boolean } | undefined {
  const fields = queryFields(query);
  if (fields.equality.has("_id")) return { name: "_id_ (MongoDB's own)", selective: false };
  let best: { name: string; selective: boolean; bound: number } | undefined;
  for (const declaration of indexDeclarations[query.collection as CollectionName] ?? []) {
    const { key } = declaration;
    // A partial index of equalities serves only a query with those
    // equalities, which then bind it as if they led its keys.
    const implied = partialEqualities(declaration.options?.partialFilterExpression);
    if (!implied.every((field) => fields.equality.has(field))) continue;
    const bound = [...implied, ...boundKeys(key, fields)];
    if (bound.length === 0) continue;
    const selective = bound.some((field) => !broadFields.has(field));
    const better =
      !best ||
      (selective && !best.selective) ||
      (selective === best.selective && bound.length > best.bound);
    if (better) {
      best = {
        name: declaration.options?.name ?? indexName(key),
        selective,
        bound: bound.length,
      };
    }
  }
  return best;
}

/** Whether SQLite's plan uses the primary key or an index bound by a selective field. */
function usesSelectiveIndex(query: QueryPlan): boolean {
  const fields = queryFields(query);
  return query.plan.some((step) => {
    if (/USING (COVERING )?INDEX sqlite_autoindex_/.test(step)) return true;
    return (indexDeclarations[query.collection as CollectionName] ?? []).some(
      ({ key, options }) =>
        step.includes(
          `INDEX ${sqliteIndexName(query.collection, options?.name ?? indexName(key))} `,
        ) && boundKeys(key, fields).some((field) => !broadFields.has(field)),
    );
  });
}

/** The embedded engine's name for a declared index (MongoDB's, after the collection's). */
function sqliteIndexName(collection: string, name: string): string {
  return `${collection}_${name}`.replaceAll(/[^A-Za-z0-9_]/g, "_");
}

/**
 * Whether a step walks a partial index whose equalities the query binds:
 * the index holds exactly the rows of those values (the first pending
 * delivery is the first entry of the index of pending ones), not a table.
 */
function scansPartialIndexOfItsRows(query: QueryPlan, step: string): boolean {
  const fields = queryFields(query);
  return (indexDeclarations[query.collection as CollectionName] ?? []).some(({ key, options }) => {
    const implied = partialEqualities(options?.partialFilterExpression);
    return (
      implied.length > 0 &&
      implied.every((field) => fields.equality.has(field)) &&
      step.startsWith(
        `SCAN ${query.collection} USING INDEX ${sqliteIndexName(query.collection, options?.name ?? indexName(key))}`,
      )
    );
  });
}

/** The fields a partial index's filter requires equal to a value (none for other filters). */
function partialEqualities(filter: Document | undefined): string[] {
  if (!filter) return [];
  const entries = Object.entries(filter);
  return entries.every(([, value]) => typeof value === "string" || typeof value === "number")
    ? entries.map(([field]) => field)
    : [];
}

/** Calls every RPC of the contract at least once, most of them with each of their filters. */
async function driveEveryRpc(server: TestServer, receiverUrl: string): Promise<void> {
  const call = async (method: string, path: string, key: string, body?: unknown) => {
    const response = await rest(server, method, path, { key, ...(body ? { body } : {}) });
    if (response.status >= 300) {
      throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(response.body)}`);
    }
    return response.body as Json;
  };
  const sk = keys.secret;
  const webhook = (await call("POST", "/webhooks", sk, { url: receiverUrl, environment: "test" }))
    .webhook;

  const customers: Json[] = [];
  for (const [i, email] of ["a@example.com", "b@example.com", "a+x@example.com"].entries()) {
    customers.push(
      await call("POST", "/customers/identify", keys.public, {
        externalUserId: `user_${i}`,
        name: `User ${i}`,
        email,
        environment: "test",
        customProperties: { i },
      }),
    );
  }
  await call("POST", "/customers/identify", keys.public, {
    externalUserId: "user_0",
    name: "Again",
  });
  // A keyed write and its retry: the idempotency record's claim, completion and replay.
  for (let attempt = 0; attempt < 2; attempt++) {
    const keyed = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      headers: { "idempotency-key": "query-plans-1" },
      body: { externalUserId: "user_keyed", name: "Keyed" },
    });
    if (keyed.status !== 201) throw new Error(`keyed identify: ${keyed.status}`);
  }
  const [referrer, referee, sameMailbox] = customers;
  await call("GET", `/customers/${referrer.id}`, sk);
  for (const query of [
    "",
    "?environment=test",
    "?externalUserId=user_1",
    "?email=b@example.com",
    `?referralCode=${referrer.referralCode}`,
    "?offset=2&limit=1",
  ]) {
    await call("GET", `/customers${query}`, sk);
  }

  const [campaign] = await call("GET", "/campaigns?environment=test", keys.public);
  for (const query of ["", "?isLive=true", "?isDefault=true&sortOrder=asc"]) {
    await call("GET", `/campaigns${query}`, keys.public);
  }
  // The mobile SDKs' routes: the ping writes the campaign by id.
  await call("GET", "/campaigns/live", keys.public);
  await call("GET", "/campaigns/live?environment=test", keys.public);
  await call("POST", `/campaigns/${campaign.id}/ping`, keys.public);
  await call("GET", `/campaign-checkpoints?campaignId=${campaign.id}`, keys.public);
  // Every fraud rule runs (noting, so the flow below is the default one's), with both lists:
  // every count of the evidence is gathered.
  await call("PATCH", `/admin/campaigns/${campaign.id}?updateMask=fraudPolicy`, keys.admin, {
    fraudPolicy: {
      rules: Object.keys(ruleCatalogue).map((type) => ({ type, action: "note" })),
      allow: { emails: ["vip@example.com"], networks: ["203.0.113.0/24"] },
      deny: { domains: ["fraud.example"] },
      review: { deadlineDays: 3, onLapse: "accept" },
    },
  });
  const first = await call("POST", "/referrals", keys.public, {
    campaignId: campaign.id,
    referralCode: referrer.referralCode,
    refereeId: referee.id,
  });
  const second = await call("POST", "/referrals", keys.public, {
    campaignId: campaign.id,
    referralCode: referrer.referralCode,
    refereeExternalUserId: sameMailbox.externalUserId,
  });
  for (const query of [
    "",
    "?status=pending",
    `?campaignId=${campaign.id}`,
    `?referrerId=${referrer.id}`,
    `?refereeId=${referee.id}`,
    "?environment=test",
    "?offset=1&limit=1",
  ]) {
    await call("GET", `/referrals${query}`, sk);
  }
  await call("POST", "/checkpoints/ingest", keys.public, {
    name: "visit",
    externalUserId: referee.externalUserId,
    environment: "test",
  });
  // The app's purchase holds the grants; the backend's confirms them.
  for (const key of [keys.public, sk]) {
    await call("POST", "/checkpoints/ingest", key, {
      name: "purchase",
      externalUserId: referee.externalUserId,
      environment: "test",
    });
  }
  await call("PATCH", `/referrals/${second.id}`, sk, { status: "rejected", reason: "test" });

  // Share links: a person's click (with and without the campaign), its
  // repeat, a bot's fetch, an unknown code.
  const phone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148 Safari/604.1";
  for (const [path, userAgent] of [
    [`/r/${referrer.referralCode}?c=${campaign.id}&ch=sms`, phone],
    [`/r/${referrer.referralCode}`, phone],
    [`/r/${referrer.referralCode}`, "Slackbot-LinkExpanding 1.0"],
    ["/r/NOSUCH23", phone],
  ] as const) {
    await fetch(`${server.baseUrl}${path}`, {
      redirect: "manual",
      headers: { "user-agent": userAgent },
    });
  }

  // The fraud review queue and a backtest over the campaign's referrals.
  await call("GET", "/fraud-reviews", sk);
  await call("GET", `/fraud-reviews?campaignId=${campaign.id}&environment=test`, sk);
  const backtest = await fetch(`${server.baseUrl}/campaigns/${campaign.id}/fraud-policy/test`, {
    method: "POST",
    headers: { authorization: sk, "content-type": "application/json" },
    body: JSON.stringify({
      policy: { rules: [{ type: "velocity" }] },
      from: "2020-01-01T00:00:00Z",
      to: "2100-01-01T00:00:00Z",
    }),
  });
  if (!(await backtest.text()).includes('"result"')) throw new Error("the backtest gave no result");

  // The reward ledger: the purchase earned the demo campaign's two rewards.
  for (const query of [
    "",
    `?customerId=${referrer.id}`,
    `?campaignId=${campaign.id}`,
    `?referralId=${first.id}`,
    "?status=approved",
    "?kind=earned",
    "?environment=test&status=approved",
    "?offset=1&limit=1",
  ]) {
    await call("GET", `/reward-grants${query}`, sk);
  }
  const earned = (await call("GET", `/reward-grants?customerId=${referrer.id}`, sk)).data[0];
  await call("GET", `/reward-grants/${earned.id}`, sk);
  await call("PATCH", `/reward-grants/${earned.id}`, sk, {
    status: "fulfilled",
    fulfillment: { reference: "plans" },
  });
  const [reward] = campaign.rewards;
  const manual = await call("POST", "/reward-grants", sk, {
    customerId: referrer.id,
    rewardId: reward.id,
    reason: "plans",
  });
  await call("PATCH", `/reward-grants/${manual.id}`, sk, { status: "voided" });
  await call("POST", "/reward-grants", sk, {
    customerId: referrer.id,
    value: { type: "payout", method: "custom", currency: "usd", amount: 1 },
    reason: "plans",
  });
  await call("GET", `/customers/${referrer.id}/reward-balance`, sk);
  await call("PATCH", `/referrals/${first.id}`, sk, { status: "reversed", reason: "refund" });
  await server.app.sweepRewards();
  await call("GET", `/customers/${referrer.id}/export?limit=5`, sk);
  // Erasure, once the events about the customers are stored.
  await waitForDeliveries(server, webhook.id);
  await call("DELETE", `/customers/${referrer.id}`, sk);
  await call("GET", "/customers?deleted=true", sk);

  // The insights: counters, leaderboards, the export, and their recount.
  await call("GET", `/campaigns/${campaign.id}/stats?compare=previous_period`, sk);
  await call("GET", `/campaigns/${campaign.id}/stats?interval=hour&timeZone=Asia/Kathmandu`, sk);
  await call("GET", "/stats?environment=test&interval=month", sk);
  for (const query of ["", "?window=month", "?from=2020-01-01&to=2030-01-01"]) {
    await call("GET", `/campaigns/${campaign.id}/leaderboard${query}`, sk);
  }
  await call("PATCH", `/admin/campaigns/${campaign.id}?updateMask=leaderboard`, keys.admin, {
    leaderboard: { public: true },
  });
  await call("GET", `/campaigns/${campaign.id}/leaderboard/public`, keys.public);
  await call("GET", `/referrals/export?environment=test&campaignId=${campaign.id}`, sk);
  await call("GET", "/referrals/export?environment=test&status=accepted&from=2020-01-01", sk);
  await call(
    "POST",
    `/admin/applications/${server.app.demo?.applicationId}/stats/verify`,
    keys.admin,
    {},
  );

  await call("GET", "/webhooks", sk);
  await call("PATCH", `/webhooks/${webhook.id}`, sk, { description: "plans" });
  await call("POST", `/webhooks/${webhook.id}/rotate-secret`, sk);
  const deliveries = await waitForDeliveries(server, webhook.id);
  await call("GET", `/webhooks/${webhook.id}/deliveries?status=succeeded`, sk);
  const redelivered = deliveries[0];
  await call("POST", `/webhooks/${webhook.id}/deliveries/${redelivered.id}/redeliver`, sk);
  const spare = (await call("POST", "/webhooks", sk, { url: receiverUrl, environment: "test" }))
    .webhook;
  await call("DELETE", `/webhooks/${spare.id}`, sk);

  const admin = keys.admin;
  const created = await call("POST", "/admin/applications", admin, { name: "Second" });
  const appId = created.application.id;
  await call("GET", "/admin/applications", admin);
  const apiKey = await call("POST", `/admin/applications/${appId}/api-keys`, admin, {
    kind: "secret",
  });
  await call("GET", `/admin/applications/${appId}/api-keys`, admin);
  await call("POST", `/admin/api-keys/${apiKey.apiKey.id}/revoke`, admin);
  const newCampaign = await call("POST", `/admin/applications/${appId}/campaigns`, admin, {
    name: "Spring",
    environment: "test",
    isLive: true,
  });
  await call("PATCH", `/admin/campaigns/${newCampaign.id}?updateMask=isDefault`, admin, {
    isDefault: true,
  });
  await call("PUT", `/admin/campaigns/${newCampaign.id}/checkpoints`, admin, {
    placements: [{ checkpointName: "onboarding_complete", placementId: "home_banner" }],
  });
  await call("DELETE", `/admin/campaigns/${newCampaign.id}`, admin);
  const leaving = await call("POST", "/customers/identify", created.secretKey, {
    externalUserId: "plans-leaving",
    name: "Leaving",
  });
  await call("DELETE", `/admin/applications/${appId}/customers/${leaving.id}`, admin);
  // The redelivery's claim and record are queries of their own, made after
  // the receiver got it: its attempt is waited for, not a count of deliveries.
  await eventually("the redelivery recorded", async () => {
    const listed = await rest(server, "GET", `/webhooks/${webhook.id}/deliveries?limit=100`, {
      key: sk,
    });
    const again = (listed.body.data as Json[]).find((d) => d.id === redelivered.id);
    return (
      again?.status === "succeeded" &&
      (again.attempts as Json[]).length === (redelivered.attempts as Json[]).length + 1
    );
  });
}

function waitForDeliveries(server: TestServer, webhookId: string): Promise<Json[]> {
  return eventually("a delivery that succeeded", async () => {
    const listed = await rest(server, "GET", `/webhooks/${webhookId}/deliveries?limit=100`, {
      key: keys.secret,
    });
    const done = (listed.body.data as Json[]).filter((d) => d.status === "succeeded");
    return done.length > 0 ? done : undefined;
  });
}
