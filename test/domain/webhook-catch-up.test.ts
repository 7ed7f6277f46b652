import test from "ava";
import {
  type CatchUpPace,
  catchUpBatch,
  catchUpPace,
  planCatchUp,
} from "../../src/domain/webhook-delivery.js";

/** How an endpoint that answers again catches up: `planCatchUp`'s slots. */

const now = new Date("2026-01-02T03:04:05.000Z");
const at = (ms: number) => new Date(now.getTime() + ms);
const offsets = (slots: (Date | null)[]) =>
  slots.map((slot) => (slot ? slot.getTime() - now.getTime() : null));
const pace: CatchUpPace = { perSecond: 10, aheadMs: 300 };
const waitingFiveMinutes = { nextAttemptAt: at(300_000) };

test("the default pace is 50 a second, 5 s ahead", (t) => {
  t.deepEqual(catchUpPace, { perSecond: 50, aheadMs: 5_000 });
  t.is(catchUpBatch(catchUpPace), 250);
});

test("oldest first from now, 1/perSecond apart, up to the horizon", (t) => {
  const waiting = Array.from({ length: 5 }, () => waitingFiveMinutes);
  t.deepEqual(offsets(planCatchUp(waiting, now, pace)), [0, 100, 200, null, null]);
});

test("slots already given are kept, and new ones follow the last", (t) => {
  const waiting = [
    { nextAttemptAt: at(50), broughtForwardTo: at(50) },
    waitingFiveMinutes,
    waitingFiveMinutes,
  ];
  t.deepEqual(offsets(planCatchUp(waiting, now, pace)), [null, 150, 250]);
});

test("one brought forward before and failed again is left to its schedule", (t) => {
  const waiting = [
    { nextAttemptAt: at(1_800_000), broughtForwardTo: at(-500) },
    waitingFiveMinutes,
  ];
  t.deepEqual(offsets(planCatchUp(waiting, now, pace)), [null, 0]);
});

test("one whose scheduled retry comes first is left to it, taking no slot", (t) => {
  const waiting = [waitingFiveMinutes, { nextAttemptAt: at(60) }, waitingFiveMinutes];
  t.deepEqual(offsets(planCatchUp(waiting, now, pace)), [0, null, 100]);
});

test("a full window gives out nothing", (t) => {
  const waiting = [{ nextAttemptAt: at(250), broughtForwardTo: at(250) }, waitingFiveMinutes];
  t.deepEqual(offsets(planCatchUp(waiting, now, pace)), [null, null]);
});
