import type { Json } from "../helpers/server.js";
import type { Snapshot } from "./invariants.js";
import type { Credential } from "./system.js";

/**
 * What the invariant checker knows of one run (one application of the
 * service): the customers it identifies, each with personal data found
 * nowhere else, the credentials it holds, the writes it may replay, and
 * what it last read. Commands read it to choose what to do and what the
 * service must answer; what the service decided on its own (a referral
 * flagged, a grant capped, which of two racing conversions won) is learnt
 * from the reads after each step, so the model accepts every outcome a
 * linearisation of concurrent calls allows and the invariants judge them.
 */

/** The first names of a run's customers, one per slot. */
const firstNames = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Mallory"];

/** How many customers a run identifies at most. */
export const slotCount = firstNames.length;

/**
 * One customer of a run. Every personal field holds the slot's `token`, so
 * a search for it finds any of them, whole or in part, in any answer.
 */
export interface CustomerSlot {
  readonly index: number;
  /** In the name, the email, the external id and the custom properties; nowhere else. */
  readonly token: string;
  readonly externalUserId: string;
  readonly email: string;
  /**
   * The last slot's name is one word that looks like an email, as an
   * identify may send (the public leaderboard must still mask it).
   */
  readonly name: string;
  /** Set by the first acknowledged identify. */
  id?: string;
  referralCode?: string;
  /** The custom property `plan` as last acknowledged. */
  plan?: string;
  /** When the erasure was acknowledged (ms since the epoch); never identified again after. */
  erasedAt?: number;
  /** The erasure's place among the run's acknowledged answers (`Model.next`). */
  erasedOrder?: number;
}

/** The application a run gets to itself, and what the checker set up in it. */
export interface RunApplication {
  readonly applicationId: string;
  readonly secret: Credential;
  readonly public: Credential;
  /** The application's identity secret: public-key identifies sign their user with it. */
  readonly identitySecret: string;
  readonly campaignId: string;
  /** The checkpoint name that converts in the run's campaign. */
  readonly trigger: string;
  /** The receiver's path the run's webhook endpoint delivers to. */
  readonly webhookPath: string;
  readonly webhookId: string;
}

/** A referral as last read, by its referee's slot. */
export interface KnownReferral {
  readonly id: string;
  readonly referrerId: string;
  readonly status: string;
}

/** A grant as last read. */
export interface KnownGrant {
  readonly id: string;
  readonly kind: string;
  readonly status: string;
  /**
   * A pending grant the reward sweep may approve any moment now (its hold
   * ends, its reward approves automatically): a move of it may find it
   * either way.
   */
  readonly mayBeSwept: boolean;
}

/** A key the run made through the admin API, beside the application's own. */
export interface ExtraKey {
  readonly id: string;
  readonly credential: Credential;
}

/** A write sent with an `Idempotency-Key`, to be sent again later. */
export interface IdempotentWrite {
  /** The key it was sent with: a retry is the same call, with the same key. */
  readonly key: Credential;
  readonly path: string;
  readonly body: Json;
  readonly idempotencyKey: string;
  /** The slot whose identify it was, if it was one. */
  readonly identifiedSlot?: number;
  /**
   * The answer a retry replays: the first, until an erasure forgets it
   * (it named the erased customer) and a retry runs the write again.
   */
  status: number;
  text: string;
  /**
   * The place of that answer among the run's acknowledged answers
   * (`Model.next`): an erasure forgets only the answers kept before it.
   */
  keptOrder: number;
}

/** The checker's model of one run. */
export class Model {
  readonly slots: CustomerSlot[];
  app?: RunApplication;
  /** Referrals by their referee's slot. */
  referrals = new Map<number, KnownReferral>();
  /** Grants as last read, oldest first. */
  grants: KnownGrant[] = [];
  readonly extraKeys: ExtraKey[] = [];
  readonly idempotent: IdempotentWrite[] = [];
  /** The campaign (REST JSON) as last read. */
  campaign: Json;
  /** The steps run so far. */
  steps = 0;
  /** What the last step left, to find after a kill. */
  snapshot?: Snapshot;
  /** Numbers each write's idempotency key, the made-up keys and the fresh customers. */
  private sequence = 0;

  constructor(readonly run: number) {
    this.slots = firstNames.map((first, index) => {
      const token = `Zed${run}x${index}Q`;
      const email = `${first.toLowerCase()}.${token.toLowerCase()}@example.com`;
      return {
        index,
        token,
        externalUserId: `ext-${token.toLowerCase()}`,
        email,
        name: index === firstNames.length - 1 ? email : `${first} ${token}`,
      };
    });
  }

  /** The next number of this run: unique names for keys and customers. */
  next(): number {
    return ++this.sequence;
  }

  /** The slot of a customer id, if it is one of the run's. */
  slotOf(customerId: string): CustomerSlot | undefined {
    return this.slots.find((slot) => slot.id === customerId);
  }

  /** Whether a slot was identified and is not erased: a customer the run may call about. */
  isLive(slot: number): boolean {
    const customer = this.slots[slot];
    return customer?.id !== undefined && customer.erasedAt === undefined;
  }

  /** The slots identified and not erased, in order. */
  liveSlots(): number[] {
    return this.slots.filter((_, index) => this.isLive(index)).map((slot) => slot.index);
  }

  /** The tokens of the erased customers, with when each was erased. */
  erased(): CustomerSlot[] {
    return this.slots.filter((slot) => slot.erasedAt !== undefined);
  }

  /** The credentials the service must serve (for the checks after a start). */
  validCredentials(): Credential[] {
    const app = this.app;
    const own = app ? [app.secret, app.public] : [];
    return [...own, ...this.extraKeys.map((key) => key.credential)].filter((key) => key.valid);
  }

  /** Takes in what the reads after a step found: referrals, grants, the campaign. */
  learn(snapshot: Snapshot): void {
    this.snapshot = snapshot;
    this.referrals = new Map();
    for (const referral of snapshot.referrals) {
      const referee = this.slotOf(referral.refereeId);
      if (!referee || referral.campaignId !== this.app?.campaignId) continue;
      this.referrals.set(referee.index, {
        id: referral.id,
        referrerId: referral.referrerId,
        status: referral.status,
      });
    }
    this.grants = [...snapshot.grants]
      .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      .map((grant) => ({
        id: grant.id,
        kind: grant.kind,
        status: grant.status,
        mayBeSwept:
          grant.status === "pending" &&
          grant.statusReason !== "unverified_conversion" &&
          grant.reward?.approval !== "manual" &&
          Date.parse(grant.availableAt) < Date.now() + 5_000,
      }));
    this.campaign = snapshot.campaign;
  }
}
