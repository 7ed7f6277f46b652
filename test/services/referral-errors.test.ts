import test from "ava";
import { keys, rest, useServer } from "../helpers/server.js";

const server = useServer();

const post = (path: string, body: unknown) =>
  rest(server, "POST", path, { key: keys.public, body });

test("a referral code of the other environment is not_found saying whose it is", async (t) => {
  const referrer = await post("/customers/identify", {
    externalUserId: "env-referrer",
    name: "Ada",
    environment: "production",
  });
  t.is(referrer.status, 201);
  await post("/customers/identify", {
    externalUserId: "env-referee",
    name: "Grace",
    environment: "test",
  });

  const crossed = await post("/referrals", {
    referralCode: referrer.body.referralCode,
    refereeExternalUserId: "env-referee",
    environment: "test",
  });
  t.is(crossed.status, 404);
  t.is(
    crossed.body.message,
    `referral code ${referrer.body.referralCode} not found: it is a production customer's code, and the campaign is a test campaign`,
  );

  const unknown = await post("/referrals", {
    referralCode: "ZZZZZZZZ",
    refereeExternalUserId: "env-referee",
    environment: "test",
  });
  t.is(unknown.status, 404);
  t.is(unknown.body.message, "referral code ZZZZZZZZ not found");
});
