import test from "ava";
import { keptWhileMarkStays } from "../../src/store/kept-reads.js";

test("a read is kept while its mark stays, read again once it moved, and never kept without one", async (t) => {
  let mark: number | undefined = 1;
  let reads = 0;
  const read = keptWhileMarkStays(
    () => mark,
    async (key: string) => `${key}:${++reads}`,
    10,
  );
  t.is(await read("a"), "a:1");
  t.is(await read("a"), "a:1");
  t.is(await read("b"), "b:2");
  mark = 2;
  t.is(await read("a"), "a:3");
  t.is(await read("a"), "a:3");
  mark = undefined;
  t.is(await read("a"), "a:4");
  t.is(await read("a"), "a:5");
});

test("a failed read is not kept", async (t) => {
  let fail = true;
  const read = keptWhileMarkStays(
    () => 1,
    async (key: string) => {
      if (fail) throw new Error("unavailable");
      return key;
    },
    10,
  );
  await t.throwsAsync(read("a"), { message: "unavailable" });
  fail = false;
  t.is(await read("a"), "a");
});
