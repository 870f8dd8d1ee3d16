/** Settings: the default decision per environment, for acts that no policy rule matches. */
import { api } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { AgentEnvironment, DefaultDecision, Settings, SettingsResponse, SettingsUpdate } from '../types.ts';
import { busy, cap, field, notice, pageHeader, stat } from '../ui.ts';

const ENVIRONMENTS: AgentEnvironment[] = ['development', 'staging', 'production'];

const DECISIONS: { value: DefaultDecision; label: string }[] = [
  { value: 'allow', label: 'Allow' },
  { value: 'block', label: 'Block' },
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

  const show = (s: Settings) => {
    mount(
      current,
      ENVIRONMENTS.map((env) =>
        stat(`Default in ${env}`, cap(s.default_decision[env]), `settings-current-${env}`, 'When no policy rule matches'),
      ),
    );
    for (const env of ENVIRONMENTS) (selects.get(env) as HTMLSelectElement).value = s.default_decision[env];
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

  mount(ctx.root, pageHeader('Settings'), current, form);
  try {
    const s = (await api<SettingsResponse>('GET', '/settings')).data;
    if (ctx.alive()) show(s);
  } catch (err) {
    if (ctx.alive()) status.error(err);
  }
}
