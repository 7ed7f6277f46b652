import test from "ava";
import { type Json, keys, rest, useServer } from "../helpers/server.js";
import { clockPasses } from "../helpers/wait.js";

/**
 * A campaign saved from another campaign's JSON (an export, a template, the
 * admin CLI's file) shares no nested ids with it: a reward's id keys its
 * limits and grants, so two campaigns sharing one would share allowances.
 */

const server = useServer();

const admin = (method: string, path: string, body?: unknown) =>
  rest(server, method, path, { key: keys.admin, body });

const nested = ["rewards", "emails", "campaignPages", "faqs"] as const;

const template: Json = {
  name: "Template",
  environment: "test",
  isLive: true,
  rewards: [
    { type: "payout", party: "referrer", method: "paypal", currency: "usd", payoutAmount: 10 },
  ],
  emails: [
    {
      type: "invitee:reward",
      subjectLine: "Hi",
      message: "m",
      buttonText: "b",
      buttonColor: "#000",
    },
  ],
  campaignPages: [{ path: "/share", isEmpty: false, name: "Share", placementId: "home_banner" }],
  faqs: [{ question: "Q?", answer: "A." }],
};

async function newApplicationId(): Promise<string> {
  const created = await admin("POST", "/admin/applications", { name: "Copies" });
  return created.body.application.id;
}

test("a campaign created from another's JSON gets new ids and times for every nested item", async (t) => {
  const applicationId = await newApplicationId();
  const create = (body: Json) =>
    admin("POST", `/admin/applications/${applicationId}/campaigns`, body);
  const source = await create(template);
  t.is(source.status, 201, JSON.stringify(source.body));
  await clockPasses(source.body.createdAt);

  const copy = await create({ ...source.body, name: "Copy" });
  t.is(copy.status, 201, JSON.stringify(copy.body));
  t.not(copy.body.id, source.body.id);
  for (const field of nested) {
    const [original] = source.body[field];
    const [copied] = copy.body[field];
    t.truthy(copied.id, field);
    t.not(copied.id, original.id, `${field} keeps no id of the source`);
  }
  for (const field of ["rewards", "emails"] as const) {
    const [copied] = copy.body[field];
    t.is(copied.campaignId, copy.body.id, `${field} belongs to the copy`);
    t.true(copied.createdAt > source.body[field][0].createdAt, `${field} has a time of its own`);
  }
});

test("an update keeps the ids of the campaign's own items and replaces any other", async (t) => {
  const applicationId = await newApplicationId();
  const create = (body: Json) =>
    admin("POST", `/admin/applications/${applicationId}/campaigns`, body);
  const first = (await create(template)).body;
  const second = (await create({ ...template, name: "Second" })).body;
  await clockPasses(second.updatedAt);

  const updated = await admin("PATCH", `/admin/campaigns/${second.id}?updateMask=rewards`, {
    rewards: [
      { ...second.rewards[0], payoutAmount: 12 },
      { ...first.rewards[0], party: "referee" },
    ],
  });
  t.is(updated.status, 200, JSON.stringify(updated.body));
  const [kept, foreign] = updated.body.rewards;
  t.like(kept, {
    id: second.rewards[0].id,
    createdAt: second.rewards[0].createdAt,
    payoutAmount: 12,
  });
  t.true(kept.updatedAt > second.rewards[0].updatedAt);
  t.not(foreign.id, first.rewards[0].id, "another campaign's reward id is not taken over");
  t.is(foreign.campaignId, second.id);
});
