import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { Access } from "../../gen/referral/v1/options_pb.js";
import { methodAccess } from "../contract/options.js";
import { hashApiKey, secretsEqual } from "../domain/api-keys.js";
import type { Store } from "../store/store.js";
import { findApiKey, findApiKeyByHash, tenantOfApplication } from "../store/tenants.js";
import type { Caller } from "./context.js";

/** Checks a call's credential against its RPC's `(referral.v1.access)`. */
export interface Authenticator {
  /**
   * The caller of the API key in `authorization` (undefined for admin
   * calls), or a ConnectError: UNAUTHENTICATED for a missing, unknown or
   * revoked credential, PERMISSION_DENIED ({@link KeyKindRefused}, which
   * names the caller) for a key of the wrong kind.
   */
  authenticate(
    method: DescMethod,
    authorization: string | null | undefined,
  ): Promise<Caller | undefined>;
  /** Forgets a cached key at once (called when it is revoked). */
  forget(hash: string): void;
  /**
   * Whether the key with this id is revoked (or gone) now, read from the
   * store past the cache: an open stream's key revoked through another
   * instance, which nothing tells this one of.
   */
  isRevoked(keyId: string): Promise<boolean>;
}

// Authenticated keys are cached briefly so a hot path does not hit the store
// on every call; revocation through this process evicts at once, through
// another instance within this time.
const cacheTtlMs = 10_000;
const cacheMaxEntries = 10_000;

/** Creates the authenticator; `adminToken` unset disables the admin API. */
export function createAuthenticator(deps: {
  store: Store;
  adminToken?: string;
  now?: () => number;
}): Authenticator {
  const now = deps.now ?? Date.now;
  const cache = new Map<string, { caller: Caller; expires: number; version: number | undefined }>();
  const keys = deps.store.system.apiKeys;

  async function callerOfKey(key: string): Promise<Caller> {
    const hash = hashApiKey(key);
    // On the embedded store a key revoked through any worker is committed
    // with a new version of the keys, which drops what was cached here.
    const version = keys.version;
    const cached = cache.get(hash);
    if (cached && cached.expires > now() && cached.version === version) return cached.caller;
    // Authentication is a system path: the key is what names the tenant.
    const doc = await findApiKeyByHash(deps.store.system, hash);
    // The lookup is by hash; comparing again in constant time keeps timing flat.
    if (!doc || !secretsEqual(doc.hash, hash) || doc.revokedAt) {
      cache.delete(hash);
      throw new ConnectError("invalid or revoked API key", Code.Unauthenticated);
    }
    const tenant = tenantOfApplication({
      _id: doc.applicationId,
      organizationId: doc.organizationId,
    });
    const caller: Caller = {
      tenant,
      keyId: doc._id,
      keyKind: doc.kind,
      store: deps.store.forTenant(tenant),
    };
    if (cache.size >= cacheMaxEntries) cache.clear();
    cache.set(hash, { caller, expires: now() + cacheTtlMs, version });
    return caller;
  }

  return {
    async authenticate(method, authorization) {
      const credential = parseAuthorization(authorization);
      const access = methodAccess(method);
      if (access === Access.ADMIN) {
        if (!deps.adminToken) {
          throw new ConnectError(
            "the admin API is disabled: set ADMIN_TOKEN to enable it",
            Code.PermissionDenied,
          );
        }
        if (!credential || !secretsEqual(credential, deps.adminToken)) {
          throw new ConnectError("invalid admin token", Code.Unauthenticated);
        }
        return undefined;
      }
      if (!credential) {
        throw new ConnectError(
          "missing API key: send it in the Authorization header",
          Code.Unauthenticated,
        );
      }
      const caller = await callerOfKey(credential);
      if (access === Access.SECRET && caller.keyKind !== "secret") {
        throw new KeyKindRefused(
          caller,
          `a public key cannot call ${method.parent.name}.${method.name}: use a secret key`,
        );
      }
      return caller;
    },
    forget(hash) {
      cache.delete(hash);
    },
    async isRevoked(keyId) {
      const doc = await findApiKey(deps.store.system, keyId);
      return !doc || Boolean(doc.revokedAt);
    },
  };
}

/**
 * An error the authenticate step tells apart from the others. ConnectError's
 * `instanceof` answers true for any ConnectError (it recognises errors from
 * other copies of the library), so each of these is recognised by its own
 * class only.
 */
abstract class AuthenticationRefusal extends ConnectError {
  static override [Symbol.hasInstance](this: { prototype: object }, value: unknown): boolean {
    if (typeof value !== "object" || value === null) return false;
    // biome-ignore lint/complexity/noThisInStatic: `this` is the subclass `instanceof` names.
    return Object.prototype.isPrototypeOf.call(this.prototype, value);
  }
}

/**
 * PERMISSION_DENIED for a valid key of the wrong kind. The key is known, so
 * the error carries its caller: the call's log line names the key.
 */
export class KeyKindRefused extends AuthenticationRefusal {
  constructor(
    readonly caller: Caller,
    message: string,
  ) {
    super(message, Code.PermissionDenied);
  }
}

/** The credential of an Authorization header: the value, or what follows `Bearer `. */
function parseAuthorization(value: string | null | undefined): string | undefined {
  if (!value) return undefined;
  const trimmed = value.trim();
  const credential = /^bearer\s+/i.test(trimmed) ? trimmed.replace(/^bearer\s+/i, "") : trimmed;
  return credential || undefined;
}

/**
 * UNAUTHENTICATED for a `userHash` that does not sign the customer the call
 * names (or an application without an identity secret). A service throws
 * it; the authenticate step counts it as a failed authentication of the
 * client's address, as it does a refused key (see `interceptors.ts`).
 */
export class UserHashRefused extends AuthenticationRefusal {
  constructor(message: string) {
    super(message, Code.Unauthenticated);
  }
}
