import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { importedSuffix } from "../../src/store/nedb-import.js";
import { openStore } from "../../src/store/store.js";
import { keys, rest, startServer } from "../helpers/server.js";

/**
 * A data directory written by the previous embedded engine (nedb) is
 * imported on the first start: every live record, with its dates, counted;
 * the old files are kept, renamed; nothing is imported twice and a damaged
 * file stops the start instead of losing records.
 */

const at = (iso: string) => ({ $$date: Date.parse(iso) });
const line = (doc: unknown) => `${JSON.stringify(doc)}\n`;

function customerLine(id: string, name: string, extra: Record<string, unknown> = {}) {
  return line({
    _id: id,
    organizationId: "org_old",
    applicationId: "app_old",
    environment: "production",
    externalUserId: id.replace("cus_", "user_"),
    email: null,
    emailNormalized: null,
    emailCanonical: null,
    name,
    referralCode: `CODE${id.slice(-4)}`,
    customProperties: { plan: "pro" },
    createdAt: at("2026-03-01T10:00:00.000Z"),
    updatedAt: at("2026-03-02T10:00:00.000Z"),
    deletedAt: null,
    ...extra,
  });
}

/** Writes a small nedb data directory: a log with updates, a deletion and index lines. */
function writeNedbDirectory(dataDir: string): void {
  writeFileSync(
    join(dataDir, "customers.db"),
    customerLine("cus_0001", "First version") +
      customerLine("cus_0002", "Deleted later") +
      line({ $$indexCreated: { fieldName: "externalUserId", unique: false } }) +
      customerLine("cus_0001", "Second version") +
      line({ $$deleted: true, _id: "cus_0002" }) +
      customerLine("cus_0003", "Third"),
  );
  writeFileSync(
    join(dataDir, "applications.db"),
    line({
      _id: "app_old",
      organizationId: "org_old",
      name: "Old app",
      createdAt: at("2026-01-01T00:00:00.000Z"),
      updatedAt: at("2026-01-01T00:00:00.000Z"),
    }),
  );
}

test("the previous engine's files are imported once, with dates, and kept renamed", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-import-"));
  try {
    writeNedbDirectory(dataDir);
    const store = await openStore({ dataDir });
    try {
      t.deepEqual(store.imported?.counts, { applications: 1, customers: 2 });
      const first = await store.system.customers.findOne({ _id: "cus_0001" });
      t.is(first?.name, "Second version", "the log's last line for an id wins");
      t.true(first?.createdAt instanceof Date);
      t.is(first?.createdAt.toISOString(), "2026-03-01T10:00:00.000Z");
      t.deepEqual(first?.customProperties, { plan: "pro" });
      t.is(
        await store.system.customers.findOne({ _id: "cus_0002" }),
        null,
        "deleted stays deleted",
      );
      t.is(
        await store.system.customers.countDocuments({ applicationId: "app_old", deletedAt: null }),
        2,
      );
    } finally {
      await store.close();
    }
    for (const name of ["customers", "applications"]) {
      t.false(existsSync(join(dataDir, `${name}.db`)));
      t.true(existsSync(join(dataDir, `${name}.db${importedSuffix}`)), "kept, renamed");
    }

    // A crash after the import committed but before the renames: the next
    // start only renames.
    copyFileSync(join(dataDir, `customers.db${importedSuffix}`), join(dataDir, "customers.db"));
    const again = await openStore({ dataDir });
    try {
      t.deepEqual(again.imported?.counts, {}, "nothing imported twice");
      t.is(
        await again.system.customers.countDocuments({ applicationId: "app_old", deletedAt: null }),
        2,
      );
    } finally {
      await again.close();
    }
    t.false(existsSync(join(dataDir, "customers.db")));
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("a damaged line stops the start naming file and line, and imports nothing", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-import-bad-"));
  try {
    writeNedbDirectory(dataDir);
    writeFileSync(
      join(dataDir, "referrals.db"),
      `${line({ _id: "ref_1", applicationId: "app_old" })}{"_id":"ref_2", "applicat\n`,
    );
    const error = await t.throwsAsync(() => openStore({ dataDir }));
    t.regex(error?.message ?? "", /referrals\.db:2 is not a JSON document/);
    t.true(existsSync(join(dataDir, "customers.db")), "no file renamed");
    rmSync(join(dataDir, "referrals.db"));
    const store = await openStore({ dataDir });
    t.deepEqual(store.imported?.counts, { applications: 1, customers: 2 }, "then imported whole");
    await store.close();
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("the service serves imported data after an upgrade", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-import-serve-"));
  writeNedbDirectory(dataDir);
  const server = await startServer({ dataDir });
  try {
    t.is(server.app.demo, undefined, "an imported directory is not provisioned again");
    const listed = await rest(server, "GET", "/admin/applications", { key: keys.admin });
    t.deepEqual(
      listed.body.map((application: { id: string }) => application.id),
      ["app_old"],
    );
  } finally {
    await server.stop();
  }
});
