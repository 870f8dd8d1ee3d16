/** API keys: list (never a secret), issue with chosen permissions (the secret shown once), revoke after confirmation. */
import { api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount, uid } from '../dom.ts';
import type { ApiKey, ApiKeyCreate, ApiKeyPage, ApiKeyResponse, ApiKeyWithSecret, Permission } from '../types.ts';
import { badge, busy, button, confirmInline, field, fieldError, loading, notice, oneTimeSecret, pageHeader, table, time } from '../ui.ts';

/** Every permission, grouped as people think of them, with what it allows. */
const GROUPS: { title: string; permissions: [Permission, string][] }[] = [
  {
    title: 'Runtime (for agents and their hosts)',
    permissions: [
      ['runtime:evaluate', 'ask for decisions (POST /policy/evaluate)'],
      ['runtime:execute', 'act through Warden’s proxies (/runtime/*)'],
    ],
  },
  {
    title: 'Configuration',
    permissions: [
      ['agents:read', 'read agents'],
      ['agents:write', 'register, change and suspend agents'],
      ['policies:read', 'read policies and settings'],
      ['policies:write', 'change policies and settings'],
      ['mcp_servers:read', 'read MCP servers'],
      ['mcp_servers:write', 'register and change MCP servers'],
    ],
  },
  {
    title: 'Approvals',
    permissions: [
      ['approvals:read', 'read approvals'],
      ['approvals:write', 'request approvals'],
      ['approvals:decide', 'approve and reject (never implied by another permission)'],
    ],
  },
  {
    title: 'Audit and compliance',
    permissions: [
      ['audit:read', 'read the audit log, proofs and charts'],
      ['audit:write', 'record audit events'],
      ['compliance:read', 'read the compliance score'],
    ],
  },
  { title: 'Dashboard', permissions: [['admin', 'sign in to this dashboard, manage webhooks and keys']] },
];

const tag = (text: string) => h('li', { class: 'tag mono' }, text);

export async function keysPage(ctx: PageContext): Promise<void> {
  const status = notice('keys-notice');
  const list = h('div', null, loading());
  const more = h('div', { class: 'pager' });
  const formSlot = h('div');
  const secretSlot = h('div');
  const held = new Set(ctx.session.permissions);
  let rows: ApiKey[] = [];
  let cursor: string | null = null;

  const revokeCell = (k: ApiKey): HTMLElement => {
    const slot = h('div', { class: 'row-actions' });
    const idle = () => {
      if (k.revoked_at) return mount(slot, h('span', { class: 'muted' }, '—'));
      if (k.id === ctx.session.key_id)
        return mount(slot, h('span', { class: 'muted small', 'data-testid': 'key-own' }, 'Used by this session'));
      mount(
        slot,
        button('Revoke…', () => ask(), {
          class: 'btn btn-danger btn-small',
          'data-testid': 'key-revoke',
          'aria-label': `Revoke ${k.name}`,
        }),
      );
    };
    const ask = () =>
      confirmInline(slot, {
        text: `Revoke “${k.name}”? Requests with it fail at once, and its dashboard sessions end. This cannot be undone.`,
        yes: 'Yes, revoke',
        testid: 'key-revoke',
        onCancel: idle,
        onYes: async (btn) => {
          status.clear();
          try {
            const revoked = (await busy(btn, () => api<ApiKeyResponse>('DELETE', `/keys/${k.id}`))).data;
            if (!ctx.alive()) return;
            status.ok(`Key “${revoked.name}” revoked.`);
            await load(false);
          } catch (err) {
            status.error(err);
            idle();
          }
        },
      });
    idle();
    return slot;
  };

  const renderList = () =>
    mount(
      list,
      table<ApiKey>(
        'API keys, newest first',
        [
          { header: 'Name', cell: (k) => h('strong', { 'data-testid': 'key-name-cell' }, k.name) },
          {
            header: 'Key',
            cell: (k) =>
              h('span', { class: 'mono', 'data-testid': 'key-prefix', title: 'The first characters of the key' }, `${k.prefix}…`),
          },
          { header: 'Permissions', cell: (k) => h('ul', { class: 'tags', 'data-testid': 'key-permissions' }, k.permissions.map(tag)) },
          { header: 'Created', cell: (k) => time(k.created_at) },
          {
            header: 'Status',
            cell: (k) =>
              k.revoked_at
                ? h('div', null, badge('Revoked', 'bad', 'key-status'), h('div', { class: 'muted small' }, time(k.revoked_at)))
                : badge('Active', 'good', 'key-status'),
          },
          { header: 'Actions', cell: revokeCell },
        ],
        rows,
        { testid: 'keys-table', rowTestid: 'key-row', rowId: (k) => k.id, empty: 'No keys.' },
      ),
    );

  const load = async (append: boolean) => {
    try {
      const page = await api<ApiKeyPage>('GET', withQuery('/keys', { limit: 50, cursor: append ? cursor : null }));
      if (!ctx.alive()) return;
      rows = append ? [...rows, ...page.data] : page.data;
      cursor = page.has_more ? page.next_cursor : null;
      renderList();
      mount(more, cursor ? button('Load more keys', () => void load(true), { 'data-testid': 'keys-more' }) : null);
    } catch (err) {
      if (ctx.alive()) status.error(err);
    }
  };

  const showForm = () => {
    mount(secretSlot);
    const formStatus = notice('key-create-error');
    const name = h('input', {
      type: 'text',
      name: 'name',
      maxlength: 200,
      required: true,
      autocomplete: 'off',
      'data-testid': 'key-name-input',
    });
    const nameError = fieldError(name, 'key-name-error');
    const boxes: { permission: Permission; input: HTMLInputElement }[] = [];
    const groups = GROUPS.map((g) => {
      const legendId = uid('perm-group');
      return h(
        'div',
        { class: 'perm-group', role: 'group', 'aria-labelledby': legendId },
        h('div', { class: 'perm-group-title', id: legendId }, g.title),
        g.permissions.map(([permission, what]) => {
          const lacking = !held.has(permission);
          const input = h('input', {
            type: 'checkbox',
            name: 'permissions',
            value: permission,
            disabled: lacking,
            'data-testid': `key-perm-${permission}`,
          });
          boxes.push({ permission, input });
          return h(
            'label',
            {
              class: lacking ? 'check disabled' : 'check',
              title: lacking ? 'Your key lacks this permission, so it cannot grant it.' : null,
            },
            input,
            ' ',
            h('span', { class: 'mono' }, permission),
            h('span', { class: 'muted small' }, ` — ${what}${lacking ? ' (your key lacks it)' : ''}`),
          );
        }),
      );
    });
    const permsError = h('div', { class: 'field-error', 'data-testid': 'key-permissions-error' });
    const submit = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'key-create' }, 'Issue key');
    const form = h(
      'form',
      {
        class: 'card form',
        novalidate: true,
        'aria-labelledby': 'key-form-title',
        onsubmit: async (event: Event) => {
          event.preventDefault();
          formStatus.clear();
          const chosen = boxes.filter((b) => b.input.checked).map((b) => b.permission);
          nameError.show(name.value.trim() ? null : 'Give the key a name, so you can tell it apart later.');
          mount(permsError, chosen.length ? null : 'Choose at least one permission.');
          if (!name.value.trim() || chosen.length === 0) {
            (name.value.trim() ? boxes.find((b) => !b.input.disabled)?.input : name)?.focus();
            return;
          }
          const body: ApiKeyCreate = { name: name.value.trim(), permissions: chosen };
          try {
            const created = (await busy(submit, () => api<ApiKeyWithSecret>('POST', '/keys', body))).data;
            if (!ctx.alive()) return;
            mount(formSlot);
            mount(
              secretSlot,
              oneTimeSecret({
                title: `Key “${created.key.name}” issued`,
                label: 'API key',
                secret: created.secret,
                note: [
                  h('strong', null, 'Copy this key now: it is shown only once. '),
                  'Warden keeps only its hash. Send it as ',
                  h('code', null, 'Authorization: Bearer <key>'),
                  '.',
                ],
                extra: button('I have copied it', () => mount(secretSlot), { class: 'btn btn-primary', 'data-testid': 'secret-done' }),
              }),
            );
            secretSlot.dataset.id = created.key.id;
            await load(false);
          } catch (err) {
            formStatus.error(err);
          }
        },
      },
      h('h2', { id: 'key-form-title' }, 'Issue an API key'),
      field('Name', name, 'What uses it, e.g. “billing agent (production)”.'),
      nameError.el,
      h(
        'fieldset',
        { class: 'field' },
        h('legend', null, 'Permissions'),
        h('p', { class: 'muted small' }, 'Grant only what it needs. You can grant only permissions your own key holds.'),
        groups,
        permsError,
      ),
      formStatus.el,
      h(
        'div',
        { class: 'row' },
        submit,
        button('Cancel', () => mount(formSlot), { 'data-testid': 'key-cancel' }),
      ),
    );
    mount(formSlot, form);
    name.focus();
  };

  mount(
    ctx.root,
    pageHeader(
      'API keys',
      button('Refresh', () => void load(false), { 'data-testid': 'keys-refresh' }),
      button('Issue a key', () => showForm(), { class: 'btn btn-primary', 'data-testid': 'key-new' }),
    ),
    h(
      'p',
      { class: 'lead' },
      'Keys authenticate to the v1 API and, with admin, to this dashboard. A key is shown once, when it is issued; Warden keeps only its hash. Issuing and revoking are recorded in the audit log.',
    ),
    formSlot,
    secretSlot,
    status.el,
    list,
    more,
  );
  await load(false);
}
