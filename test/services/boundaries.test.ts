import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import { fileURLToPath } from "node:url";
import test from "ava";

// The layout's rules, checked on the sources: where the tenant comes from, that
// each cross-cutting step is written once, and who reaches the store's engines.

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const src = join(root, "src");

function sourcesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourcesUnder(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

const sources = new Map(
  sourcesUnder(src).map((path) => [relative(root, path), readFileSync(path, "utf8")]),
);

/** The files a source imports by a relative path (static, re-exported or dynamic), from the root. */
function importsOf(path: string, text: string): string[] {
  return [...text.matchAll(/(?:from |import\(|import )"(\.[^"]+)\.js"/g)].map((match) =>
    normalize(join(dirname(path), `${match[1]}.ts`)),
  );
}

/** The files that contain a pattern (comments included: a rule is about code and prose alike). */
function filesMatching(pattern: RegExp): string[] {
  return [...sources].filter(([, text]) => pattern.test(text)).map(([path]) => path);
}

test("services and delivery reach unscoped collections only through store.system, in the system paths", (t) => {
  const systemPaths = [
    "src/delivery/dispatcher.ts",
    "src/delivery/relay.ts",
    "src/delivery/runtime.ts",
    "src/services/admin.ts",
    "src/services/authentication.ts",
    // A share link's tenant is found from its code or campaign, as a key's is.
    "src/services/links.ts",
    "src/services/provisioning.ts",
    "src/services/reward-sweep.ts",
  ];
  const layers = /^src\/(services|delivery)\//;
  const usingSystem = filesMatching(/\.system\b/).filter((path) => layers.test(path));
  t.deepEqual(usingSystem.sort(), systemPaths, "store.system only where the path is a system one");
  for (const [path, text] of sources) {
    if (!layers.test(path)) continue;
    t.notRegex(text, /\bopenStore\b/, `${path} opens a store`);
    if (systemPaths.includes(path)) continue;
    t.notRegex(text, /\bCollections\b/, `${path} names the unscoped collections type`);
    t.notRegex(text, /\bStoreCollection\b/, `${path} names a raw collection`);
  }
});

test("tenant services get their repositories from the caller, not the store", (t) => {
  const tenantServices = [
    "src/services/campaigns.ts",
    "src/services/checkpoints.ts",
    "src/services/customers.ts",
    "src/services/referral-lifecycle.ts",
    "src/services/referrals.ts",
    "src/services/reward-ledger.ts",
    "src/services/rewards.ts",
    "src/services/webhooks.ts",
  ];
  for (const path of tenantServices) {
    const text = sources.get(path) ?? "";
    t.notRegex(text, /\bStore\b/, `${path} takes the whole store`);
    t.regex(text, /callerOf\(context\)|TenantStore|Caller\b/, `${path} uses the caller's store`);
  }
});

test("one place authenticates, one maps errors, one writes REST error bodies", (t) => {
  t.deepEqual(filesMatching(/\.authenticate\(/), ["src/transport/interceptors.ts"]);
  t.deepEqual(filesMatching(/export function toConnectError/), ["src/transport/errors.ts"]);
  t.deepEqual(filesMatching(/restErrorBody\(/).sort(), [
    "src/transport/errors.ts",
    "src/transport/http-app.ts",
  ]);
  t.deepEqual(filesMatching(/codeToHttpStatus/), ["src/transport/errors.ts"]);
});

test("no import cycles between source files", (t) => {
  const imports = new Map<string, string[]>();
  for (const [path, text] of sources) {
    const targets = [...text.matchAll(/from "(\.[^"]+)\.js"/g)].map((match) =>
      normalize(join(dirname(path), `${match[1]}.ts`)),
    );
    imports.set(
      path,
      targets.filter((target) => sources.has(target)),
    );
  }
  const cycles: string[] = [];
  const state = new Map<string, "open" | "done">();
  const visit = (path: string, trail: string[]) => {
    if (state.get(path) === "done") return;
    if (state.get(path) === "open") {
      cycles.push([...trail.slice(trail.indexOf(path)), path].join(" -> "));
      return;
    }
    state.set(path, "open");
    for (const target of imports.get(path) ?? []) visit(target, [...trail, path]);
    state.set(path, "done");
  };
  for (const path of sources.keys()) visit(path, []);
  t.deepEqual(cycles, []);
});

test("the store's engines are reached only through the store: store.ts wires them, the rest speaks to collection.ts", (t) => {
  const engine = "src/store/engine/";
  const scripts = join(root, "scripts");
  const outsideSources = [
    ...sources,
    ...sourcesUnder(scripts).map((path): [string, string] => [
      relative(root, path),
      readFileSync(path, "utf8"),
    ]),
  ];
  const importers = new Map<string, string[]>();
  for (const [path, text] of outsideSources) {
    if (path.startsWith(engine)) continue;
    const reached = importsOf(path, text).filter((target) => target.startsWith(engine));
    if (reached.length > 0) importers.set(path, reached);
  }
  t.true(importers.has("src/store/store.ts"), "the imports are read: store.ts opens the engines");
  const outsideStore = [...importers].filter(([path]) => !path.startsWith("src/store/"));
  t.deepEqual(outsideStore, [], "nothing outside src/store/ imports an engine's internals");
  t.deepEqual(
    [...importers.keys()],
    ["src/store/store.ts"],
    "repositories use an engine through collection.ts alone; store.ts alone picks and opens one",
  );
});

test("the domain imports nothing of the project outside src/domain", (t) => {
  const outside: string[] = [];
  for (const [path, text] of sources) {
    if (!path.startsWith("src/domain/")) continue;
    for (const [, specifier] of text.matchAll(/(?:from|import)\s*\(?\s*"([^"]+)"/g)) {
      if (!specifier?.startsWith(".")) continue;
      const target = normalize(join(dirname(path), specifier));
      if (!target.startsWith("src/domain/")) outside.push(`${path} -> ${specifier}`);
    }
  }
  t.deepEqual(outside, []);
});
