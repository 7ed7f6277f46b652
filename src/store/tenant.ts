import type { Tenant } from "../domain/tenancy.js";

/** The filter that confines a query to one application. */
export function ownedBy(tenant: Tenant): { applicationId: string } {
  return { applicationId: tenant.applicationId };
}
