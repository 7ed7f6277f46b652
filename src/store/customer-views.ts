import type { Customer } from "../../gen/referral/v1/resources_pb.js";
import { share } from "../contract/shared-messages.js";

/**
 * The API's customers (stored fields and referral facts) kept in memory, so
 * a customer read again costs no query and, being one shared message, no
 * encoding either (see `shared-messages.ts`).
 *
 * Exact, not eventually right: a view is built from customers and
 * referrals, and any write to either drops every view (see `version`). That
 * needs a store that sees every write, so only the embedded engine keeps
 * views: it is the one process on its data directory. On MongoDB other
 * instances write too, and every read queries.
 */
export interface CustomerViews {
  /**
   * The version of what views are built from, read before building one:
   * {@link keep} refuses a view when a write came in between.
   */
  version(): number;
  /** The view of a customer of `applicationId`, if one is kept and current. */
  get(id: string, applicationId: string): Customer | undefined;
  /** Keeps a view built from reads made at `readAt`, shared; returns it. */
  keep(view: Customer, readAt: number): Customer;
}

/**
 * The most views kept; past it the oldest are dropped first. A view with
 * its encodings takes about 8 KB of heap (10,000 of them added 85 MB to
 * the RSS in the scale bench), and the customers read again and again (an
 * app's signed-in users) are far fewer.
 */
const defaultCapacity = 2_000;

/**
 * Views over a store whose writes move `versionOf` (the embedded engine's
 * customers and referrals tables; see `SqliteCollection.version`).
 */
export function createCustomerViews(
  versionOf: () => number,
  capacity = defaultCapacity,
): CustomerViews {
  const views = new Map<string, Customer>();
  let keptAt = versionOf();
  // Called by every read: a write since the views were kept drops them all.
  const current = (): number => {
    const now = versionOf();
    if (now !== keptAt) {
      views.clear();
      keptAt = now;
    }
    return now;
  };
  return {
    version: current,
    get(id, applicationId) {
      current();
      const view = views.get(id);
      return view !== undefined && view.applicationId === applicationId ? view : undefined;
    },
    keep(view, readAt) {
      if (current() !== readAt) return view;
      const shared = share(view);
      if (views.size >= capacity) views.delete(views.keys().next().value as string);
      views.set(view.id, shared);
      return shared;
    },
  };
}
