// Imported first by the entry points, before anything else is loaded: the
// embedded store is node:sqlite, which older Node versions do not have (and
// an ESM import of it would fail with a less helpful message).
const requiredMajor = 24;
const major = Number(process.versions.node.split(".")[0]);
if (major < requiredMajor) {
  process.stderr.write(
    `referral-service needs Node.js ${requiredMajor} or newer; this is ${process.version}.\n`,
  );
  process.exit(1);
}
