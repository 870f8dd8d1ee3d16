/** Billing: the current plan, read-only. Plans are set by the operator with the CLI; they carry no limit the server enforces yet. */
import { api } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { Billing, Plan } from '../types.ts';
import { cap, field, notice, pageHeader, stat } from '../ui.ts';

const PLANS: { value: Plan; label: string }[] = [
  { value: 'free', label: 'Free' },
  { value: 'team', label: 'Team' },
  { value: 'business', label: 'Business' },
  { value: 'enterprise', label: 'Enterprise' },
];

export async function billingPage(ctx: PageContext): Promise<void> {
  const status = notice('billing-notice');
  const current = h('div', { class: 'stats' });
  const select = h(
    'select',
    { name: 'plan', 'data-testid': 'billing-plan-select', disabled: true, 'aria-describedby': 'plan-operator' },
    PLANS.map((p) => h('option', { value: p.value }, p.label)),
  );
  const command = (slug: string) => `npm run warden -- billing set-plan --workspace ${slug} --plan <free|team|business|enterprise>`;

  const show = (b: Billing['data']) => {
    const label = PLANS.find((p) => p.value === b.plan)?.label ?? b.plan;
    mount(current, stat('Current plan', label, 'billing-plan'), stat('Billing status', cap(b.billing_status), 'billing-status'));
    select.value = b.plan;
  };

  const card = h(
    'section',
    { class: 'card form', 'aria-labelledby': 'plan-title' },
    h('h2', { id: 'plan-title' }, 'Plan'),
    field('Plan', select),
    h(
      'p',
      { id: 'plan-operator', 'data-testid': 'billing-operator' },
      h('strong', null, 'Plans are set by the operator, not from the dashboard. '),
      'A plan carries no limit the server enforces today (rate limits, agents and retention are the same on every plan), so the dashboard does not offer to change it. The operator sets it with:',
    ),
    h('pre', { class: 'json mono', 'data-testid': 'billing-command' }, command(ctx.session.workspace.slug)),
    h('p', { class: 'muted' }, 'A change fires billing.updated to the webhook endpoints that subscribe to it.'),
    status.el,
  );

  mount(ctx.root, pageHeader('Billing'), current, card);
  try {
    const b = (await api<Billing>('GET', '/billing')).data;
    if (ctx.alive()) show(b);
  } catch (err) {
    if (ctx.alive()) status.error(err);
  }
}
