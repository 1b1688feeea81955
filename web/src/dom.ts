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
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) {
    el.textContent = text;
  }
}

export function setData(el: HTMLElement, name: string, value: string): void {
  if (el.dataset[name] !== value) {
    el.dataset[name] = value;
  }
}

// svg makes an SVG element (h makes HTML ones, which an <svg> would not
// draw).
export function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: Child[]): SVGElementTagNameMap[K] {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) {
    el.setAttribute(name, value);
  }
  el.append(...children);
  return el;
}

export function setAttr(el: Element, name: string, value: string): void {
  if (el.getAttribute(name) !== value) {
    el.setAttribute(name, value);
  }
}
