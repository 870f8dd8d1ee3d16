/** Compliance: the score, its parts, and each control with pass / fail / not applicable. */
import { api } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { AuditSigningKeyResponse, ComplianceControl, ComplianceStatus } from '../types.ts';
import { badge, button, dash, notice, pageHeader, stat, type Tone, table, time } from '../ui.ts';

const CONTROL_STATUS: Record<ComplianceControl['status'], [string, Tone]> = {
  pass: ['Pass', 'good'],
  fail: ['Fail', 'bad'],
  not_applicable: ['Not applicable', 'neutral'],
};

const pct = (n: number) => `${n.toFixed(1)} %`;

/** Who besides Warden vouches for the audit log: its witnesses, or the plain statement that none do. */
function witnessLine(key: AuditSigningKeyResponse['data']): HTMLElement {
  if (key.witnesses.length === 0) {
    const el = h(
      'p',
      { class: 'notice notice-warning', 'data-testid': 'audit-witnesses' },
      h('strong', null, 'The audit log is unwitnessed. '),
      'No independent witness cosigns its checkpoints, so Warden’s signing key alone could show two parties two different histories. The operator adds witnesses with WARDEN_AUDIT_WITNESSES.',
    );
    el.dataset.witnessed = 'false';
    return el;
  }
  const el = h(
    'p',
    { class: 'muted', 'data-testid': 'audit-witnesses' },
    h('strong', null, `Audit log witnessed by ${key.witness_quorum} of ${key.witnesses.length}: `),
    key.witnesses.map((w) => w.name).join(', '),
    '. Each cosigns a checkpoint only if it extends the last one it saw.',
  );
  el.dataset.witnessed = 'true';
  return el;
}

export async function compliancePage(ctx: PageContext): Promise<void> {
  const status = notice('compliance-notice');
  const body = h('div');
  const load = async () => {
    status.clear();
    try {
      const [c, key] = await Promise.all([
        api<ComplianceStatus>('GET', '/compliance').then((r) => r.data),
        api<AuditSigningKeyResponse>('GET', '/audit/signing-key').then((r) => r.data),
      ]);
      if (!ctx.alive()) return;
      const passing = c.controls.filter((x) => x.status === 'pass').length;
      const applicable = c.controls.filter((x) => x.status !== 'not_applicable').length;
      mount(
        body,
        h(
          'div',
          { class: 'stats' },
          stat('Compliance score', pct(c.score), 'compliance-score', 'Weighted mean of the applicable controls'),
          stat('Framework score', pct(c.framework_score), 'compliance-framework-score', 'Framework requirements whose controls all pass'),
          stat('Control coverage', pct(c.control_coverage), 'compliance-coverage', 'Controls that have subjects to check'),
          stat('Risk score', pct(c.risk_score), 'compliance-risk-score', 'Higher is riskier'),
        ),
        h('p', { class: 'muted' }, `${passing} of ${applicable} applicable controls pass. Calculated `, time(c.calculated_at), '.'),
        witnessLine(key),
        table(
          'Controls',
          [
            {
              header: 'Control',
              cell: (x) => h('div', null, h('strong', null, x.name), h('div', { class: 'muted small' }, x.description)),
            },
            {
              header: 'Status',
              cell: (x) => {
                const [text, tone] = CONTROL_STATUS[x.status] ?? [x.status, 'neutral'];
                const el = badge(text, tone, 'control-status');
                el.dataset.status = x.status;
                return el;
              },
            },
            { header: 'Score', cell: (x) => (x.status === 'not_applicable' ? dash(null) : pct(x.score)), class: 'num' },
            { header: 'Weight', cell: (x) => String(x.weight), class: 'num' },
            {
              header: 'Frameworks',
              cell: (x) =>
                h(
                  'ul',
                  { class: 'tags' },
                  x.frameworks.map((f) => h('li', { class: 'tag mono' }, f)),
                ),
            },
          ],
          c.controls,
          { testid: 'compliance-controls', rowTestid: 'control-row', rowId: (x) => x.id, empty: 'No controls.' },
        ),
      );
    } catch (err) {
      if (ctx.alive()) status.error(err);
    }
  };
  mount(
    ctx.root,
    pageHeader(
      'Compliance',
      button('Recalculate', () => void load(), { 'data-testid': 'compliance-refresh' }),
    ),
    status.el,
    body,
  );
  await load();
}
