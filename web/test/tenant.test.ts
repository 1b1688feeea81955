// Tests of which tenant a tab opens on (src/tenant.ts).
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { initialTenant, rememberTenant, tenantKey, tenantReason, type TenantStore } from "../src/tenant";

// Storage is a browser Storage: a tab's sessionStorage, or the
// localStorage every tab of the origin shares.
class Storage implements TenantStore {
  private readonly items = new Map<string, string>();
  getItem(key: string): string | null {
    return this.items.get(key) ?? null;
  }
  setItem(key: string, value: string): void {
    this.items.set(key, value);
  }
  removeItem(key: string): void {
    this.items.delete(key);
  }
}

const page = new URL("http://127.0.0.1:8080/");

test("a tenant typed in one tab is not the tenant of a new tab, which asks for the caller's own", () => {
  const shared = new Storage();
  const adminTab = new Storage();
  rememberTenant(adminTab, "acme");
  const newTab = new Storage();
  assert.equal(initialTenant(page, newTab, shared), "", "a new tab named a tenant its user never typed");
  assert.equal(initialTenant(page, adminTab, shared), "acme", "a reload of the tab lost the tenant typed in it");
});

test("the address names the tenant before anything remembered", () => {
  const tab = new Storage();
  rememberTenant(tab, "acme");
  assert.equal(initialTenant(new URL("http://127.0.0.1:8080/?tenant=globex"), tab, new Storage()), "globex");
});

test("a tenant an earlier page left in localStorage is dropped unread", () => {
  const shared = new Storage();
  shared.setItem(tenantKey, "acme");
  assert.equal(initialTenant(page, new Storage(), shared), "");
  assert.equal(shared.getItem(tenantKey), null);
});

test("an emptied Tenant field forgets the tenant for the tab's reloads", () => {
  const tab = new Storage();
  rememberTenant(tab, "acme");
  rememberTenant(tab, "");
  assert.equal(initialTenant(page, tab, new Storage()), "");
});

test("a tenant the server's rule refuses is refused before any call, in the rule's words; * too, which the page cannot watch", () => {
  assert.equal(tenantReason(""), "", "the caller's own tenant was refused");
  assert.equal(tenantReason("acme"), "");
  assert.equal(tenantReason("team.a_b-c:d/e@f"), "");
  assert.equal(tenantReason("acme corp"), "tenant: may only contain ASCII letters, digits and . _ - : / @");
  assert.equal(tenantReason("ácme"), "tenant: may only contain ASCII letters, digits and . _ - : / @");
  assert.equal(tenantReason("a".repeat(128)), "");
  assert.equal(tenantReason("a".repeat(129)), "tenant: must be at most 128 bytes, got 129");
  assert.match(tenantReason("*"), /one tenant at a time, live: “\*” \(every tenant\) cannot be watched/);
});
