import test from "ava";
import fc from "fast-check";
import { CurrencySchema } from "../../gen/referral/v1/resources_pb.js";
import { enumWords } from "../../src/contract/options.js";
import {
  type CurrencyName,
  fromMinorUnits,
  maxAmountUnits,
  minorUnitDigits,
  toMinorUnits,
} from "../../src/domain/money.js";

test("every currency of the contract has its minor unit", (t) => {
  t.deepEqual(Object.keys(minorUnitDigits).sort(), [...enumWords(CurrencySchema).words].sort());
});

test("amounts in units convert to exact minor units", (t) => {
  t.deepEqual(toMinorUnits(20, "usd"), { minor: 2000 });
  t.deepEqual(toMinorUnits(10.5, "usd"), { minor: 1050 });
  t.deepEqual(toMinorUnits(0.1, "eur"), { minor: 10 });
  t.deepEqual(toMinorUnits(1.15, "gbp"), { minor: 115 }, "1.15 * 100 is 114.999... in floats");
  t.deepEqual(toMinorUnits(-20.25, "usd"), { minor: -2025 });
  t.deepEqual(toMinorUnits(-0, "usd"), { minor: 0 });
  t.deepEqual(toMinorUnits(maxAmountUnits, "usd"), { minor: maxAmountUnits * 100 });
});

test("amounts finer than the minor unit, too large or not finite are refused", (t) => {
  t.deepEqual(toMinorUnits(10.005, "usd"), { refused: "must have at most 2 decimal places" });
  t.deepEqual(toMinorUnits(0.1 + 0.2, "usd"), { refused: "must have at most 2 decimal places" });
  t.deepEqual(toMinorUnits(1e308, "usd"), {
    refused: "must be at most 1,000,000,000 in absolute value",
  });
  t.deepEqual(toMinorUnits(Number.NaN, "usd"), { refused: "must be a finite number" });
  t.deepEqual(toMinorUnits(Number.POSITIVE_INFINITY, "usd"), {
    refused: "must be a finite number",
  });
});

test("minor units and units convert back and forth without drift, and sums stay exact", (t) => {
  const currency = fc.constantFrom<CurrencyName>("usd", "cad", "eur", "gbp");
  const minor = fc.integer({ min: -maxAmountUnits * 100, max: maxAmountUnits * 100 });
  fc.assert(
    fc.property(minor, currency, (value, code) => {
      const units = fromMinorUnits(value, code);
      // The double prints as the exact decimal, and reads back as the same minor units.
      const text = String(units);
      const [, fraction = ""] = text.split(".");
      return (
        fraction.length <= 2 && (toMinorUnits(units, code) as { minor: number }).minor === value
      );
    }),
  );
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: 10_000_00 }), { maxLength: 200 }), (values) => {
      // Ten thousand cents added as units drift; as minor units they do not.
      const exact = values.reduce((sum, value) => sum + value, 0);
      return (
        (toMinorUnits(fromMinorUnits(exact, "usd"), "usd") as { minor: number }).minor === exact
      );
    }),
  );
  t.pass();
});
