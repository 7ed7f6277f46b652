import { Code, ConnectError, createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { ApiKeyKindName, Tenant } from "../domain/tenancy.js";
import type { TenantStore } from "../store/tenant-store.js";

/** Who is calling with an API key, and the data that key may reach. */
export interface Caller {
  readonly tenant: Tenant;
  /** The key's id: the actor recorded on what the call changes. */
  readonly keyId: string;
  readonly keyKind: ApiKeyKindName;
  /** The tenant's repositories: the only way a tenant RPC reaches data. */
  readonly store: TenantStore;
}

/**
 * The caller of a tenant RPC. The pipeline authenticates every call and sets
 * it once; handlers never read raw headers.
 */
export const callerKey = createContextKey<Caller | undefined>(undefined, {
  description: "the API key that authenticated the call, and its tenant's repositories",
});

/** The call's caller; every tenant RPC starts here. */
export function callerOf(context: HandlerContext): Caller {
  const caller = context.values.get(callerKey);
  // The pipeline refuses unauthenticated calls before this point.
  if (!caller) throw new ConnectError("missing API key", Code.Unauthenticated);
  return caller;
}

/**
 * The request's `Origin` header, or null: what PingCampaign records as
 * `lastPingOrigin`. The one header a service reads, here, so handlers still
 * read none; every transport exposes the request's headers (gRPC: its
 * metadata) on the context.
 */
export function requestOriginOf(context: HandlerContext): string | null {
  return context.requestHeader.get("origin") || null;
}

/**
 * The limit of failed referral-code lookups (RATE_LIMIT_CODE_LOOKUPS), for
 * the key and the client address of one call: a wrong code answers
 * `not_found`, so without it codes could be searched.
 */
export interface CodeLookups {
  /** RESOURCE_EXHAUSTED when the key or the address used its failures up. */
  beforeLookup(): Promise<void> | void;
  /** Counts a failed lookup against both; RESOURCE_EXHAUSTED once either is past its limit. */
  lookupFailed(): Promise<void>;
}

/** Set by the transport's rate limits for every call; unlimited when they are off. */
export const codeLookupsKey = createContextKey<CodeLookups>(
  { beforeLookup: () => {}, lookupFailed: async () => {} },
  { description: "the limit of failed referral-code lookups for the call's key and address" },
);

/**
 * The client of a call as its connection shows it: the address (behind
 * TRUSTED_PROXIES, the client's) and the User-Agent header. What a
 * public-key call's fraud evidence is taken from; read only when needed.
 */
export interface CallClient {
  readonly address: string;
  readonly userAgent: string | null;
}

/** Set by the pipeline for every call with a key. */
export const callClientKey = createContextKey<CallClient | undefined>(undefined, {
  description: "the call's client address and User-Agent, as its connection shows them",
});
