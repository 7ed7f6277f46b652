import type { EnvironmentName } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import { findEnabledWebhooks } from "./webhooks.js";

/**
 * Whether anyone listens to an application's events: a write keeps its
 * events in its document's outbox only when an enabled endpoint of its
 * environment exists. Without one the relay would visit the document only
 * to empty its outbox, one more write for every write.
 *
 * Exact, like the customer views: the endpoints of an application are
 * kept in memory while no webhook write has happened since (see
 * `SqliteCollection.version`), so it needs a store that sees every write;
 * only the embedded engine has one. An endpoint receives the events of
 * changes made after it was created, as the relay would drop the others
 * anyway.
 */
export interface WebhookAudience {
  /**
   * Whether an enabled endpoint of the environment exists: a write keeps its
   * events only then. Synchronous while the endpoints are known, so nothing
   * runs between the decision and a write started in the same step; a
   * promise only while they are read.
   */
  listens(applicationId: string, environment: EnvironmentName): boolean | Promise<boolean>;
}

/** The audience over a store whose webhook writes move `versionOf`. */
export function createWebhookAudience(db: Collections, versionOf: () => number): WebhookAudience {
  // Per application: the environments some enabled endpoint listens to
  // (null: both), as of a version of the webhooks table.
  const known = new Map<string, { version: number; environments: Set<EnvironmentName | null> }>();
  const decide = (environments: Set<EnvironmentName | null>, environment: EnvironmentName) =>
    environments.has(null) || environments.has(environment);
  const listens: WebhookAudience["listens"] = (applicationId, environment) => {
    const version = versionOf();
    const entry = known.get(applicationId);
    if (entry && entry.version === version) return decide(entry.environments, environment);
    return findEnabledWebhooks(db, applicationId).then((webhooks) => {
      // A webhook written while they were read: read them again.
      if (versionOf() !== version) return listens(applicationId, environment);
      const environments = new Set(webhooks.map((webhook) => webhook.environment ?? null));
      known.set(applicationId, { version, environments });
      return decide(environments, environment);
    });
  };
  return { listens };
}
