import type { ConnectError } from "@connectrpc/connect";
import { rememberBounded } from "../domain/bounded-map.js";
import { isUserHashShaped, userHashMatches } from "../domain/identity.js";
import type { Clock } from "../domain/tenancy.js";
import type { SecretBox } from "../store/secret-box.js";
import { UserHashRefused } from "./authentication.js";
import type { Caller } from "./context.js";
import { invalidArgument, permissionDenied } from "./errors.js";

/**
 * Who a call acts as for the customer it names (docs/trust.md): a secret
 * key acts for any customer; a public key with a valid userHash acts fully
 * for that customer; a public key without one is `unverified`.
 */
export type Verification = "secret" | "verified" | "unverified";

/** The request's userHash, checked for shape: 64 hex digits, or absent. */
export function optionalUserHash(value: string | undefined): string | undefined {
  if (value === undefined || value === "") return undefined;
  if (!isUserHashShaped(value)) {
    throw invalidArgument(
      "userHash",
      "must be 64 hexadecimal characters: HMAC-SHA256 of the external user id with the identity secret, in hex",
    );
  }
  return value;
}

/**
 * PERMISSION_DENIED naming userHash: what an unverified public-key call may
 * not do, with a `google.rpc.BadRequest` detail naming the field.
 */
export function userHashNeeded(description: string): ConnectError {
  return permissionDenied("userHash", description);
}

/**
 * How the call acts for the customer whose external user id is
 * `externalUserId`. A present userHash must match (the current identity
 * secret, or the previous one during its period): UNAUTHENTICATED
 * ({@link UserHashRefused}) otherwise. Without one, an application in
 * `required` mode refuses the call (PERMISSION_DENIED naming userHash).
 */
export async function verificationOf(
  caller: Caller,
  deps: { secretBox: SecretBox; clock: Clock },
  externalUserId: string,
  userHash: string | undefined,
): Promise<Verification> {
  if (caller.keyKind === "secret") return "secret";
  const application = await caller.store.application.find();
  if (userHash === undefined) {
    if (application?.identityVerification === "required") {
      throw userHashNeeded(
        "is required: this application verifies the identity of every public-key call (identityVerification required)",
      );
    }
    return "unverified";
  }
  const secrets: string[] = [];
  if (application?.identitySecretSealed) {
    secrets.push(opened(deps.secretBox, application.identitySecretSealed));
  }
  const previousUntil = application?.previousIdentitySecretExpiresAt;
  if (application?.previousIdentitySecretSealed && previousUntil && previousUntil > deps.clock()) {
    secrets.push(opened(deps.secretBox, application.previousIdentitySecretSealed));
  }
  if (secrets.length === 0) {
    throw new UserHashRefused(
      "userHash cannot be verified: the application has no identity secret",
    );
  }
  if (!userHashMatches(secrets, externalUserId, userHash)) {
    throw new UserHashRefused("userHash does not match the external user id");
  }
  return "verified";
}

// The secrets opened, by their sealed form: an application's secret is
// opened once per process, not on every call it verifies. Bounded (two per
// application are in use): past the bound the first opened goes first.
const openedSecrets = new Map<string, string>();
const openedSecretsMax = 1_000;

/** A secret sealed with the secret box, opened once per process. */
export function opened(secretBox: SecretBox, sealed: string): string {
  let secret = openedSecrets.get(sealed);
  if (secret === undefined) {
    secret = secretBox.open(sealed);
    rememberBounded(openedSecrets, sealed, secret, openedSecretsMax);
  }
  return secret;
}
