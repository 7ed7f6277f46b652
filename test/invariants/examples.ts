import {
  Burst,
  Convert,
  CreateKey,
  EditCampaign,
  Erase,
  GrantManually,
  Identify,
  Refer,
  RevokeKey,
  type Step,
  WrongKeys,
} from "./commands.js";

/**
 * Runs every check makes before its random ones: the sequences that found
 * the defects of issue 39, so each is looked for in every check however
 * the random runs go. Each is a run like any other (an application of its
 * own, every invariant after each step). Picks resolve as in a random run:
 * `Refer(0, 0)` with customers 0 and 1 live is 0 referring 1.
 */
export const exampleRuns: readonly { readonly name: string; readonly steps: () => Step[] }[] = [
  {
    name: "manual grants of a reward beside earned ones",
    steps: () => [
      new Identify(0, "free", false, "rest"),
      new Identify(1, "free", false, "rest"),
      new Refer(0, 0, "rest"),
      new Convert([0], true, true, "rest"),
      new GrantManually(0, "reward", 2_000, "rest"),
      new GrantManually(0, "reward ignoring its limit", 2_000, "grpc"),
    ],
  },
  {
    name: "an identify replayed after its referrer's erasure",
    steps: () => [
      new Identify(0, "free", false, "rest"),
      new Identify(1, "free", false, "rest"),
      new Refer(0, 0, "rest"),
      new Identify(1, "pro", false, "idempotent"),
      // An even pick erases a referrer: customer 0.
      new Erase(0, "rest"),
    ],
  },
  {
    name: "a referee re-attributed before its first referrer's erasure",
    steps: () => [
      new Identify(0, "free", false, "rest"),
      new Identify(1, "free", false, "rest"),
      new Identify(2, "free", false, "rest"),
      new Refer(0, 0, "rest"),
      new Identify(1, "pro", true, "rest"),
      new Refer(2, 1, "rest"),
      // An odd pick erases any live customer: 1 over 2, the first, customer 0.
      new Erase(1, "connect"),
    ],
  },
  {
    name: "bursts of calls with one key, far below its limit",
    steps: () => [
      new Identify(0, "free", false, "rest"),
      new Burst(60, false, false),
      new Burst(60, true, true),
    ],
  },
  {
    name: "a few calls at once with a made-up key",
    steps: () => [new WrongKeys(6)],
  },
  {
    name: "a one-word name on the public leaderboard",
    steps: () => [
      new Identify(0, "free", false, "rest"),
      // The last customer's name is its email, one word.
      new Identify(7, "free", false, "rest"),
      new EditCampaign({ kind: "public leaderboard" }),
      new Refer(1, 0, "rest"),
      new Convert([0], true, false, "rest"),
    ],
  },
  {
    name: "an app's conversion held, then confirmed by the backend",
    steps: () => [
      new Identify(0, "free", false, "rest"),
      new Identify(1, "free", false, "rest"),
      new Refer(0, 0, "rest"),
      new Convert([0], true, false, "grpc"),
      new Convert([0], true, true, "connect"),
    ],
  },
  {
    name: "a key revoked while a stream it opened is open",
    steps: () => [new CreateKey("secret"), new RevokeKey(0)],
  },
];
