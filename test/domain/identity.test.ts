import { execFileSync } from "node:child_process";
import test from "ava";
import {
  changedCustomerFields,
  generateIdentitySecret,
  isUserHashShaped,
  redactedCustomer,
  userHashMatches,
  userHashOf,
} from "../../src/domain/identity.js";

test("userHash is lowercase hex HMAC-SHA256 of the external user id, keyed by the secret as UTF-8", (t) => {
  // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
  t.is(
    userHashOf("Jefe", "what do ya want for nothing?"),
    "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
  );
  t.is(userHashOf("clé", "ünïcode"), userHashOf("clé", "ünïcode").toLowerCase());
});

test("userHash is what openssl computes, as docs/trust.md shows", (t) => {
  const secret = generateIdentitySecret();
  let openssl: string;
  try {
    openssl = execFileSync("sh", ["-c", 'printf %s "$ID" | openssl dgst -sha256 -hmac "$SECRET"'], {
      env: { ...process.env, ID: "user-42", SECRET: secret },
      encoding: "utf8",
    });
  } catch {
    t.pass("openssl is not installed");
    return;
  }
  t.is(openssl.trim().split(" ").pop(), userHashOf(secret, "user-42"));
});

test("a userHash is 64 hex digits", (t) => {
  t.true(isUserHashShaped("a".repeat(64)));
  t.true(isUserHashShaped("A".repeat(64)));
  t.false(isUserHashShaped("a".repeat(63)));
  t.false(isUserHashShaped("g".repeat(64)));
  t.false(isUserHashShaped(""));
});

test("userHashMatches: any of the secrets, either case; not another user's hash", (t) => {
  const hash = userHashOf("new", "u1");
  t.true(userHashMatches(["new"], "u1", hash));
  t.true(userHashMatches(["old", "new"], "u1", hash.toUpperCase()));
  t.false(userHashMatches(["old"], "u1", hash));
  t.false(userHashMatches([], "u1", hash));
  t.false(userHashMatches(["new"], "u2", hash));
});

test("changedCustomerFields: what an identify would change; what it leaves out changes nothing", (t) => {
  const stored = { name: "Ada", email: "ada@example.com", customProperties: { plan: "pro", n: 1 } };
  t.deepEqual(
    changedCustomerFields(stored, { name: "Ada", email: undefined, customProperties: undefined }),
    [],
  );
  t.deepEqual(
    changedCustomerFields(stored, {
      name: "Ada",
      email: "ada@example.com",
      customProperties: { n: 1 },
    }),
    [],
  );
  t.deepEqual(
    changedCustomerFields(stored, {
      name: "Eve",
      email: "eve@example.com",
      customProperties: { plan: "free" },
    }),
    ["name", "email", "customProperties"],
  );
  t.deepEqual(
    changedCustomerFields(stored, {
      name: "Ada",
      email: undefined,
      customProperties: { other: 1 },
    }),
    ["customProperties"],
    "a new key",
  );
  t.deepEqual(
    changedCustomerFields(stored, {
      name: "Ada",
      email: undefined,
      customProperties: { plan: null },
    }),
    ["customProperties"],
    "a removed key",
  );
  t.deepEqual(
    changedCustomerFields(stored, {
      name: "Ada",
      email: undefined,
      customProperties: { gone: null },
    }),
    [],
    "removing a key that is not there",
  );
  t.deepEqual(
    changedCustomerFields(
      { name: "Ada", email: null, customProperties: { o: { a: 1, b: 2 } } },
      { name: "Ada", email: undefined, customProperties: { o: { b: 2, a: 1 } } },
    ),
    [],
    "key order does not matter",
  );
});

test("redactedCustomer keeps the shape, drops the email and custom properties, narrows referredBy", (t) => {
  const customer: {
    id: string;
    referralCode: string;
    email?: string;
    customProperties?: unknown;
    referredBy?: { id: string; email?: string; name: string; externalUserId: string };
  } = {
    id: "cus_1",
    referralCode: "ABC",
    email: "ada@example.com",
    customProperties: { phone: "1" },
    referredBy: { id: "cus_0", email: "r@example.com", name: "R", externalUserId: "r" },
  };
  t.deepEqual(
    redactedCustomer(customer, (id) => ({ id, email: undefined, name: "", externalUserId: "" })),
    {
      id: "cus_1",
      referralCode: "ABC",
      email: undefined,
      customProperties: undefined,
      referredBy: { id: "cus_0", email: undefined, name: "", externalUserId: "" },
    },
  );
  const unreferred: { id: string; referredBy?: { id: string } } = { id: "c" };
  t.is(redactedCustomer(unreferred, () => undefined).referredBy, undefined);
});
