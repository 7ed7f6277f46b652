import { Code, ConnectError, createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { ApiKeyKindName } from "../store/documents.js";

/** Who is calling: the application an API key belongs to. */
export interface Tenant {
  /** The key's organization. */
  readonly organizationId: string;
  /** The key's application: every read and write is scoped to it. */
  readonly applicationId: string;
  /** The key's id. */
  readonly keyId: string;
  /** The key's kind. */
  readonly keyKind: ApiKeyKindName;
}

/**
 * The authenticated tenant of a call. Each transport authenticates the call
 * and sets it once; handlers never read raw headers.
 */
export const tenantKey = createContextKey<Tenant | undefined>(undefined, {
  description: "the tenant of the API key that authenticated the call",
});

/** The call's tenant; every tenant RPC starts here. */
export function tenantOf(context: HandlerContext): Tenant {
  const tenant = context.values.get(tenantKey);
  // The transports refuse unauthenticated calls before this point.
  if (!tenant) throw new ConnectError("missing API key", Code.Unauthenticated);
  return tenant;
}
