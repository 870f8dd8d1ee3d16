/**
 * A tiny render helper: `h('button', { onclick, 'data-testid': 'save' }, 'Save')`.
 * Text always goes through text nodes (never innerHTML), so data from the API cannot inject markup.
 */
export type Child = Node | string | number | null | undefined | false | Child[];
export type AttrValue = string | number | boolean | null | undefined | ((event: Event) => void);
export type Attrs = Record<string, AttrValue>;

/** Properties set as DOM properties rather than attributes (they reflect live state). */
const PROPS = new Set(['value', 'checked', 'selected', 'disabled']);

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs | null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [name, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (typeof value === 'function') {
        el.addEventListener(name.replace(/^on/, ''), value);
      } else if (PROPS.has(name)) {
        (el as unknown as Record<string, unknown>)[name] = value;
      } else if (name === 'class') {
        el.className = String(value);
      } else {
        el.setAttribute(name, value === true ? '' : String(value));
      }
    }
  }
  append(el, children);
  return el;
}

export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else parent.appendChild(typeof child === 'object' ? child : document.createTextNode(String(child)));
  }
}

/** Replaces the content of `el`. */
export function mount(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** A unique id for label/input pairs. */
let nextId = 0;
export function uid(prefix: string): string {
  nextId += 1;
  return `${prefix}-${nextId}`;
}
