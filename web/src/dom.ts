// A few DOM helpers; the page needs no framework.

export function byId<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (el === null) {
    throw new Error(`page is missing #${id}`);
  }
  return el as T;
}

type Child = Node | string;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") {
      el.className = value;
    } else {
      el.setAttribute(name, value);
    }
  }
  el.append(...children);
  return el;
}

// setText writes only when the text differs, so unchanged parts of the
// page are never touched while snapshots stream in.
export function setText(el: HTMLElement, text: string): void {
  if (el.textContent !== text) {
    el.textContent = text;
  }
}

export function setData(el: HTMLElement, name: string, value: string): void {
  if (el.dataset[name] !== value) {
    el.dataset[name] = value;
  }
}
