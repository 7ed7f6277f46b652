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
