/**
 * Policies: the list, and an editor for a policy and its rules. Validation is the server's: a
 * refused save shows its error next to the field it names (a CEL error next to the condition,
 * with its line, column and a caret under the position).
 */
import { ApiError, api, describeError, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { type Child, h, mount, uid } from '../dom.ts';
import type {
  Policy,
  PolicyCreate,
  PolicyMode,
  PolicyPage,
  PolicyResponse,
  PolicyRule,
  PolicyUpdate,
  RuleEffect,
  Severity,
} from '../types.ts';
import { badge, busy, button, confirmInline, field, fieldError, loading, notice, pageHeader, type Tone, table, time } from '../ui.ts';
import { whatIfPanel } from './what-if.ts';

type MatchField = keyof NonNullable<PolicyRule['match']>;

const DECLARED: [MatchField, string, string][] = [
  ['action', 'Action', 'e.g. payments.refund, db.delete*'],
  ['resource', 'Resource', 'e.g. orders/*'],
  ['agent', 'Agent', 'agent slugs, e.g. billing-*'],
  ['environment', 'Environment', 'development, staging, production'],
  ['tool', 'Tool', 'e.g. delete_*'],
];
const EXECUTED: [MatchField, string, string][] = [
  ['method', 'HTTP method', 'e.g. DELETE'],
  ['host', 'Host', 'e.g. admin.example.com'],
  ['path', 'Path', 'e.g. /admin/*'],
  ['url', 'URL', 'e.g. https://api.example.com/v1/*'],
  ['server', 'MCP server', 'server slugs, e.g. github'],
];
const EFFECTS: [RuleEffect, string][] = [
  ['block', 'Block'],
  ['require_approval', 'Require approval'],
  ['allow', 'Allow'],
];
const SEVERITIES: Severity[] = ['info', 'low', 'medium', 'high', 'critical'];
const EFFECT_TONE: Record<RuleEffect, Tone> = { allow: 'good', block: 'bad', require_approval: 'warn' };

export const effectLabel = (effect: string) => EFFECTS.find(([v]) => v === effect)?.[1] ?? effect;
export const effectBadge = (effect: string, testid?: string) =>
  badge(effectLabel(effect), EFFECT_TONE[effect as RuleEffect] ?? 'neutral', testid);

export async function policiesPage(ctx: PageContext): Promise<void> {
  const status = notice('policies-notice');
  const list = h('div', null, loading());
  const more = h('div', { class: 'pager' });
  let rows: Policy[] = [];
  let cursor: string | null = null;
  const canWrite = ctx.session.permissions.includes('policies:write');

  const load = async (append: boolean) => {
    try {
      const page = await api<PolicyPage>('GET', withQuery('/policies', { limit: 50, cursor: append ? cursor : null }));
      if (!ctx.alive()) return;
      rows = append ? [...rows, ...page.data] : page.data;
      cursor = page.has_more ? page.next_cursor : null;
      mount(
        list,
        table<Policy>(
          'Policies, newest first',
          [
            {
              header: 'Policy',
              cell: (p) =>
                h(
                  'div',
                  null,
                  h('a', { href: `#/policies/${p.id}`, 'data-testid': 'policy-link' }, p.name),
                  p.description ? h('div', { class: 'muted small' }, p.description) : null,
                ),
            },
            {
              header: 'Status',
              cell: (p) => (p.enabled ? badge('Enabled', 'good', 'policy-enabled') : badge('Disabled', 'neutral', 'policy-enabled')),
            },
            {
              header: 'Mode',
              cell: (p) => (p.mode === 'enforce' ? badge('Enforce', 'info', 'policy-mode') : badge('Monitor', 'neutral', 'policy-mode')),
            },
            { header: 'Priority', cell: (p) => String(p.priority), class: 'num' },
            {
              header: 'Rules',
              cell: (p) =>
                h(
                  'div',
                  { class: 'stack', 'data-testid': 'policy-rules' },
                  p.rules.length === 0 ? h('span', { class: 'muted' }, 'none') : p.rules.slice(0, 4).map((r) => effectBadge(r.effect)),
                  p.rules.length > 4 ? h('span', { class: 'muted small' }, `+${p.rules.length - 4} more`) : null,
                ),
            },
            { header: 'Version', cell: (p) => String(p.version), class: 'num' },
            { header: 'Updated', cell: (p) => time(p.updated_at) },
          ],
          rows,
          {
            testid: 'policies-table',
            rowTestid: 'policy-row',
            rowId: (p) => p.id,
            empty: 'No policies yet: every decision falls to the default of its environment (Settings).',
          },
        ),
      );
      mount(more, cursor ? button('Load more policies', () => void load(true), { 'data-testid': 'policies-more' }) : null);
    } catch (err) {
      if (ctx.alive()) status.error(err);
    }
  };

  mount(
    ctx.root,
    pageHeader(
      'Policies',
      button('Refresh', () => void load(false), { 'data-testid': 'policies-refresh' }),
      canWrite ? h('a', { href: '#/policies/new', class: 'btn btn-primary', 'data-testid': 'policy-new' }, 'New policy') : null,
    ),
    h(
      'p',
      { class: 'lead' },
      'Rules decide each act an agent asks about or runs through Warden: block beats require approval beats allow. Monitor policies record what they would have decided without enforcing it.',
    ),
    status.el,
    list,
    more,
  );
  await load(false);
}

/** One rule's controls, read back into a PolicyRule on save. */
interface RuleEditor {
  card: HTMLElement;
  read(): PolicyRule;
  conditionError(message: string, position: number | null): void;
  ruleError(message: string | null): void;
  clearErrors(): void;
  setIndex(index: number): void;
}

const splitGlobs = (text: string) =>
  text
    .split(/[\n,]/)
    .map((g) => g.trim())
    .filter(Boolean);

/** Line and column (1-based) of a 0-based offset in `text`. */
export function lineColumn(text: string, offset: number): { line: number; column: number; lineText: string } {
  const at = Math.max(0, Math.min(offset, text.length));
  const before = text.slice(0, at);
  const line = before.split('\n').length;
  const start = before.lastIndexOf('\n') + 1;
  const end = text.indexOf('\n', at);
  return { line, column: at - start + 1, lineText: text.slice(start, end < 0 ? text.length : end) };
}

function ruleEditor(
  rule: PolicyRule,
  onRemove: (editor: RuleEditor) => void,
  onMove: (editor: RuleEditor, by: -1 | 1) => void,
): RuleEditor {
  const input = (value: string | undefined, attrs: Record<string, string | number>) =>
    h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', value: value ?? '', ...attrs });
  const id = input(rule.id, { maxlength: 64, 'data-testid': 'rule-id', placeholder: 'e.g. no-prod-deletes' });
  const effect = h(
    'select',
    { 'data-testid': 'rule-effect' },
    EFFECTS.map(([v, l]) => h('option', { value: v, selected: rule.effect === v }, l)),
  );
  const severity = h(
    'select',
    { 'data-testid': 'rule-severity' },
    h('option', { value: '' }, 'Default (medium)'),
    SEVERITIES.map((s) => h('option', { value: s, selected: rule.severity === s }, s)),
  );
  const message = input(rule.message, {
    maxlength: 1000,
    'data-testid': 'rule-message',
    placeholder: 'Shown to the agent and in the audit log',
  });
  const description = input(rule.description, { maxlength: 1000, 'data-testid': 'rule-description' });
  const globs = new Map<MatchField, HTMLInputElement>();
  const globField = ([name, label, hint]: [MatchField, string, string]) => {
    const control = input((rule.match?.[name] ?? []).join(', '), { 'data-testid': `rule-match-${name}`, placeholder: hint });
    globs.set(name, control);
    return field(label, control);
  };
  const condition = h('textarea', {
    id: uid('cond'),
    rows: 3,
    maxlength: 4096,
    class: 'mono',
    spellcheck: 'false',
    'data-testid': 'rule-condition',
    placeholder: 'e.g. context.amount > 1000 && agent.environment == "production"',
  });
  condition.value = rule.condition ?? '';
  const conditionErr = fieldError(condition, 'rule-condition-error');
  const proxy = h('input', { type: 'checkbox', checked: rule.require_execution_proxy === true, 'data-testid': 'rule-proxy' });
  const ruleErr = h('div', { class: 'field-error', 'data-testid': 'rule-error' });
  const title = h('h3', null);
  const executedSet = EXECUTED.some(([name]) => (rule.match?.[name]?.length ?? 0) > 0);

  const editor: RuleEditor = {
    card: h('div'),
    read() {
      const out: PolicyRule = { effect: effect.value as RuleEffect };
      if (id.value.trim()) out.id = id.value.trim();
      if (description.value.trim()) out.description = description.value.trim();
      const match: NonNullable<PolicyRule['match']> = {};
      for (const [name, control] of globs) {
        const list = splitGlobs(control.value);
        if (list.length) match[name] = list;
      }
      if (Object.keys(match).length) out.match = match;
      if (condition.value.trim()) out.condition = condition.value;
      if (severity.value) out.severity = severity.value as Severity;
      if (message.value.trim()) out.message = message.value.trim();
      if (proxy.checked) out.require_execution_proxy = true;
      return out;
    },
    conditionError(text, position) {
      const value = condition.value;
      if (position === null) {
        conditionErr.show(text);
      } else {
        const { line, column, lineText } = lineColumn(value, position);
        conditionErr.show(`${text} (line ${line}, column ${column}; position ${position})`);
        conditionErr.el.dataset.position = String(position);
        conditionErr.el.append(
          h(
            'pre',
            { class: 'caret mono', 'aria-hidden': 'true', 'data-testid': 'rule-condition-caret' },
            `${lineText}\n${' '.repeat(column - 1)}^`,
          ),
        );
        condition.setSelectionRange(position, position);
      }
      condition.focus();
    },
    ruleError(text) {
      mount(ruleErr, text);
      if (text) ruleErr.setAttribute('role', 'alert');
      else ruleErr.removeAttribute('role');
    },
    clearErrors() {
      conditionErr.show(null);
      delete conditionErr.el.dataset.position;
      editor.ruleError(null);
    },
    setIndex(index) {
      mount(title, `Rule ${index + 1}`);
      editor.card.dataset.index = String(index);
    },
  };
  condition.addEventListener('input', () => {
    conditionErr.show(null);
    delete conditionErr.el.dataset.position;
  });

  editor.card = h(
    'section',
    { class: 'card rule', 'data-testid': 'rule-card', 'aria-label': 'Rule' },
    h(
      'div',
      { class: 'rule-head' },
      title,
      h(
        'div',
        { class: 'row' },
        button('↑', () => onMove(editor, -1), { class: 'btn btn-small', 'aria-label': 'Move rule up', 'data-testid': 'rule-up' }),
        button('↓', () => onMove(editor, 1), { class: 'btn btn-small', 'aria-label': 'Move rule down', 'data-testid': 'rule-down' }),
        button('Remove rule', () => onRemove(editor), { class: 'btn btn-small btn-danger', 'data-testid': 'rule-remove' }),
      ),
    ),
    h('div', { class: 'grid-3' }, field('Effect', effect), field('Severity', severity), field('Rule id (optional)', id)),
    field('Message (optional)', message),
    h(
      'fieldset',
      { class: 'field' },
      h('legend', null, 'Matches when (globs: * any run, ? one character; comma-separated; empty matches anything)'),
      h('div', { class: 'grid-3' }, DECLARED.map(globField)),
      h(
        'details',
        { open: executedSet },
        h('summary', null, 'What actually runs through Warden’s proxies (method, host, path, URL, MCP server)'),
        h('div', { class: 'grid-3' }, EXECUTED.map(globField)),
      ),
    ),
    h(
      'div',
      { class: 'field' },
      h('label', { for: condition.id }, 'Condition (CEL, optional)'),
      condition,
      h(
        'small',
        { class: 'hint' },
        'Sees input, context (the declared context, e.g. context.amount), agent and execution. Must evaluate to true or false.',
      ),
      conditionErr.el,
    ),
    h('label', { class: 'check' }, proxy, ' Allow only through Warden’s execution proxy'),
    field('Description (optional)', description),
    ruleErr,
  );
  return editor;
}

/** Where a refused save's message points: a rule's condition, a rule, the name, or nowhere in particular. */
export function locateError(message: string): {
  rule?: number;
  condition?: boolean;
  position?: number | null;
  name?: boolean;
  text: string;
} {
  const cel = /^rules\[(\d+)\](?: \('[^']*'\))?\.condition: ([\s\S]*?)(?: at position (\d+))?$/.exec(message);
  if (cel)
    return { rule: Number(cel[1]), condition: true, position: cel[3] === undefined ? null : Number(cel[3]), text: cel[2] ?? message };
  const rule = /(?:^|\/|\b)rules(?:\[|\/)(\d+)/.exec(message);
  if (rule) return { rule: Number(rule[1]), text: message };
  if (/(^|\/)name\b|policy named/.test(message)) return { name: true, text: message };
  return { text: message };
}

export async function policyEditorPage(ctx: PageContext): Promise<void> {
  const id = ctx.params[0];
  let policy: Policy | null = id ? (await api<PolicyResponse>('GET', `/policies/${id}`)).data : null;
  if (!ctx.alive()) return;
  const canWrite = ctx.session.permissions.includes('policies:write');
  const status = notice('policy-notice');
  const name = h('input', {
    type: 'text',
    maxlength: 200,
    required: true,
    autocomplete: 'off',
    'data-testid': 'policy-name',
    value: policy?.name ?? '',
  });
  const nameErr = fieldError(name, 'policy-name-error');
  const description = h('input', {
    type: 'text',
    maxlength: 2000,
    autocomplete: 'off',
    'data-testid': 'policy-description',
    value: policy?.description ?? '',
  });
  const enabled = h('input', { type: 'checkbox', checked: policy ? policy.enabled : true, 'data-testid': 'policy-enabled-input' });
  const mode = h(
    'select',
    { 'data-testid': 'policy-mode-input' },
    h('option', { value: 'enforce', selected: (policy?.mode ?? 'enforce') === 'enforce' }, 'Enforce'),
    h('option', { value: 'monitor', selected: policy?.mode === 'monitor' }, 'Monitor (record only)'),
  );
  const priority = h('input', {
    type: 'number',
    min: 0,
    max: 10000,
    step: 1,
    value: String(policy?.priority ?? 100),
    'data-testid': 'policy-priority',
  });
  const priorityErr = fieldError(priority, 'policy-priority-error');
  const rulesSlot = h('div', { class: 'rules', 'data-testid': 'rules' });
  const version = h('span', { 'data-testid': 'policy-version' }, policy ? `version ${policy.version}` : 'new');
  const whatIfSlot = h('div');
  const dangerSlot = h('div', { class: 'row' });
  let editors: RuleEditor[] = [];

  const renumber = () => {
    editors.forEach((e, i) => {
      e.setIndex(i);
    });
    mount(
      rulesSlot,
      editors.length
        ? editors.map((e) => e.card)
        : h('p', { class: 'empty', 'data-testid': 'rules-empty' }, 'No rules: this policy decides nothing.'),
    );
  };
  const addRule = (rule: PolicyRule) => {
    editors.push(ruleEditor(rule, remove, move));
    renumber();
  };
  const remove = (editor: RuleEditor) => {
    editors = editors.filter((e) => e !== editor);
    renumber();
  };
  const move = (editor: RuleEditor, by: -1 | 1) => {
    const at = editors.indexOf(editor);
    const to = at + by;
    if (to < 0 || to >= editors.length) return;
    [editors[at], editors[to]] = [editors[to] as RuleEditor, editors[at] as RuleEditor];
    renumber();
    editor.card.querySelector<HTMLButtonElement>(by < 0 ? '[data-testid="rule-up"]' : '[data-testid="rule-down"]')?.focus();
  };
  for (const rule of policy?.rules ?? []) addRule(rule);
  if (!policy) addRule({ effect: 'block' });
  renumber();

  /** The draft as the API takes it. */
  const draft = () => ({
    name: name.value.trim(),
    description: description.value.trim(),
    enabled: enabled.checked,
    mode: mode.value as PolicyMode,
    priority: Number(priority.value),
    rules: editors.map((e) => e.read()),
  });

  const clearErrors = () => {
    status.clear();
    nameErr.show(null);
    priorityErr.show(null);
    for (const e of editors) e.clearErrors();
  };

  /** Puts a refused save's error next to what it names; the notice says it was not saved. */
  const showError = (err: unknown) => {
    status.error(err);
    if (!(err instanceof ApiError)) return;
    const where = locateError(err.message);
    const editor = where.rule === undefined ? undefined : editors[where.rule];
    if (editor && where.condition) editor.conditionError(where.text, where.position ?? null);
    else if (editor) {
      editor.ruleError(describeError(err));
      editor.card.scrollIntoView({ block: 'nearest' });
    } else if (where.name || err.code === 'conflict') {
      nameErr.show(err.message);
      name.focus();
    } else if (/priority/.test(err.message)) priorityErr.show(err.message);
  };

  const save = h(
    'button',
    { type: 'submit', class: 'btn btn-primary', 'data-testid': 'policy-save', disabled: !canWrite },
    policy ? 'Save changes' : 'Create policy',
  );
  const form = h(
    'form',
    {
      class: 'policy-form',
      novalidate: true,
      onsubmit: async (event: Event) => {
        event.preventDefault();
        clearErrors();
        const d = draft();
        if (!d.name) {
          nameErr.show('A policy needs a name.');
          name.focus();
          return;
        }
        if (!Number.isInteger(d.priority) || d.priority < 0 || d.priority > 10000) {
          priorityErr.show('Priority is a whole number from 0 to 10000.');
          priority.focus();
          return;
        }
        try {
          if (policy) {
            const body: PolicyUpdate = { ...d, description: d.description || null };
            policy = (await busy(save, () => api<PolicyResponse>('PATCH', `/policies/${policy?.id}`, body))).data;
            if (!ctx.alive()) return;
            mount(version, `version ${policy.version}`);
            status.ok(`Saved: “${policy.name}” is at version ${policy.version} and decides from the next request on.`);
          } else {
            const body: PolicyCreate = { ...d, description: d.description || undefined };
            if (!body.description) delete body.description;
            const created = (await busy(save, () => api<PolicyResponse>('POST', '/policies', body))).data;
            if (!ctx.alive()) return;
            ctx.navigate(`#/policies/${created.id}`);
          }
        } catch (err) {
          if (ctx.alive()) showError(err);
        }
      },
    },
    h(
      'section',
      { class: 'card form' },
      h('div', { class: 'grid-2' }, h('div', null, field('Name', name), nameErr.el), field('Description (optional)', description)),
      h(
        'div',
        { class: 'grid-3' },
        field('Mode', mode),
        h(
          'div',
          null,
          field('Priority', priority, 'Among matching rules of the same effect, the higher priority is reported.'),
          priorityErr.el,
        ),
        h('div', { class: 'field' }, h('span', { class: 'label' }, 'Status'), h('label', { class: 'check' }, enabled, ' Enabled')),
      ),
    ),
    h(
      'section',
      { class: 'section', 'aria-labelledby': 'rules-title' },
      h(
        'div',
        { class: 'section-header' },
        h('h2', { id: 'rules-title' }, 'Rules'),
        button(
          'Add rule',
          () => {
            addRule({ effect: 'block' });
            editors.at(-1)?.card.querySelector<HTMLSelectElement>('select')?.focus();
          },
          { 'data-testid': 'rule-add' },
        ),
      ),
      rulesSlot,
    ),
    status.el,
    canWrite ? null : h('p', { class: 'muted' }, 'This key lacks policies:write, so Warden will refuse a change.'),
    h(
      'div',
      { class: 'row' },
      save,
      whatIfButton(
        ctx,
        () => {
          const d = draft();
          return { ...d, description: d.description || undefined };
        },
        () => policy?.id ?? null,
        whatIfSlot,
        () => clearErrors(),
        (err) => showError(err),
      ),
      h('a', { href: '#/policies', class: 'btn' }, 'Back to policies'),
    ),
    whatIfSlot,
  );

  const idleDanger = () => {
    if (!policy || !canWrite) return mount(dangerSlot);
    mount(
      dangerSlot,
      button('Delete policy…', () => askDelete(), { class: 'btn btn-danger', 'data-testid': 'policy-delete' }),
    );
  };
  const askDelete = () =>
    confirmInline(dangerSlot, {
      text: `Delete “${policy?.name}” and its ${editors.length} rule(s)? It stops deciding at the next request. Audit events keep its name.`,
      yes: 'Yes, delete it',
      testid: 'policy-delete',
      onCancel: idleDanger,
      onYes: async (btn) => {
        try {
          await busy(btn, () => api('DELETE', `/policies/${policy?.id}`));
          ctx.navigate('#/policies');
        } catch (err) {
          status.error(err);
          idleDanger();
        }
      },
    });
  idleDanger();

  mount(
    ctx.root,
    h('p', { class: 'crumbs' }, h('a', { href: '#/policies' }, '← All policies')),
    pageHeader(policy ? `Policy: ${policy.name}` : 'New policy', h('span', { class: 'muted' }, version)),
    form,
    h('section', { class: 'section danger-zone', 'aria-label': 'Delete' }, dangerSlot),
  );
  if (!policy) name.focus();
}

/** The "What if?" controls (what-if.ts): a draft error it meets is shown in the editor like a save's. */
function whatIfButton(
  ctx: PageContext,
  draft: () => PolicyCreate,
  policyId: () => string | null,
  slot: HTMLElement,
  onStart: () => void,
  onDraftError: (err: ApiError) => void,
): Child {
  return whatIfPanel(ctx, { draft, policyId, slot, onStart, onDraftError });
}
