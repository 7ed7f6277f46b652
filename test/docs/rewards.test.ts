import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import test from "ava";
import { limitWindowOf } from "../../src/domain/campaign-time.js";
import { fromMinorUnits, toMinorUnits } from "../../src/domain/money.js";
import { type LimitIntervalName, roomFor } from "../../src/domain/reward-ledger.js";
import { tableAfter } from "../helpers/markdown.js";

/** The worked examples of docs/rewards.md's tables, checked against the ledger's own rules. */
const page = readFileSync(
  join(dirname(fileURLToPath(import.meta.url)), "../../docs/rewards.md"),
  "utf8",
);

test("the limit-window examples are the windows the service computes", (t) => {
  const rows = tableAfter(page, "<!-- checked: limit windows -->");
  t.true(rows.length >= 5);
  for (const row of rows) {
    const at = new Date(row["accepted at (UTC)"] as string);
    const zone = row["campaign time zone"] as string;
    const interval = row.interval as LimitIntervalName;
    t.is(limitWindowOf(at, interval, zone), row.window, JSON.stringify(row));
  }
});

test("the amount-limit example is what the ledger grants", (t) => {
  const rows = tableAfter(page, "<!-- checked: amount limit -->");
  const minor = (units: string) => (toMinorUnits(Number(units), "usd") as { minor: number }).minor;
  let used = 0;
  for (const row of rows) {
    t.is(used, minor(row["used before"] as string), JSON.stringify(row));
    const granted = roomFor("amount", minor("50"), used, minor(row.requested as string));
    t.is(fromMinorUnits(granted, "usd"), Number(row.granted), JSON.stringify(row));
    t.is(granted === 0 ? "capped" : "approved", row.status, JSON.stringify(row));
    used += granted;
  }
});
