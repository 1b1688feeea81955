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

// maxNameBytes is the server's bound on a name (jobtype.MaxNameBytes).
const maxNameBytes = 128;

// tenantReason is why the page will not ask for tenant, "" if it may: a
// name the server refuses (its rule for every name, jobtype.NameReason)
// is refused here, before any call, in the server's words; "" asks for
// the caller's own.
//
// "*" is refused too. The server reads it as every tenant, but only for
// some calls: ListJobs lists every tenant's jobs to an admin, and a bulk
// action acts on them all, while WatchJobs refuses it, so the page could
// show such a list only frozen, and its Retry all failed would act on
// every tenant behind a question about what is shown. The page shows
// one tenant at a time, live; `jobwatch list --tenant '*'` lists every
// tenant's jobs.
export function tenantReason(tenant: string): string {
  if (tenant === "") {
    return "";
  }
  if (tenant === "*") {
    return "the page shows one tenant at a time, live: “*” (every tenant) cannot be watched (jobwatch list --tenant '*' lists every tenant's jobs)";
  }
  const bytes = new TextEncoder().encode(tenant).length;
  if (bytes > maxNameBytes) {
    return `tenant: must be at most ${maxNameBytes} bytes, got ${bytes}`;
  }
  if (!/^[A-Za-z0-9._\-:/@]+$/.test(tenant)) {
    return "tenant: may only contain ASCII letters, digits and . _ - : / @";
  }
  return "";
}
