import type { DescMethod } from "@bufbuild/protobuf";
import test from "ava";
import { call, protocols } from "../helpers/callers.js";
import { contractServices } from "../helpers/contract.js";
import {
  asUsersRunIt,
  type Json,
  keys,
  rest,
  startServer,
  type TestServer,
} from "../helpers/server.js";

/**
 * No code search (issue 41, docs/trust.md): a wrong referral code answers
 * `not_found`, so failed lookups are limited per key and, apart, per client
 * address (RATE_LIMIT_CODE_LOOKUPS); past either, that key's or address's
 * lookups are refused, found or not, until the window ends — on every
 * protocol, and counted once for the whole service with workers.
 */

const methods = (await contractServices()).flatMap((service) => service.methods);
const createReferral = methods.find((m) => m.name === "CreateReferral") as DescMethod;

const limit = 5;

/** A service whose proxy (this machine) says who the client is, so addresses can differ. */
const startLimited = (extra: Json = {}) =>
  startServer({
    env: { RATE_LIMIT_CODE_LOOKUPS: `${limit}/1m`, TRUSTED_PROXIES: "loopback" },
    ...extra,
  });

/** A referrer and a referee with the public key; answers the referrer's code. */
async function parties(server: TestServer, name: string): Promise<string> {
  const referrer = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: `${name}-referrer`, name: "Referrer" },
  });
  await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: `${name}-referee`, name: "Referee" },
  });
  return referrer.body.referralCode;
}

const refer = (referralCode: string, name: string): Json => ({
  referralCode,
  refereeExternalUserId: `${name}-referee`,
});

for (const protocol of protocols) {
  test(`${protocol}: past ${limit} wrong codes a key's lookups are refused, right codes too`, async (t) => {
    const server = await startLimited();
    try {
      const code = await parties(server, "searcher");
      for (let guess = 0; guess < limit; guess++) {
        const outcome = await call(
          server,
          protocol,
          createReferral,
          refer(`GUESS${guess}`, "searcher"),
          keys.public,
        );
        t.like(outcome, { ok: false, code: "not_found" }, `guess ${guess + 1}`);
      }
      const past = await call(
        server,
        protocol,
        createReferral,
        refer("GUESSX", "searcher"),
        keys.public,
      );
      t.like(past, { ok: false, code: "resource_exhausted" });
      t.regex(
        past.ok ? "" : past.message,
        /^too many unknown referral codes from this key or address/,
      );
      // A hit is refused as well: a searcher learns nothing from the refusals.
      const right = await call(
        server,
        protocol,
        createReferral,
        refer(code, "searcher"),
        keys.public,
      );
      t.like(right, { ok: false, code: "resource_exhausted" });
      // The key's other calls are served.
      t.like(
        await call(
          server,
          protocol,
          methods.find((m) => m.name === "ListCampaigns") as DescMethod,
          {},
          keys.public,
        ),
        { ok: true },
      );
    } finally {
      await server.stop();
    }
  });
}

test("the key and the address are limited apart: another address, or another key, still looks up", async (t) => {
  const server = await startLimited();
  try {
    const code = await parties(server, "apart");
    const from = (address: string, key: string, referralCode: string) =>
      rest(server, "POST", "/referrals", {
        key,
        body: refer(referralCode, "apart"),
        headers: { "x-forwarded-for": address },
      });
    // Wrong codes from one address with the public key: the address and the key both use theirs up.
    for (let guess = 0; guess < limit; guess++) {
      t.is((await from("203.0.113.1", keys.public, `WRONG${guess}`)).status, 404);
    }
    const refused = await from("203.0.113.1", keys.public, code);
    t.is(refused.status, 429);
    t.truthy(refused.headers.get("retry-after"));
    t.regex(refused.headers.get("ratelimit-policy") ?? "", /"codeLookups";q=5;w=60/);
    // The same key from another address: the key is over its limit.
    t.is((await from("198.51.100.2", keys.public, code)).status, 429);
    // The secret key from that first address: the address is over its limit.
    t.is((await from("203.0.113.1", keys.secret, code)).status, 429);
    // The secret key from another address: neither is.
    const served = await from("198.51.100.2", keys.secret, code);
    t.is(served.status, 201, JSON.stringify(served.body));
  } finally {
    await server.stop();
  }
});

test("right codes count nothing: a busy app's referrals are never refused", async (t) => {
  const server = await startLimited();
  try {
    const code = await parties(server, "busy");
    for (let call = 0; call < limit * 3; call++) {
      const answer = await rest(server, "POST", "/referrals", {
        key: keys.public,
        body: refer(code, "busy"),
      });
      t.true(answer.status === 201 || answer.status === 200, `call ${call + 1}: ${answer.status}`);
    }
  } finally {
    await server.stop();
  }
});

test("with workers, failed lookups are counted once for the whole service", async (t) => {
  const server = await startLimited(asUsersRunIt);
  try {
    await parties(server, "workers");
    // Concurrent, each on its own connection: the two workers share them.
    const answers = await Promise.all(
      Array.from({ length: limit * 3 }, (_, guess) =>
        rest(server, "POST", "/referrals", {
          key: keys.public,
          body: refer(`MISS${guess}`, "workers"),
          headers: { connection: "close" },
        }),
      ),
    );
    const statuses = answers.map((answer) => answer.status);
    t.is(statuses.filter((status) => status === 404).length, limit, statuses.join(" "));
    t.is(statuses.filter((status) => status === 429).length, limit * 2);
  } finally {
    await server.stop();
  }
});

test("RATE_LIMIT_CODE_LOOKUPS is checked at start", async (t) => {
  const error = await t.throwsAsync(() =>
    startServer({ env: { RATE_LIMIT_CODE_LOOKUPS: "many" } }),
  );
  t.regex(error?.message ?? "", /RATE_LIMIT_CODE_LOOKUPS must be "off" or calls per window/);
});

test("off: wrong codes are answered not_found however many", async (t) => {
  const server = await startServer({ env: { RATE_LIMIT_CODE_LOOKUPS: "off" } });
  try {
    await parties(server, "off");
    for (let guess = 0; guess < 40; guess++) {
      const answer = await rest(server, "POST", "/referrals", {
        key: keys.public,
        body: refer(`NOPE${guess}`, "off"),
      });
      t.is(answer.status, 404);
    }
  } finally {
    await server.stop();
  }
});
