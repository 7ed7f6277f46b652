import test from "ava";
import { engineNames } from "../helpers/engines.js";
import {
  type Json,
  keys,
  rest,
  type ServerOptions,
  type TestServer,
  useServer,
} from "../helpers/server.js";

/**
 * Races on the real service, on each storage engine and with workers: concurrent calls of
 * one kind must leave exactly one record, conversion must happen once, and
 * the derived counters must equal a recount from scratch.
 */

async function identify(server: TestServer, externalUserId: string): Promise<Json> {
  const response = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId, name: externalUserId, email: `${externalUserId}@example.com` },
  });
  if (response.status >= 300) throw new Error(`identify: ${JSON.stringify(response.body)}`);
  return response.body;
}

/** Creates a referral; with `mayBeFinal`, a refusal because it already converted is fine too. */
async function refer(
  server: TestServer,
  referralCode: string,
  referee: string,
  options: { mayBeFinal?: boolean } = {},
): Promise<Json> {
  const response = await rest(server, "POST", "/referrals", {
    key: keys.public,
    body: { referralCode, refereeExternalUserId: referee },
  });
  const refusedAsFinal =
    response.status === 400 && response.body.message === "referral already accepted";
  if (response.status >= 300 && !(options.mayBeFinal && refusedAsFinal)) {
    throw new Error(`refer: ${JSON.stringify(response.body)}`);
  }
  return response.body;
}

async function ingest(server: TestServer, name: string, externalUserId: string): Promise<void> {
  const response = await rest(server, "POST", "/checkpoints/ingest", {
    key: keys.public,
    body: { name, externalUserId, environment: "production" },
  });
  if (response.status >= 300) throw new Error(`ingest: ${JSON.stringify(response.body)}`);
}

/** Every record of a list endpoint, page by page. */
async function listAll(server: TestServer, path: string): Promise<Json[]> {
  const all: Json[] = [];
  for (let offset = 0; ; offset += 100) {
    const separator = path.includes("?") ? "&" : "?";
    const page = await rest(server, "GET", `${path}${separator}limit=100&offset=${offset}`, {
      key: keys.secret,
    });
    all.push(...page.body.data);
    if (all.length >= page.body.total) return all;
  }
}

const times = <T>(count: number, make: (index: number) => Promise<T>) =>
  Promise.all(Array.from({ length: count }, (_, index) => make(index)));

// Each engine, and the embedded one with WORKERS=2: the racing calls land
// on both workers, whose writes meet in the primary's.
const setups: { name: string; options: ServerOptions }[] = [
  ...engineNames.map((engine) => ({ name: engine, options: { engine } })),
  { name: "embedded, 2 workers", options: { workers: 2 } },
];

for (const { name: engine, options } of setups) {
  const server = useServer(options);

  test(`${engine}: 100 concurrent identifies of one user make one customer`, async (t) => {
    const responses = await times(100, () => identify(server, "race-identify"));
    t.is(new Set(responses.map((customer) => customer.id)).size, 1);
    t.is(new Set(responses.map((customer) => customer.referralCode)).size, 1);
    const listed = await rest(server, "GET", "/customers?externalUserId=race-identify", {
      key: keys.secret,
    });
    t.is(listed.body.total, 1);
  });

  test(`${engine}: 100 concurrent creates of one referral make one referral`, async (t) => {
    const referrer = await identify(server, "race-referrer");
    const referee = await identify(server, "race-referee");
    const responses = await times(100, () => refer(server, referrer.referralCode, "race-referee"));
    t.is(new Set(responses.map((referral) => referral.id)).size, 1);
    const listed = await listAll(server, `/referrals?refereeId=${referee.id}`);
    t.is(listed.length, 1);
    t.is(listed[0].statusHistory.length, 1);
  });

  test(`${engine}: 50 concurrent trigger checkpoints accept the referral once`, async (t) => {
    const referrer = await identify(server, "race-converter");
    const referee = await identify(server, "race-buyer");
    const referral = await refer(server, referrer.referralCode, "race-buyer");
    await times(50, () => ingest(server, "purchase", "race-buyer"));
    const [after] = await listAll(server, `/referrals?refereeId=${referee.id}`);
    t.is(after.id, referral.id);
    t.is(after.status, "accepted");
    t.is(after.statusHistory.filter((change: Json) => change.toStatus === "accepted").length, 1);
    const counted = await rest(server, "GET", `/customers/${referrer.id}`, { key: keys.secret });
    t.is(counted.body.convertedReferralsCount, 1);
    t.is(counted.body.visitedReferralsCount, 1);
  });

  test(`${engine}: a mixed run of identifies, referrals and checkpoints leaves exact counters`, async (t) => {
    const users = Array.from({ length: 24 }, (_, index) => `mixed-${index}`);
    const customers = new Map<string, Json>();
    await Promise.all(
      users.map(async (user) => {
        customers.set(user, await identify(server, user));
      }),
    );
    // Each user is referred by one or two others (the second re-attributes),
    // and half of them buy, some before their referral exists; all of it at
    // once, with repeated identifies in between.
    const operations: (() => Promise<unknown>)[] = [];
    users.forEach((user, index) => {
      const code = (offset: number) =>
        customers.get(users[(index + offset) % users.length] as string)?.referralCode;
      // Once a referral converted, re-attributing it is refused, as it should be.
      operations.push(() => refer(server, code(1), user, { mayBeFinal: true }));
      if (index % 3 === 0)
        operations.push(() => refer(server, code(2), user, { mayBeFinal: true }));
      if (index % 2 === 0) operations.push(() => ingest(server, "purchase", user));
      if (index % 4 === 0) operations.push(() => ingest(server, "purchase", user));
      if (index % 5 === 0) operations.push(() => ingest(server, "signup", user));
      operations.push(() => identify(server, user));
    });
    operations.sort(() => Math.random() - 0.5);
    await Promise.all(operations.map((operation) => operation()));

    const referrals = (await listAll(server, "/referrals")).filter((referral) =>
      [...customers.values()].some((customer) => customer.id === referral.refereeId),
    );
    t.is(referrals.length, users.length, "one referral per referee and campaign");
    for (const referral of referrals) {
      const acceptances = referral.statusHistory.filter(
        (change: Json) => change.toStatus === "accepted",
      );
      t.is(acceptances.length, referral.status === "accepted" ? 1 : 0, referral.id);
    }
    for (const customer of customers.values()) {
      const { body } = await rest(server, "GET", `/customers/${customer.id}`, { key: keys.secret });
      const made = referrals.filter((referral) => referral.referrerId === customer.id);
      t.is(body.visitedReferralsCount, made.length, customer.externalUserId);
      t.is(
        body.convertedReferralsCount,
        made.filter((referral) => referral.status === "accepted").length,
        customer.externalUserId,
      );
      const own = referrals.find((referral) => referral.refereeId === customer.id);
      t.is(body.referredById, own?.referrerId ?? null);
      t.is(body.referredByReferralId, own?.id ?? null);
    }
  });
}
