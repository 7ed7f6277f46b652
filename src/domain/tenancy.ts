/** `production` or `test`: the REST words of `referral.v1.Environment`. */
export type EnvironmentName = "production" | "test";

/** The REST words of `referral.v1.ApiKeyKind`. */
export type ApiKeyKindName = "public" | "secret";

/**
 * The owner of tenant data: an application of an organization. Every
 * tenant read and write is confined to `applicationId`; `organizationId`
 * is stamped on what is created.
 */
export interface Tenant {
  readonly organizationId: string;
  readonly applicationId: string;
}

/** A source of the current time, injectable for tests. */
export type Clock = () => Date;

/**
 * What open streams wait on to look again for what nobody tells them of
 * (STREAM_POLL_INTERVAL): numbers another instance moved, a key another
 * instance revoked. Injectable, so tests tick by hand.
 */
export interface Ticker {
  /** Calls `listener` once, at the next tick; the function returned cancels that. */
  onNextTick(listener: () => void): () => void;
}
