import test from "ava";
import {
  defaultRetrySchedule,
  isPublicAddress,
  nextAttemptAt,
  shouldDisable,
  webhookUrlProblem,
} from "../../src/domain/webhook-delivery.js";
import {
  endpointWants,
  isWebhookEventType,
  referralStatusEvent,
} from "../../src/domain/webhook-events.js";

const now = new Date("2026-06-01T00:00:00.000Z");

test("the default schedule: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h", (t) => {
  t.deepEqual(
    defaultRetrySchedule.map((ms) => ms / 1000),
    [0, 5, 300, 1800, 7200, 18000, 36000, 36000],
  );
});

test("the next attempt follows the schedule with at most 10% jitter, then stops", (t) => {
  const at = (made: number, random: number) =>
    nextAttemptAt(defaultRetrySchedule, made, now, () => random);
  t.is(at(1, 0.5)?.getTime(), now.getTime() + 5000);
  t.is(at(1, 0)?.getTime(), now.getTime() + 4500);
  t.is(at(1, 1)?.getTime(), now.getTime() + 5500);
  t.is(at(2, 0.5)?.getTime(), now.getTime() + 300_000);
  t.is(at(8, 0.5), null, "eight attempts, then the delivery fails");
});

test("an endpoint is disabled once it has failed continuously for the limit", (t) => {
  const day = 86_400_000;
  t.false(shouldDisable(null, now, 5 * day));
  t.false(shouldDisable(new Date(now.getTime() - 4 * day), now, 5 * day));
  t.true(shouldDisable(new Date(now.getTime() - 5 * day), now, 5 * day));
});

test("only public unicast addresses receive webhooks", (t) => {
  for (const address of ["8.8.8.8", "2606:4700::1111"]) t.true(isPublicAddress(address), address);
  for (const address of [
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "127.0.0.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "::1",
    "fe80::1",
    "fd12::1",
    "::ffff:10.0.0.1",
    "224.0.0.1",
  ]) {
    t.false(isPublicAddress(address), address);
  }
});

test("URL rules: https for production, no private hosts unless allowed", (t) => {
  const strict = { requireHttps: true, allowPrivate: false };
  t.is(webhookUrlProblem("https://hooks.example.com/in", strict), undefined);
  t.regex(webhookUrlProblem("http://hooks.example.com/in", strict) ?? "", /https/);
  t.is(
    webhookUrlProblem("http://hooks.example.com/in", { ...strict, requireHttps: false }),
    undefined,
  );
  t.regex(webhookUrlProblem("https://10.0.0.1/in", strict) ?? "", /private/);
  t.is(webhookUrlProblem("https://10.0.0.1/in", { ...strict, allowPrivate: true }), undefined);
  // A developer's machine (WEBHOOK_ALLOW_PRIVATE) takes production events over http on loopback only.
  const development = { requireHttps: true, allowPrivate: true };
  for (const url of ["http://127.0.0.1:4000/", "http://[::1]:4000/", "http://localhost:4000/"]) {
    t.is(webhookUrlProblem(url, development), undefined, url);
    t.regex(webhookUrlProblem(url, strict) ?? "", /private/, url);
  }
  t.regex(webhookUrlProblem("http://10.0.0.1/in", development) ?? "", /https/);
  t.regex(webhookUrlProblem("http://hooks.example.com/in", development) ?? "", /https/);
  // A name under .localhost may resolve anywhere: no clear text for production there.
  t.regex(webhookUrlProblem("http://hooks.localhost/in", development) ?? "", /https/);
});

test("an endpoint gets the events it asked for, of its environment, while enabled", (t) => {
  const event = { type: "referral.accepted" as const, environment: "test" as const };
  t.true(endpointWants({ enabled: true, eventTypes: [], environment: null }, event));
  t.true(
    endpointWants({ enabled: true, eventTypes: ["referral.accepted"], environment: "test" }, event),
  );
  t.false(endpointWants({ enabled: false, eventTypes: [], environment: null }, event));
  t.false(
    endpointWants({ enabled: true, eventTypes: ["referral.created"], environment: null }, event),
  );
  t.false(endpointWants({ enabled: true, eventTypes: [], environment: "production" }, event));
});

test("event types: the catalogue, and the event of each new referral status", (t) => {
  t.true(isWebhookEventType("checkpoint.ingested"));
  t.false(isWebhookEventType("checkpoint.exploded"));
  t.is(referralStatusEvent("flagged"), "referral.flagged");
  t.is(referralStatusEvent("accepted"), "referral.accepted");
  t.is(referralStatusEvent("rejected"), "referral.rejected");
  t.is(referralStatusEvent("pending"), "referral.updated");
});
