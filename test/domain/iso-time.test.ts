import test from "ava";
import fc from "fast-check";
import { isoString } from "../../src/domain/iso-time.js";

/** What the built-in says: its string, or that it refuses. */
function builtIn(ms: number): string {
  try {
    return new Date(ms).toISOString();
  } catch (error) {
    return String(error);
  }
}

function ours(ms: number): string {
  try {
    return isoString(ms);
  } catch (error) {
    return String(error);
  }
}

const dateRange = 8.64e15;

test("isoString is toISOString for any time a Date can hold", (t) => {
  fc.assert(
    fc.property(fc.integer({ min: -dateRange, max: dateRange }), (ms) => {
      t.is(ours(ms), builtIn(ms));
    }),
    { numRuns: 5000 },
  );
});

test("isoString is toISOString around the years it formats itself, and for fractions", (t) => {
  const fastYears = fc.integer({ min: Date.UTC(999, 11, 31), max: Date.UTC(10000, 0, 2) });
  fc.assert(
    fc.property(fc.oneof(fastYears, fc.double({ min: -1e13, max: 1e13 })), (ms) => {
      t.is(ours(ms), builtIn(ms));
    }),
    { numRuns: 5000 },
  );
});

test("isoString at the edges: epoch, leap days, the ends of the range, invalid times", (t) => {
  const edges = [
    0,
    -0,
    -1,
    0.5,
    -0.5,
    Date.UTC(2000, 1, 29, 23, 59, 59, 999),
    Date.UTC(1900, 2, 1),
    Date.UTC(1000, 0, 1) - 1,
    Date.UTC(1000, 0, 1),
    Date.UTC(10000, 0, 1) - 1,
    Date.UTC(10000, 0, 1),
    dateRange,
    dateRange + 1,
    -dateRange - 1,
    Number.NaN,
    Number.POSITIVE_INFINITY,
  ];
  for (const ms of edges) t.is(ours(ms), builtIn(ms), String(ms));
});
