/** Approvals: pending first (decide them here), then the decided and expired ones. */
import { api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { type Child, h, mount, uid } from '../dom.ts';
import type { Approval, ApprovalDecision, ApprovalPage, ApprovalResponse } from '../types.ts';
import { badge, busy, button, dash, loading, notice, pageHeader, type Tone, table, time } from '../ui.ts';

const STATUS: Record<Approval['status'], [string, Tone]> = {
  pending: ['Pending', 'info'],
  approved: ['Approved', 'good'],
  rejected: ['Rejected', 'bad'],
  expired: ['Expired', 'neutral'],
};

function approvalStatus(a: Approval): HTMLElement {
  const [text, tone] = STATUS[a.status] ?? [a.status, 'neutral'];
  const el = badge(text, tone, 'approval-status');
  el.dataset.status = a.status;
  return el;
}

const mono = (text: string | null) => (text ? h('span', { class: 'mono' }, text) : dash(null));
const json = (value: unknown, testid: string) => h('pre', { class: 'json mono', 'data-testid': testid }, JSON.stringify(value, null, 2));

/** The headers that will be sent, one `name: value` a line (credentials arrive redacted from the server). */
function headerLines(headers: unknown): Child {
  if (typeof headers !== 'object' || headers === null || Object.keys(headers).length === 0) return null;
  const lines = Object.entries(headers as Record<string, unknown>).map(([name, value]) => `${name}: ${String(value)}`);
  return h('pre', { class: 'json mono', 'data-testid': 'approval-execution-headers' }, lines.join('\n'));
}

/** What runs if approved: method and URL (headers and body), or MCP server, tool and arguments. */
function execution(a: Approval): Child {
  const run = a.execution as Record<string, unknown> | null;
  if (!run) return a.input_digest ? h('span', { class: 'muted' }, 'a decision only (no execution)') : dash(null);
  if (run.mode === 'http_proxy') {
    return h('div', { 'data-testid': 'approval-execution' }, [
      h('span', { class: 'mono' }, `${String(run.method)} ${String(run.url)}`),
      headerLines(run.headers),
      run.body === null || run.body === undefined ? null : json(run.body, 'approval-execution-body'),
    ]);
  }
  return h('div', { 'data-testid': 'approval-execution' }, [
    h('span', { class: 'mono' }, `${String(run.server)} \u2192 ${String(run.tool)}`),
    json(run.arguments ?? {}, 'approval-execution-arguments'),
  ]);
}

function facts(a: Approval): Child {
  const items: [string, Child][] = [
    ['Agent', dash(a.agent)],
    ['Environment', dash(a.environment)],
    ['Action', mono(a.action)],
    ['Resource', mono(a.resource)],
    ['Tool', mono(a.tool)],
    ['Will run', execution(a)],
    ['Context', Object.keys(a.context).length ? json(a.context, 'approval-context') : dash(null)],
    ['Policy', a.rule ? `${a.policy ?? ''} (rule ${a.rule}${a.policy_version ? `, version ${a.policy_version}` : ''})` : dash(a.policy)],
    ['Type', a.type],
    ['Priority', a.priority],
    ['Requested', time(a.created_at)],
    ['Expires', time(a.expires_at)],
  ];
  return h(
    'dl',
    { class: 'facts' },
    items.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]),
  );
}

export async function approvalsPage(ctx: PageContext): Promise<void> {
  const pendingSlot = h('div', null, loading());
  const otherSlot = h('div', null, loading());
  const status = notice('approvals-notice');
  const otherMore = h('div', { class: 'pager' });
  const canDecide = ctx.session.permissions.includes('approvals:decide');
  let others: Approval[] = [];
  let othersCursor: string | null = null;

  const card = (a: Approval): HTMLElement => {
    const noteId = uid('note');
    const note = h('textarea', { id: noteId, rows: 2, maxlength: 2000, 'data-testid': 'approval-note', name: 'decision_note' });
    const cardStatus = notice('approval-error');
    const decide = async (btn: HTMLButtonElement, decision: ApprovalDecision['status']) => {
      cardStatus.clear();
      const text = note.value.trim();
      if (decision === 'rejected' && !text) {
        cardStatus.error(new Error('A note is required to reject: say why, so the requester knows (decision_note_required).'));
        note.setAttribute('aria-invalid', 'true');
        note.focus();
        return;
      }
      note.removeAttribute('aria-invalid');
      const body: ApprovalDecision = { status: decision };
      if (text) body.decision_note = text;
      try {
        const decided = (await busy(btn, () => api<ApprovalResponse>('PATCH', `/approvals/${a.id}`, body))).data;
        if (!ctx.alive()) return;
        status.ok(`“${decided.title}” ${decided.status === 'approved' ? 'approved' : 'rejected'}.`);
        await load();
      } catch (err) {
        cardStatus.error(err);
      }
    };
    const approve: HTMLButtonElement = button('Approve', () => void decide(approve, 'approved'), {
      class: 'btn btn-primary',
      'data-testid': 'approval-approve',
    });
    const reject: HTMLButtonElement = button('Reject', () => void decide(reject, 'rejected'), {
      class: 'btn btn-danger',
      'data-testid': 'approval-reject',
    });
    return h(
      'article',
      { class: 'card approval', 'data-testid': 'approval-card', 'data-id': a.id, 'aria-labelledby': `${noteId}-title` },
      h('div', { class: 'approval-head' }, h('h3', { id: `${noteId}-title` }, a.title), approvalStatus(a)),
      a.description ? h('p', null, a.description) : null,
      facts(a),
      h(
        'div',
        { class: 'field' },
        h('label', { for: noteId }, 'Decision note ', h('span', { class: 'muted' }, '(required to reject)')),
        note,
      ),
      canDecide ? null : h('p', { class: 'muted' }, 'This key lacks approvals:decide, so Warden will refuse a decision.'),
      cardStatus.el,
      h('div', { class: 'row' }, approve, reject),
    );
  };

  const loadOthers = async (append: boolean) => {
    const page = await api<ApprovalPage>('GET', withQuery('/approvals', { limit: 50, cursor: append ? othersCursor : null }));
    if (!ctx.alive()) return;
    const decided = page.data.filter((a) => a.status !== 'pending');
    others = append ? [...others, ...decided] : decided;
    othersCursor = page.has_more ? page.next_cursor : null;
    mount(
      otherSlot,
      table(
        'Decided and expired approvals',
        [
          { header: 'Title', cell: (a) => a.title },
          { header: 'Status', cell: (a) => approvalStatus(a) },
          { header: 'Agent', cell: (a) => dash(a.agent) },
          { header: 'Action', cell: (a) => (a.action ? h('span', { class: 'mono' }, a.action) : dash(null)) },
          { header: 'Decision note', cell: (a) => dash(a.decision_note) },
          { header: 'Decided by', cell: (a) => dash(a.decided_by) },
          { header: 'Decided', cell: (a) => time(a.decided_at) },
        ],
        others,
        { testid: 'approvals-decided', rowTestid: 'approval-row', rowId: (a) => a.id, empty: 'No decided approvals yet.' },
      ),
    );
    mount(
      otherMore,
      othersCursor
        ? button('Load more', () => void loadOthers(true).catch((e) => status.error(e)), { 'data-testid': 'approvals-more' })
        : null,
    );
  };

  const load = async () => {
    try {
      const pending = await api<ApprovalPage>('GET', withQuery('/approvals', { status: 'pending', limit: 100 }));
      if (!ctx.alive()) return;
      mount(
        pendingSlot,
        pending.data.length
          ? h('div', { class: 'cards', 'data-testid': 'approvals-pending' }, pending.data.map(card))
          : h('p', { class: 'empty', 'data-testid': 'approvals-pending-empty' }, 'Nothing is waiting for a decision.'),
        pending.has_more ? h('p', { class: 'muted' }, 'More pending approvals exist; decide these first.') : null,
      );
      await loadOthers(false);
    } catch (err) {
      if (ctx.alive()) status.error(err);
    }
  };

  mount(
    ctx.root,
    pageHeader(
      'Approvals',
      button('Refresh', () => void load(), { 'data-testid': 'approvals-refresh' }),
    ),
    status.el,
    h(
      'section',
      { class: 'section', 'aria-labelledby': 'pending-title' },
      h('h2', { id: 'pending-title' }, 'Waiting for a decision'),
      pendingSlot,
    ),
    h(
      'section',
      { class: 'section', 'aria-labelledby': 'decided-title' },
      h('h2', { id: 'decided-title' }, 'Decided and expired'),
      otherSlot,
      otherMore,
    ),
  );
  await load();
}
