/** Billing: the current plan, and changing it (which fires billing.updated). */
import { api } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { Billing, Plan, PlanChange } from '../types.ts';
import { busy, cap, field, notice, pageHeader, stat } from '../ui.ts';

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
    { name: 'plan', 'data-testid': 'billing-plan-select' },
    PLANS.map((p) => h('option', { value: p.value }, p.label)),
  );
  const save = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'billing-save' }, 'Change plan');

  const show = (b: Billing['data']) => {
    const label = PLANS.find((p) => p.value === b.plan)?.label ?? b.plan;
    mount(current, stat('Current plan', label, 'billing-plan'), stat('Billing status', cap(b.billing_status), 'billing-status'));
    select.value = b.plan;
  };

  const form = h(
    'form',
    {
      class: 'card form',
      'aria-labelledby': 'plan-title',
      onsubmit: async (event: Event) => {
        event.preventDefault();
        status.clear();
        const body: PlanChange = { plan: select.value as Plan };
        try {
          const b = (await busy(save, () => api<Billing>('PUT', '/billing', body))).data;
          if (!ctx.alive()) return;
          show(b);
          ctx.updateSession({ workspace: { ...ctx.session.workspace, plan: b.plan } });
          status.ok(`Plan is now ${b.plan}. Webhook endpoints subscribed to billing.updated are notified of changes.`);
        } catch (err) {
          status.error(err);
        }
      },
    },
    h('h2', { id: 'plan-title' }, 'Change plan'),
    field('Plan', select),
    status.el,
    save,
  );

  mount(ctx.root, pageHeader('Billing'), current, form);
  try {
    const b = (await api<Billing>('GET', '/billing')).data;
    if (ctx.alive()) show(b);
  } catch (err) {
    if (ctx.alive()) status.error(err);
  }
}
