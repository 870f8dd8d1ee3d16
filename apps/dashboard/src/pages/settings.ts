/** Settings: the default decision per environment, for acts that no policy rule matches, and what the audit log keeps of MCP arguments. */
import { api } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { AgentEnvironment, AuditMcpArguments, DefaultDecision, Settings, SettingsResponse, SettingsUpdate } from '../types.ts';
import { busy, cap, field, notice, pageHeader, stat } from '../ui.ts';

const ENVIRONMENTS: AgentEnvironment[] = ['development', 'staging', 'production'];

const DECISIONS: { value: DefaultDecision; label: string }[] = [
  { value: 'allow', label: 'Allow' },
  { value: 'block', label: 'Block' },
];

const KEPT: { value: AuditMcpArguments; label: string }[] = [
  { value: 'redacted', label: 'The arguments, secrets redacted (up to 8 KiB)' },
  { value: 'digest', label: 'Their SHA-256 only' },
];

export async function settingsPage(ctx: PageContext): Promise<void> {
  const status = notice('settings-notice');
  const current = h('div', { class: 'stats' });
  const selects = new Map(
    ENVIRONMENTS.map((env) => [
      env,
      h(
        'select',
        { name: `default-${env}`, 'data-testid': `settings-default-${env}` },
        DECISIONS.map((d) => h('option', { value: d.value }, d.label)),
      ),
    ]),
  );
  const save = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'settings-save' }, 'Save defaults');
  const kept = h(
    'select',
    { name: 'audit-mcp-arguments', 'data-testid': 'settings-audit-mcp-arguments' },
    KEPT.map((k) => h('option', { value: k.value }, k.label)),
  ) as HTMLSelectElement;
  const keptStatus = notice('settings-audit-notice');
  const saveKept = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'settings-audit-save' }, 'Save');

  const show = (s: Settings) => {
    mount(
      current,
      ENVIRONMENTS.map((env) =>
        stat(`Default in ${env}`, cap(s.default_decision[env]), `settings-current-${env}`, 'When no policy rule matches'),
      ),
    );
    for (const env of ENVIRONMENTS) (selects.get(env) as HTMLSelectElement).value = s.default_decision[env];
    kept.value = s.audit_mcp_arguments;
  };

  const form = h(
    'form',
    {
      class: 'card form',
      'aria-labelledby': 'defaults-title',
      onsubmit: async (event: Event) => {
        event.preventDefault();
        status.clear();
        const body: SettingsUpdate = {
          default_decision: Object.fromEntries(
            ENVIRONMENTS.map((env) => [env, (selects.get(env) as HTMLSelectElement).value as DefaultDecision]),
          ),
        };
        try {
          const s = (await busy(save, () => api<SettingsResponse>('PATCH', '/settings', body))).data;
          if (!ctx.alive()) return;
          show(s);
          status.ok('Defaults saved. They apply to the next decision.');
        } catch (err) {
          status.error(err);
        }
      },
    },
    h('h2', { id: 'defaults-title' }, 'Default decision'),
    h(
      'p',
      { class: 'muted' },
      'What a decision comes to when no rule of an enforcing policy matches it, per agent environment. ' +
        'Blocking by default in production is a compliance control.',
    ),
    ENVIRONMENTS.map((env) => field(cap(env), selects.get(env) as HTMLSelectElement)),
    status.el,
    save,
  );

  const audit = h(
    'form',
    {
      class: 'card form',
      'aria-labelledby': 'audit-title',
      onsubmit: async (event: Event) => {
        event.preventDefault();
        keptStatus.clear();
        const body: SettingsUpdate = { audit_mcp_arguments: kept.value as AuditMcpArguments };
        try {
          const s = (await busy(saveKept, () => api<SettingsResponse>('PATCH', '/settings', body))).data;
          if (!ctx.alive()) return;
          show(s);
          keptStatus.ok('Saved. Calls from now on are recorded this way; earlier events keep what they were recorded with.');
        } catch (err) {
          keptStatus.error(err);
        }
      },
    },
    h('h2', { id: 'audit-title' }, 'MCP arguments in the audit log'),
    h(
      'p',
      { class: 'muted' },
      'What each tool call or prompt event keeps of the arguments it was sent. Either way the log keeps their SHA-256, ' +
        'which proves which arguments were decided on.',
    ),
    field('Keep', kept),
    keptStatus.el,
    saveKept,
  );

  mount(ctx.root, pageHeader('Settings'), current, form, audit);
  try {
    const s = (await api<SettingsResponse>('GET', '/settings')).data;
    if (ctx.alive()) show(s);
  } catch (err) {
    if (ctx.alive()) status.error(err);
  }
}
