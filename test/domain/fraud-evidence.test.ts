import test from "ava";
import {
  type DisposableDomains,
  emailEvidence,
  emailLocalDistance,
  nameSimilarity,
  networkEvidence,
  userAgentFamily,
} from "../../src/domain/fraud-evidence.js";
import { disposableDomains } from "../../src/services/evidence.js";

const listed: DisposableDomains = {
  version: "test",
  has: (domain) => domain === "mailinator.com" || domain === "duck.com",
};
const key = Buffer.alloc(32, 1);
const at = new Date("2026-11-29T10:00:00Z");
const network = (address: string, withKey = key) =>
  networkEvidence({ address, userAgent: null, deviceId: null }, withKey, "connection", at);

test("an email's evidence: canonical mailbox, domain, disposable, masked", (t) => {
  t.deepEqual(emailEvidence("Jane.Doe+x@GoogleMail.com", listed), {
    canonical: "janedoe@gmail.com",
    domain: "gmail.com",
    disposable: false,
    masked: false,
  });
  t.like(emailEvidence("throwaway@mailinator.com", listed), { disposable: true, masked: false });
  t.is(emailEvidence(null, listed), null);
});

test("privacy relays are masked, never disposable, even when a list names them", (t) => {
  for (const email of [
    "x1y2@privaterelay.appleid.com",
    "someone@duck.com",
    "alias@mozmail.com",
    "me@alias.simplelogin.com",
    "me@anonaddy.me",
  ]) {
    t.like(emailEvidence(email, listed), { masked: true, disposable: false }, email);
  }
});

test("name similarity: 1 for the same name however spelt, less as it differs", (t) => {
  t.is(nameSimilarity("José Núñez", "jose nunez"), 1);
  t.is(nameSimilarity("Jane Doe", "Jane Do"), 0.857);
  t.true((nameSimilarity("Jane Doe", "Bartholomew") ?? 1) < 0.3);
  t.is(nameSimilarity("Jane", null), null);
  t.is(nameSimilarity("--", "!!"), null);
});

test("email local distance: edits between local parts of one domain only", (t) => {
  const a = emailEvidence("john.doe1@example.com", listed);
  const b = emailEvidence("john.doe2@example.com", listed);
  const c = emailEvidence("john.doe1@example.org", listed);
  t.is(emailLocalDistance(a, b), 1);
  t.is(emailLocalDistance(a, c), null);
  t.is(emailLocalDistance(a, null), null);
});

test("network facts are keyed hashes: one /24 or /64 shares a network, never an address", (t) => {
  const one = network("203.0.113.7");
  const neighbour = network("203.0.113.200");
  const elsewhere = network("198.51.100.7");
  t.truthy(one);
  t.is(one?.networkHash, neighbour?.networkHash);
  t.not(one?.addressHash, neighbour?.addressHash);
  t.not(one?.networkHash, elsewhere?.networkHash);
  t.is(one?.addressHash.length, 32);
  t.false(JSON.stringify(one).includes("203.0.113"), "the address is never kept");
  t.is(network("::ffff:203.0.113.7")?.addressHash, one?.addressHash, "IPv4-mapped is IPv4");
  t.is(network("2001:db8:1:2::1")?.networkHash, network("2001:db8:1:2:ffff::9")?.networkHash);
  t.not(network("2001:db8:1:2::1")?.networkHash, network("2001:db8:1:3::1")?.networkHash);
  t.not(network("203.0.113.7", Buffer.alloc(32, 2))?.addressHash, one?.addressHash, "per key");
  t.is(network("not an address"), null);
});

test("user-agent family: browser and system, or null", (t) => {
  t.is(
    userAgentFamily(
      "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1",
    ),
    "Safari on iOS",
  );
  t.is(userAgentFamily("curl/8.0"), null);
  t.is(userAgentFamily(null), null);
});

test("the disposable list: the pinned package's, with the operator's additions and removals", (t) => {
  const plain = disposableDomains();
  t.regex(plain.version, /^disposable-email-domains-js@\d+\.\d+\.\d+$/);
  t.true(plain.has("mailinator.com"));
  t.false(plain.has("gmail.com"));
  const changed = disposableDomains(["junk.example"], ["mailinator.com"]);
  t.regex(changed.version, / \+1 -1$/);
  t.true(changed.has("junk.example"));
  t.false(changed.has("mailinator.com"));
});
