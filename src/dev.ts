/**
 * `npm run dev`: the service for a developer's machine (see
 * development.ts): its own data directory, the development keys and admin
 * token printed at every start, the admin API on, webhooks to loopback
 * allowed (`npm run admin -- listen`), pretty logs. `npm start` stays the
 * production-shaped start.
 */
// The runtime is checked before anything else is loaded (see runtime-check.ts).
import "./runtime-check.js";

const { developmentEnvironment } = await import("./development.js");
// Workers run this entry too; they inherit what the primary set, and keep it.
Object.assign(process.env, developmentEnvironment(process.env));
await import("./main.js");
