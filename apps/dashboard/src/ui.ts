/** Small building blocks shared by the pages. */
import { describeError } from './api.ts';
import { type Attrs, type Child, h, mount, uid } from './dom.ts';

/** A status in words, with a tone class for colour (the word alone carries the meaning). */
export type Tone = 'good' | 'bad' | 'warn' | 'neutral' | 'info';

export function badge(text: string, tone: Tone, testid?: string): HTMLElement {
  return h('span', { class: `badge badge-${tone}`, 'data-testid': testid }, text);
}

/** A severity in words; plain (no pass/fail icon), coloured by level. */
export function severity(level: string): HTMLElement {
  return h('span', { class: `badge sev sev-${level}`, 'data-testid': 'severity' }, level);
}

export function cap(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1).replace(/_/g, ' ');
}

export function time(ts: string | null | undefined): Child {
  if (!ts) return h('span', { class: 'muted' }, '—');
  const date = new Date(ts);
  return h('time', { datetime: ts, title: ts }, Number.isNaN(date.getTime()) ? ts : date.toLocaleString());
}

export function dash(value: string | number | null | undefined): Child {
  return value === null || value === undefined || value === '' ? h('span', { class: 'muted' }, '—') : String(value);
}

/** A live region for one section's messages: errors as alerts, successes as status. */
export interface Notice {
  el: HTMLElement;
  error(err: unknown): void;
  ok(text: string): void;
  clear(): void;
}

export function notice(testid: string): Notice {
  const el = h('div', { class: 'notice', 'data-testid': testid, role: 'status', 'aria-live': 'polite' });
  return {
    el,
    error(err) {
      el.className = 'notice notice-error';
      el.setAttribute('role', 'alert');
      mount(el, h('strong', null, 'Error: '), describeError(err));
    },
    ok(text) {
      el.className = 'notice notice-ok';
      el.setAttribute('role', 'status');
      mount(el, text);
    },
    clear() {
      el.className = 'notice';
      el.replaceChildren();
    },
  };
}

/** A label + control pair. */
export function field(label: string, control: HTMLElement, hint?: string): HTMLElement {
  const id = control.id || uid('f');
  control.id = id;
  let hintEl: HTMLElement | null = null;
  if (hint) {
    hintEl = h('small', { id: `${id}-hint`, class: 'hint' }, hint);
    control.setAttribute('aria-describedby', hintEl.id);
  }
  return h('div', { class: 'field' }, h('label', { for: id }, label), control, hintEl);
}

export function button(text: string, onclick: (event: Event) => void, attrs: Attrs = {}): HTMLButtonElement {
  return h('button', { type: 'button', class: 'btn', ...attrs, onclick }, text);
}

/** Runs an action with the button disabled and a busy state announced. */
export async function busy<T>(btn: HTMLButtonElement, action: () => Promise<T>): Promise<T> {
  btn.disabled = true;
  btn.setAttribute('aria-busy', 'true');
  try {
    return await action();
  } finally {
    btn.disabled = false;
    btn.removeAttribute('aria-busy');
  }
}

export interface Column<T> {
  header: string;
  cell: (row: T) => Child;
  class?: string;
}

export function table<T>(
  caption: string,
  columns: Column<T>[],
  rows: T[],
  opts: { testid: string; rowTestid?: string; rowId?: (row: T) => string; empty: string; class?: string },
): HTMLElement {
  if (rows.length === 0) return h('p', { class: 'empty', 'data-testid': `${opts.testid}-empty` }, opts.empty);
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { 'data-testid': opts.testid, class: opts.class },
      h('caption', { class: 'visually-hidden' }, caption),
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          columns.map((c) => h('th', { scope: 'col', class: c.class }, c.header)),
        ),
      ),
      h(
        'tbody',
        null,
        rows.map((row) =>
          h(
            'tr',
            { 'data-testid': opts.rowTestid, 'data-id': opts.rowId?.(row) },
            columns.map((c) => h('td', { class: c.class, 'data-label': c.header }, c.cell(row))),
          ),
        ),
      ),
    ),
  );
}

export function pageHeader(title: string, ...extra: Child[]): HTMLElement {
  return h(
    'div',
    { class: 'page-header' },
    h('h1', { tabindex: -1, 'data-testid': 'page-title' }, title),
    h('div', { class: 'page-actions' }, extra),
  );
}

export function loading(): HTMLElement {
  return h('p', { class: 'loading', role: 'status' }, 'Loading…');
}

export function stat(label: string, value: string, testid: string, hint?: string): HTMLElement {
  return h(
    'div',
    { class: 'stat' },
    h('div', { class: 'stat-label' }, label),
    h('div', { class: 'stat-value', 'data-testid': testid }, value),
    hint ? h('div', { class: 'stat-hint' }, hint) : null,
  );
}

/** A secret shown once (an API key), with a copy button; the same test ids as the webhook secret. */
export function oneTimeSecret(opts: { title: string; label: string; secret: string; note: Child; extra?: Child }): HTMLElement {
  const titleId = uid('secret-title');
  const input = h('input', {
    id: uid('secret'),
    type: 'text',
    readonly: true,
    value: opts.secret,
    class: 'mono',
    'data-testid': 'secret-value',
    spellcheck: 'false',
    autocomplete: 'off',
  });
  const copied = h('span', { class: 'muted', role: 'status', 'aria-live': 'polite', 'data-testid': 'secret-copied' });
  const copy = button(
    'Copy',
    async () => {
      input.select();
      try {
        await navigator.clipboard.writeText(opts.secret);
        copied.textContent = 'Copied to the clipboard.';
      } catch {
        copied.textContent = 'Selected: press Ctrl+C (⌘C) to copy.';
      }
    },
    { 'data-testid': 'secret-copy' },
  );
  return h(
    'section',
    { class: 'card secret-card', 'data-testid': 'secret-panel', 'aria-labelledby': titleId },
    h('h2', { id: titleId }, opts.title),
    h('p', null, opts.note),
    h('div', { class: 'field' }, h('label', { for: input.id }, opts.label), h('div', { class: 'row nowrap' }, input, copy)),
    h('div', null, copied),
    opts.extra ? h('div', { class: 'row' }, opts.extra) : null,
  );
}

/**
 * An inline confirmation in place of `slot`'s content: `text`, then "yes" (danger) and Cancel.
 * `testid` prefixes the buttons' ids: `<testid>-confirm`, `<testid>-cancel`.
 */
export function confirmInline(
  slot: HTMLElement,
  opts: { text: string; yes: string; testid: string; onYes: (btn: HTMLButtonElement) => Promise<void>; onCancel: () => void },
): void {
  const textId = uid('confirm');
  const yes: HTMLButtonElement = button(opts.yes, () => void opts.onYes(yes), {
    class: 'btn btn-danger btn-small',
    'data-testid': `${opts.testid}-confirm`,
  });
  mount(
    slot,
    h(
      'div',
      { class: 'confirm', role: 'alertdialog', 'aria-labelledby': textId },
      h('p', { id: textId }, opts.text),
      h(
        'div',
        { class: 'row' },
        yes,
        button('Cancel', () => opts.onCancel(), { class: 'btn btn-small', 'data-testid': `${opts.testid}-cancel` }),
      ),
    ),
  );
  yes.focus();
}

/** A field's own error, under the control (role alert when it shows); `show(null)` clears it. */
export interface FieldError {
  el: HTMLElement;
  show(text: string | null): void;
}

export function fieldError(control: HTMLElement, testid: string): FieldError {
  const el = h('div', { class: 'field-error', 'data-testid': testid, id: uid('err') });
  return {
    el,
    show(text) {
      if (text) {
        el.setAttribute('role', 'alert');
        mount(el, text);
        control.setAttribute('aria-invalid', 'true');
        control.setAttribute('aria-errormessage', el.id);
      } else {
        el.removeAttribute('role');
        el.replaceChildren();
        control.removeAttribute('aria-invalid');
        control.removeAttribute('aria-errormessage');
      }
    },
  };
}
