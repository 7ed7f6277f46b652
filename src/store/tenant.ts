/** The owner of tenant data, as every repository function takes it first. */
export interface TenantScope {
  readonly organizationId: string;
  readonly applicationId: string;
}

/** The filter that confines a query to one application. */
export function ownedBy(tenant: TenantScope): { applicationId: string } {
  return { applicationId: tenant.applicationId };
}
