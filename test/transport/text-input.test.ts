import type { DescMethod } from "@bufbuild/protobuf";
import test from "ava";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import { call, callJson, type Outcome } from "../helpers/callers.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";

/**
 * One rule for every text a caller sends (src/domain/text.ts), the same on
 * REST, Connect JSON and gRPC: control characters, lone surrogates,
 * invisible-only values and malformed emails are refused naming the field
 * and change nothing; what is kept is NFC and trimmed, and a multi-line
 * text keeps its tabs and newlines.
 */

const server = useServer({ env: { WEBHOOK_ALLOW_PRIVATE: "true" } });

const identify = CustomersService.method.identifyCustomer;
const ingest = CheckpointsService.method.ingestCheckpoint;
const createReferral = ReferralsService.method.createReferral;
const createWebhook = WebhooksService.method.createWebhook;

let referralCode = "";
test.before(async () => {
  const referrer = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: "text-referrer", name: "Referrer" },
  });
  referralCode = referrer.body.referralCode;
});

interface Field {
  readonly method: DescMethod;
  readonly key: string;
  /** A request the field is set into, valid as it is. */
  readonly base: () => Record<string, unknown>;
  readonly field: string;
  readonly required: boolean;
  readonly multiline?: boolean;
}

const fields: Field[] = [
  {
    method: identify,
    key: keys.public,
    base: () => ({ externalUserId: "t", name: "Ada" }),
    field: "externalUserId",
    required: true,
  },
  {
    method: identify,
    key: keys.public,
    base: () => ({ externalUserId: "t", name: "Ada" }),
    field: "name",
    required: true,
  },
  {
    method: identify,
    key: keys.public,
    base: () => ({ externalUserId: "t", name: "Ada" }),
    field: "email",
    required: false,
  },
  {
    method: ingest,
    key: keys.secret,
    base: () => ({ name: "purchase", externalUserId: "text-referrer", environment: "production" }),
    field: "name",
    required: true,
  },
  {
    method: createReferral,
    key: keys.public,
    base: () => ({ referralCode, refereeExternalUserId: "text-referee" }),
    field: "refereeExternalUserId",
    required: false,
  },
  {
    method: createWebhook,
    key: keys.secret,
    base: () => ({ url: "https://example.com/hook" }),
    field: "description",
    required: false,
    multiline: true,
  },
];

/** Values no text field takes, with the words of the refusal. */
const refusedEverywhere: Array<[string, string, RegExp]> = [
  ["NUL", "ext\u0000nul", /must not contain control characters.*U\+0000/],
  ["an escape sequence", "\u001b[31mred", /must not contain control characters.*U\+001B/],
  ["a C1 control", "a\u0085b", /must not contain control characters.*U\+0085/],
  ["DEL", "a\u007fb", /must not contain control characters.*U\+007F/],
  [
    "a right-to-left override",
    "Ada\u202eecilA",
    /must not contain bidirectional embedding, override or isolate controls \(it has U\+202E\)/,
  ],
  ["an isolate", "\u2067Ada", /must not contain bidirectional .* \(it has U\+2067\)/],
];
const refusedOnOneLine: Array<[string, string, RegExp]> = [
  ["a newline", "line\nbreak", /must not contain control characters \(it has U\+000A\)/],
  ["a tab", "a\tb", /must not contain control characters \(it has U\+0009\)/],
];
const blank: Array<[string, string]> = [
  ["zero-width spaces only", "\u200b\u200b"],
  ["a right-to-left mark only", "\u200f"],
  ["a byte-order mark and spaces", "\ufeff  "],
];

/** The call on REST, Connect JSON and (unless told not to) gRPC: `extra` is sent as it is on the JSON protocols. */
async function everywhere(
  method: DescMethod,
  base: Record<string, unknown>,
  extra: Record<string, unknown>,
  key: string,
  options: { grpc?: boolean } = {},
): Promise<Record<string, Outcome>> {
  const outcomes: Record<string, Outcome> = {
    rest: await callJson(server, "rest", method, base, extra, key),
    connect: await callJson(server, "connect", method, base, extra, key),
  };
  if (options.grpc !== false)
    outcomes.grpc = await call(server, "grpc", method, { ...base, ...extra }, key);
  return outcomes;
}

async function customerCount(): Promise<number> {
  return (await rest(server, "GET", "/customers?environment=production", { key: keys.secret })).body
    .total;
}

function refusedAlike(
  t: {
    is(a: unknown, b: unknown, m?: string): void;
    regex(a: string, r: RegExp, m?: string): void;
  },
  outcomes: Record<string, Outcome>,
  field: string,
  words: RegExp,
  what: string,
) {
  const rest = outcomes.rest as Outcome;
  for (const [protocol, outcome] of Object.entries(outcomes)) {
    t.is(outcome.ok, false, `${what} ${protocol}`);
    if (outcome.ok || rest.ok) continue;
    t.is(outcome.code, "invalid_argument", `${what} ${protocol}`);
    t.is(outcome.message, rest.message, `${what}: ${protocol} says what REST says`);
    t.regex(outcome.message, new RegExp(`^${field}\\b`), `${what} ${protocol} names the field`);
    t.regex(outcome.message, words, `${what} ${protocol}`);
  }
}

for (const spec of fields) {
  const title = `${spec.method.name} ${spec.field}`;
  test.serial(
    `${title}: control characters, lone surrogates and blank values are refused alike on REST, Connect and gRPC`,
    async (t) => {
      const before = await customerCount();
      const cases = [...refusedEverywhere, ...(spec.multiline ? [] : refusedOnOneLine)];
      for (const [what, value, words] of cases) {
        const outcomes = await everywhere(
          spec.method,
          spec.base(),
          { [spec.field]: value },
          spec.key,
        );
        refusedAlike(t, outcomes, spec.field, words, what);
      }
      // gRPC's binary encoding cannot carry a lone surrogate at all.
      const surrogate = await everywhere(
        spec.method,
        spec.base(),
        { [spec.field]: "a\ud800b" },
        spec.key,
        { grpc: false },
      );
      refusedAlike(
        t,
        surrogate,
        spec.field,
        /must be well-formed Unicode text \(it has a lone surrogate\)/,
        "a lone surrogate",
      );
      for (const [what, value] of blank) {
        const outcomes = await everywhere(
          spec.method,
          spec.base(),
          { [spec.field]: value },
          spec.key,
        );
        refusedAlike(
          t,
          outcomes,
          spec.field,
          spec.required ? /is required/ : /must not be empty/,
          what,
        );
      }
      t.is(await customerCount(), before, "nothing was created");
    },
  );
}

test.serial("kept text is NFC and trimmed, and the same whichever protocol sent it", async (t) => {
  const decomposed = "Zoe\u0301 "; // "Zoé" with a combining accent, and a trailing space
  const outcomes = await everywhere(
    identify,
    {},
    { externalUserId: " text-nfc ", name: decomposed },
    keys.public,
  );
  for (const [protocol, outcome] of Object.entries(outcomes)) {
    t.true(outcome.ok, protocol);
    if (!outcome.ok) continue;
    t.is(outcome.body.name, "Zo\u00e9", `${protocol}: NFC, trimmed`);
    t.is(outcome.body.externalUserId, "text-nfc", protocol);
  }
  const found = await rest(server, "GET", "/customers?externalUserId=text-nfc", {
    key: keys.secret,
  });
  t.is(found.body.total, 1, "one customer, whichever protocol identified it");
});

test.serial("a multi-line text keeps tabs and newlines, without carriage returns", async (t) => {
  const created = await rest(server, "POST", "/webhooks", {
    key: keys.secret,
    body: { url: "https://example.com/multiline", description: "first line\r\n\tsecond line" },
  });
  t.is(created.status, 201);
  t.is(created.body.webhook.description, "first line\n\tsecond line");
});

test.serial(
  "emails: a well-kept validator and the RFC's limits, refused alike on every protocol",
  async (t) => {
    const before = await customerCount();
    const refused = [
      "<a>@x.com",
      "a@-x-.com",
      "a@b.c",
      `${"l".repeat(65)}@example.com`,
      `a@${"d".repeat(250)}.com`,
      "a\u0000b@x.com",
      "ada@127.0.0.1",
      "two@@example.com",
    ];
    for (const email of refused) {
      const outcomes = await everywhere(
        identify,
        {},
        { externalUserId: "email-check", name: "Ada", email },
        keys.public,
      );
      refusedAlike(t, outcomes, "email", /must|control/, JSON.stringify(email));
    }
    t.is(await customerCount(), before);
    const accepted = [
      "ada@example.com",
      "a.b+tag@sub.example.co.uk",
      "zoé@exämple.de",
      `${"l".repeat(64)}@example.com`,
    ];
    for (const email of accepted) {
      const outcome = await call(
        server,
        "rest",
        identify,
        { externalUserId: `email-${email.length}`, name: "Ada", email },
        keys.public,
      );
      t.true(outcome.ok, email);
    }
  },
);

test.serial(
  "customProperties: keys and string values hold no control characters or lone surrogates",
  async (t) => {
    const cases: Array<[Json, RegExp]> = [
      [
        { "a\u0000b": 1 },
        /^customProperties has the key .* keys must not contain control characters/,
      ],
      [
        { "a\u001bb": 1 },
        /^customProperties has the key .* keys must not contain control characters/,
      ],
      [{ plan: "pro\u0000" }, /^customProperties\.plan must not contain control characters/],
      [
        { nested: { deeper: ["ok", "\u001b[0m"] } },
        /^customProperties\.nested\.deeper\[1\] must not contain control characters/,
      ],
    ];
    for (const [customProperties, words] of cases) {
      const outcomes = await everywhere(
        identify,
        {},
        { externalUserId: "props", name: "Ada", customProperties },
        keys.public,
      );
      for (const [protocol, outcome] of Object.entries(outcomes)) {
        t.false(outcome.ok, protocol);
        if (!outcome.ok)
          t.regex(outcome.message, words, `${protocol} ${JSON.stringify(customProperties)}`);
      }
    }
    const kept = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: {
        externalUserId: "props-ok",
        name: "Ada",
        customProperties: { note: "line one\nline two\tend" },
      },
    });
    t.is(kept.status, 201);
    t.is(kept.body.customProperties.note, "line one\nline two\tend");
  },
);
