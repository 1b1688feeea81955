// Which tenant a tab asks for when it opens: the one its address names
// (?tenant=), else the one typed in this tab's Tenant field before a
// reload, else none (the caller's own: a client token's, the default
// tenant's otherwise).
//
// The tenant typed is remembered per tab, in sessionStorage, as the
// token is (api.ts), never in localStorage: a tenant an admin chose in
// one tab would otherwise open in every new tab, where a client token of
// another tenant would be refused it and the page would show a tenant's
// name its user never typed. Earlier pages kept it in localStorage; that
// copy is dropped, unread.

export const tenantKey = "jobwatch.tenant";

// TenantStore is the part of a Storage the page uses.
export type TenantStore = Pick<Storage, "getItem" | "setItem" | "removeItem">;

export function initialTenant(url: URL, tab: TenantStore, shared: TenantStore): string {
  shared.removeItem(tenantKey);
  return url.searchParams.get("tenant") || tab.getItem(tenantKey) || "";
}

// rememberTenant keeps the tenant typed in this tab for its reloads; ""
// (the caller's own) forgets it.
export function rememberTenant(tab: TenantStore, tenant: string): void {
  if (tenant === "") {
    tab.removeItem(tenantKey);
  } else {
    tab.setItem(tenantKey, tenant);
  }
}
