import type { Document, Filter } from "mongodb";
import type { EnvironmentName, Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import { eraseCustomer, findCustomerOrTombstone } from "./customers.js";
import type { CustomerDoc, EventDoc, OutboxEntryDoc } from "./documents.js";
import { packPayload, unpackPayload } from "./event-payload.js";
import { ownedBy } from "./tenant.js";

/** How the erasure's own event is written (the webhook audience decides whether it is). */
type ListenedWrite = <R>(
  environment: EnvironmentName,
  write: (outbox: readonly OutboxEntryDoc[]) => Promise<R>,
) => Promise<R>;

/**
 * Erases a customer everywhere the service keeps personal data about it:
 * its record (the tombstone stays), the external user id on its
 * checkpoints, its email and network in the fraud evidence of its
 * referrals (as referrer and as referee), and the payloads of the stored events that hold its data
 * (its own events, its checkpoints', and the `referredBy` of the events of
 * every customer it referred when the event was stored), which deliveries
 * still waiting for a retry send. Each step
 * runs again on a second erasure, so one a crash interrupted is finished
 * then. Null when no such customer exists.
 */
export async function eraseEverywhere(
  db: Collections,
  tenant: Tenant,
  id: string,
  at: Date,
  listened: ListenedWrite,
  /** The engine's last step: leaving no copy of what was erased in its files. */
  afterErasure?: () => Promise<void>,
): Promise<{ tombstone: CustomerDoc; erasedNow: boolean } | null> {
  const current = await findCustomerOrTombstone(db, tenant, id);
  if (!current) return null;
  const erased = await listened(current.environment, (outbox) =>
    eraseCustomer(db, tenant, id, at, outbox),
  );
  if (!erased) return null;
  await db.checkpoints.updateMany(
    { ...ownedBy(tenant), environment: current.environment, customerId: id },
    { $set: { externalUserId: "" } },
  );
  // The fraud evidence of its referrals, on either side, keeps nothing of it.
  await db.referrals.updateMany(
    { ...ownedBy(tenant), referrerId: id, evidence: { $exists: true } },
    { $set: { "evidence.referrerEmail": null, "evidence.referrerNetwork": null } },
  );
  await db.referrals.updateMany(
    { ...ownedBy(tenant), refereeId: id, evidence: { $exists: true } },
    { $set: { "evidence.refereeEmail": null, "evidence.refereeNetwork": null } },
  );
  // The clicks on its links: a click names its code and its visitors' hashes.
  await db.clicks.deleteMany({ ...ownedBy(tenant), referrerId: id });
  await rewriteEvents(db, { ...ownedBy(tenant), customerId: id }, scrubSubject);
  const scrubReferredBy = referredByScrub(id);
  // Events name the referrer their referredBy holds, whoever refers the customer since.
  await rewriteEvents(db, { ...ownedBy(tenant), referredById: id }, scrubReferredBy);
  // Events stored before they named it: those of the customers it refers today.
  const referees = await db.referrals
    .find({ ...ownedBy(tenant), referrerId: id }, { projection: { refereeId: 1 } })
    .toArray();
  if (referees.length > 0) {
    const refereeIds = referees.map((referral) => referral.refereeId);
    await rewriteEvents(
      db,
      { ...ownedBy(tenant), customerId: { $in: refereeIds } },
      scrubReferredBy,
    );
  }
  await afterErasure?.();
  return erased;
}

/** A customer's own data in an event's payload (its events, its checkpoints'), erased. */
function scrubSubject(data: Record<string, unknown>): void {
  if ("externalUserId" in data) data.externalUserId = "";
  if ("email" in data) data.email = null;
  if ("name" in data) data.name = "";
  if ("customProperties" in data) data.customProperties = {};
}

/** The `referredBy` of another customer's event, where it shows the erased customer `id`. */
function referredByScrub(id: string): (data: Record<string, unknown>) => void {
  return (data) => {
    const referredBy = data.referredBy as Record<string, unknown> | null | undefined;
    if (referredBy?.id === id) data.referredBy = { id, externalUserId: "", email: null, name: "" };
  };
}

/**
 * A number that moves with every commit that erases a customer, kept by
 * the embedded engine's writer, which makes every commit (see
 * {@link withErasedScrubbed}). It moves as the commit is made, before any
 * other code runs, so a read that follows a look at it sees that erasure.
 * A write undone inside a committed group may move it for nothing: a
 * look then reads once more than it had to.
 */
export class ErasureMark {
  private erasures = 0;
  private erasedInGroup = false;

  /** Told of each customer's change inside the write that makes it. */
  changed(before: Document | null, after: Document): void {
    if (after.deletedAt != null && before?.deletedAt == null) this.erasedInGroup = true;
  }

  // How the engine's writes end (it observes them, see `observeWrites`).
  released(): void {}
  undone(): void {}
  committing(): void {
    if (this.erasedInGroup) this.erasures += 1;
    this.erasedInGroup = false;
  }
  abandoned(): void {
    this.erasedInGroup = false;
  }

  /** The mark now. */
  readonly current = (): number => this.erasures;
}

/** The erasure mark each event was last found unerased at (see {@link withErasedScrubbed}). */
const foundUnerasedAt = new WeakMap<EventDoc, number>();

/**
 * An event the relay just stored, with the data of any customer it names
 * erased if that customer was erased meanwhile: an erasure rewrites the
 * events stored when it runs, and the relay may have read the customer
 * before it and stored the event after. Read after the event is stored, a
 * customer not yet erased will be, later, by an erasure that finds this
 * event; one erased already is scrubbed here. Returns the event as stored.
 *
 * With the store's erasure mark (`erasureMarkOf`), an event found unerased
 * is not read for again while the mark stays: no customer was erased
 * since. The relay looks three times per event (built, sent, stored): the
 * three reads took about 25 µs of the writer's loop per delivered event.
 *
 * With `forgetFreed` (see `forgetFreedOf`), a scrub ends as an erasure
 * does: the database's files keep no copy of what it overwrote.
 */
export async function withErasedScrubbed(
  db: Collections,
  event: EventDoc,
  erasureMark?: (() => number) | null,
  forgetFreed?: (() => Promise<void>) | null,
): Promise<EventDoc> {
  const named = [event.customerId, event.referredById].filter(
    (id): id is string => id !== undefined,
  );
  if (named.length === 0) return event;
  const mark = erasureMark?.();
  if (mark !== undefined && foundUnerasedAt.get(event) === mark) return event;
  const erased = await db.customers
    .find({ _id: { $in: named }, deletedAt: { $ne: null } }, { projection: { _id: 1 } })
    .toArray();
  if (erased.length === 0) {
    // The mark as it was before the read: an erasure committed meanwhile moved it.
    if (mark !== undefined) foundUnerasedAt.set(event, mark);
    return event;
  }
  const body = JSON.parse(event.payload) as { data?: Record<string, unknown> };
  if (!body.data) return event;
  for (const { _id } of erased) {
    if (_id === event.customerId) scrubSubject(body.data);
    if (_id === event.referredById) referredByScrub(_id)(body.data);
  }
  const payload = JSON.stringify(body);
  if (payload === event.payload) return event;
  await db.events.updateOne({ _id: event._id }, { $set: { payload: packPayload(payload, event) } });
  await forgetFreed?.();
  return { ...event, payload };
}

/** Rewrites the payload data of the stored events `filter` finds that `scrub` changes. */
async function rewriteEvents(
  db: Collections,
  filter: Filter<EventDoc>,
  scrub: (data: Record<string, unknown>) => void,
): Promise<void> {
  const events = await db.events.find(filter).toArray();
  for (const event of events) {
    const json = unpackPayload(event.payload, event);
    const body = JSON.parse(json) as { data?: Record<string, unknown> };
    if (!body.data) continue;
    scrub(body.data);
    const rewritten = JSON.stringify(body);
    if (rewritten === json) continue;
    await db.events.updateOne(
      { _id: event._id },
      { $set: { payload: packPayload(rewritten, event) } },
    );
  }
}
