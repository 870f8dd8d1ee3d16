/** Webhook endpoints: list, create (secret shown once), pause/resume, rotate, delete, deliveries (with their payloads), replay, test. */
import { api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { type Child, h, mount, uid } from '../dom.ts';
import type {
  RotateSecret,
  WebhookDelivery,
  WebhookDeliveryDetailResponse,
  WebhookDeliveryPage,
  WebhookDeliveryResponse,
  WebhookEndpoint,
  WebhookEndpointCreate,
  WebhookEndpointPage,
  WebhookEndpointResponse,
  WebhookEndpointUpdate,
  WebhookEndpointWithSecret,
  WebhookEventType,
} from '../types.ts';
import { badge, busy, button, dash, field, loading, notice, pageHeader, type Tone, table, time } from '../ui.ts';

const EVENT_TYPES: { value: WebhookEventType; label: string }[] = [
  { value: '*', label: 'All events (*), including ones added later' },
  { value: 'agent.created', label: 'agent.created' },
  { value: 'policy.updated', label: 'policy.updated' },
  { value: 'audit.created', label: 'audit.created' },
  { value: 'audit.checkpoint', label: 'audit.checkpoint' },
  { value: 'audit.integrity_failed', label: 'audit.integrity_failed (the audit log cannot be signed)' },
  { value: 'approval.requested', label: 'approval.requested' },
  { value: 'approval.completed', label: 'approval.completed' },
  { value: 'billing.updated', label: 'billing.updated' },
];

function endpointStatus(endpoint: WebhookEndpoint): HTMLElement {
  if (endpoint.disabled) return badge('Disabled (410 Gone)', 'bad', 'webhook-status');
  if (endpoint.paused) return badge('Paused', 'warn', 'webhook-status');
  return badge('Active', 'good', 'webhook-status');
}

const DELIVERY_TONES: Record<WebhookDelivery['status'], [string, Tone]> = {
  pending: ['Pending', 'info'],
  succeeded: ['Succeeded', 'good'],
  failed: ['Failed', 'bad'],
  skipped: ['Skipped (endpoint paused)', 'neutral'],
};

function deliveryStatus(delivery: WebhookDelivery): HTMLElement {
  const [text, tone] = DELIVERY_TONES[delivery.status] ?? [delivery.status, 'neutral'];
  const el = badge(text, tone, 'delivery-status');
  el.dataset.status = delivery.status;
  return el;
}

function eventsList(events: string[]): Child {
  return h(
    'ul',
    { class: 'tags' },
    events.map((e) => h('li', { class: 'tag' }, e === '*' ? 'all events (*)' : e)),
  );
}

/** The signing secret, shown once, with a copy button. */
function secretPanel(secret: string, title: string, extra?: Child): HTMLElement {
  const titleId = uid('secret-title');
  const input = h('input', {
    id: uid('secret'),
    type: 'text',
    readonly: true,
    value: secret,
    class: 'mono',
    'data-testid': 'secret-value',
    spellcheck: 'false',
  });
  const copied = h('span', { class: 'muted', role: 'status', 'aria-live': 'polite', 'data-testid': 'secret-copied' });
  const copy = button(
    'Copy secret',
    async () => {
      input.select();
      try {
        await navigator.clipboard.writeText(secret);
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
    h('h2', { id: titleId }, title),
    h(
      'p',
      null,
      h('strong', null, 'Copy this signing secret now: it is shown only once. '),
      'Configure your receiver with it to verify the webhook-signature header (Standard Webhooks).',
    ),
    h('div', { class: 'field' }, h('label', { for: input.id }, 'Signing secret'), h('div', { class: 'row nowrap' }, input, copy)),
    copied,
    extra,
  );
}

export async function webhooksPage(ctx: PageContext): Promise<void> {
  const status = notice('webhooks-notice');
  const list = h('div', null, loading());
  const more = h('div', { class: 'pager' });
  let cursor: string | null = null;
  let rows: WebhookEndpoint[] = [];

  const renderList = () => {
    mount(
      list,
      table(
        'Webhook endpoints',
        [
          { header: 'URL', cell: (e) => h('a', { href: `#/webhooks/${e.id}`, class: 'mono url', 'data-testid': 'webhook-link' }, e.url) },
          { header: 'Description', cell: (e) => dash(e.description) },
          { header: 'Events', cell: (e) => eventsList(e.events) },
          { header: 'Status', cell: (e) => endpointStatus(e) },
          { header: 'Created', cell: (e) => time(e.created_at) },
          {
            header: 'Actions',
            cell: (e) => h('a', { href: `#/webhooks/${e.id}`, class: 'btn btn-small', 'data-testid': 'webhook-manage' }, 'Manage'),
          },
        ],
        rows,
        {
          testid: 'webhooks-table',
          rowTestid: 'webhook-row',
          rowId: (e) => e.id,
          empty: 'No webhook endpoints yet. Add one to receive signed events.',
        },
      ),
    );
  };

  const load = async (append: boolean) => {
    status.clear();
    try {
      const page = await api<WebhookEndpointPage>('GET', withQuery('/webhooks', { limit: 50, cursor: append ? cursor : null }));
      if (!ctx.alive()) return;
      rows = append ? [...rows, ...page.data] : page.data;
      cursor = page.has_more ? page.next_cursor : null;
      renderList();
      mount(more, cursor ? button('Load more endpoints', () => void load(true), { 'data-testid': 'webhooks-more' }) : null);
    } catch (err) {
      if (ctx.alive()) {
        status.error(err);
        mount(list);
      }
    }
  };

  mount(
    ctx.root,
    pageHeader(
      'Webhooks',
      button('Refresh', () => void load(false), { 'data-testid': 'webhooks-refresh' }),
      h('a', { href: '#/webhooks/new', class: 'btn btn-primary', 'data-testid': 'webhook-new' }, 'Add endpoint'),
    ),
    h(
      'p',
      { class: 'lead' },
      'Warden signs every event it sends (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature) and retries failed deliveries with backoff.',
    ),
    status.el,
    list,
    more,
  );
  await load(false);
}

export function webhookNewPage(ctx: PageContext): void {
  const status = notice('webhook-create-error');
  const url = h('input', {
    type: 'url',
    name: 'url',
    required: true,
    placeholder: 'https://example.com/webhooks/warden',
    'data-testid': 'webhook-url',
    autocomplete: 'off',
  });
  const description = h('input', {
    type: 'text',
    name: 'description',
    maxlength: 500,
    'data-testid': 'webhook-description',
    autocomplete: 'off',
  });
  const boxes = EVENT_TYPES.map((t) => {
    const input = h('input', {
      type: 'checkbox',
      name: 'events',
      value: t.value,
      'data-testid': `webhook-event-${t.value === '*' ? 'all' : t.value}`,
    });
    return {
      type: t.value,
      input,
      label: h('label', { class: 'check' }, input, ' ', h('span', { class: t.value === '*' ? '' : 'mono' }, t.label)),
    };
  });
  const all = boxes[0]!.input;
  const syncAll = () => {
    for (const b of boxes.slice(1)) {
      b.input.disabled = all.checked;
      b.label.classList.toggle('disabled', all.checked);
    }
  };
  all.addEventListener('change', syncAll);
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'webhook-create' }, 'Create endpoint');
  const form = h(
    'form',
    {
      class: 'card form',
      novalidate: true,
      onsubmit: async (event: Event) => {
        event.preventDefault();
        status.clear();
        const events = (all.checked ? ['*'] : boxes.filter((b) => b.input.checked).map((b) => b.type)) as WebhookEventType[];
        const problems: string[] = [];
        let parsed: URL | null = null;
        try {
          parsed = new URL(url.value.trim());
        } catch {
          parsed = null;
        }
        if (!parsed || !/^https?:$/.test(parsed.protocol)) problems.push('Enter an absolute http(s) URL.');
        if (events.length === 0) problems.push('Choose at least one event.');
        if (problems.length) {
          status.error(new Error(problems.join(' ')));
          return;
        }
        const body: WebhookEndpointCreate = { url: url.value.trim(), events };
        if (description.value.trim()) body.description = description.value.trim();
        try {
          const created = await busy(submit, () => api<WebhookEndpointWithSecret>('POST', '/webhooks', body));
          if (!ctx.alive()) return;
          const endpoint = created.data.endpoint;
          mount(
            ctx.root,
            pageHeader('Endpoint created'),
            h(
              'p',
              { class: 'lead', 'data-testid': 'webhook-created', 'data-id': endpoint.id },
              'Warden will send ',
              eventsList(endpoint.events),
              ' to ',
              h('span', { class: 'mono' }, endpoint.url),
              '.',
            ),
            secretPanel(
              created.data.secret,
              'Signing secret',
              h(
                'div',
                { class: 'row' },
                h(
                  'a',
                  { href: `#/webhooks/${endpoint.id}`, class: 'btn btn-primary', 'data-testid': 'webhook-open-created' },
                  'I have copied it: open the endpoint',
                ),
                h('a', { href: '#/webhooks', class: 'btn' }, 'Back to all endpoints'),
              ),
            ),
          );
        } catch (err) {
          status.error(err);
        }
      },
    },
    field('Endpoint URL', url, 'HTTPS only, unless the host is on the operator’s egress allowlist. Checked by the egress guard.'),
    h(
      'fieldset',
      { class: 'field' },
      h('legend', null, 'Events to send'),
      h(
        'div',
        { class: 'checks' },
        boxes.map((b) => b.label),
      ),
    ),
    field('Description (optional)', description),
    status.el,
    h('div', { class: 'row' }, submit, h('a', { href: '#/webhooks', class: 'btn' }, 'Cancel')),
  );
  mount(ctx.root, pageHeader('New webhook endpoint'), form);
  url.focus();
}

export async function webhookDetailPage(ctx: PageContext): Promise<void> {
  const id = ctx.params[0]!;
  const path = `/webhooks/${id}`;
  let endpoint = (await api<WebhookEndpointResponse>('GET', path)).data;
  if (!ctx.alive()) return;

  const status = notice('webhook-notice');
  const summary = h('div');
  const actions = h('div', { class: 'row actions' });
  const secretSlot = h('div');
  const deliveries = h('div', null, loading());
  const deliveriesStatus = notice('deliveries-notice');
  const payloadSlot = h('div');
  const more = h('div', { class: 'pager' });
  let rows: WebhookDelivery[] = [];
  let cursor: string | null = null;
  let pollTimer: ReturnType<typeof setTimeout> | undefined;

  const renderSummary = () => {
    mount(
      summary,
      h(
        'dl',
        { class: 'card details', 'data-testid': 'webhook-details' },
        h('dt', null, 'URL'),
        h('dd', { class: 'mono url', 'data-testid': 'webhook-url-value' }, endpoint.url),
        h('dt', null, 'Status'),
        h('dd', null, endpointStatus(endpoint)),
        h('dt', null, 'Events'),
        h('dd', null, eventsList(endpoint.events)),
        h('dt', null, 'Description'),
        h('dd', null, dash(endpoint.description)),
        h('dt', null, 'Secret rotation'),
        h(
          'dd',
          { 'data-testid': 'webhook-rotation' },
          endpoint.secret_rotating_until
            ? ['The previous secret also signs until ', time(endpoint.secret_rotating_until)]
            : 'One secret in use',
        ),
        h('dt', null, 'Created'),
        h('dd', null, time(endpoint.created_at)),
        h('dt', null, 'Updated'),
        h('dd', null, time(endpoint.updated_at)),
      ),
    );
    renderActions();
  };

  const setPaused = async (btn: HTMLButtonElement, paused: boolean) => {
    status.clear();
    try {
      const body: WebhookEndpointUpdate = { paused };
      endpoint = (await busy(btn, () => api<WebhookEndpointResponse>('PATCH', path, body))).data;
      if (!ctx.alive()) return;
      renderSummary();
      status.ok(
        paused ? 'Endpoint paused: new events are recorded as skipped and not sent.' : 'Endpoint resumed: new events are sent again.',
      );
    } catch (err) {
      status.error(err);
    }
  };

  const renderActions = () => {
    const resumeLabel = endpoint.disabled ? 'Re-enable' : 'Resume';
    const toggle: HTMLButtonElement =
      endpoint.paused || endpoint.disabled
        ? button(resumeLabel, () => void setPaused(toggle, false), { 'data-testid': 'webhook-resume' })
        : button('Pause', () => void setPaused(toggle, true), { 'data-testid': 'webhook-pause' });
    const test: HTMLButtonElement = button(
      'Send test event',
      async () => {
        status.clear();
        try {
          const delivery = (await busy(test, () => api<WebhookDeliveryResponse>('POST', `${path}/test`))).data;
          if (!ctx.alive()) return;
          status.ok(`Test event queued (event ${delivery.event_id}).`);
          await loadDeliveries(false);
        } catch (err) {
          status.error(err);
        }
      },
      { 'data-testid': 'webhook-test' },
    );
    const del = button('Delete…', () => confirmDelete(), { class: 'btn btn-danger', 'data-testid': 'webhook-delete' });
    mount(actions, toggle, test, del);
  };

  const confirmDelete = () => {
    const yes: HTMLButtonElement = button(
      'Yes, delete it',
      async () => {
        try {
          await busy(yes, () => api('DELETE', path));
          ctx.navigate('#/webhooks');
        } catch (err) {
          status.error(err);
          renderActions();
        }
      },
      { class: 'btn btn-danger', 'data-testid': 'webhook-delete-confirm' },
    );
    mount(
      actions,
      h(
        'div',
        { class: 'confirm', role: 'alertdialog', 'aria-labelledby': 'confirm-text' },
        h('p', { id: 'confirm-text' }, 'Delete this endpoint and its whole delivery history? This cannot be undone.'),
        h(
          'div',
          { class: 'row' },
          yes,
          button('Cancel', () => renderActions(), { 'data-testid': 'webhook-delete-cancel' }),
        ),
      ),
    );
    yes.focus();
  };

  const overlap = h('input', {
    type: 'number',
    min: 0,
    max: 604800,
    step: 1,
    value: '86400',
    name: 'overlap_seconds',
    'data-testid': 'rotate-overlap',
    inputmode: 'numeric',
  });
  const rotateStatus = notice('rotate-notice');
  const rotate = h('button', { type: 'submit', class: 'btn', 'data-testid': 'rotate-submit' }, 'Rotate secret');
  const rotateForm = h(
    'form',
    {
      class: 'card form',
      'aria-labelledby': 'rotate-title',
      novalidate: true,
      onsubmit: async (event: Event) => {
        event.preventDefault();
        rotateStatus.clear();
        const seconds = Number(overlap.value);
        if (!Number.isInteger(seconds) || seconds < 0 || seconds > 604800) {
          rotateStatus.error(new Error('Overlap must be a whole number of seconds between 0 and 604800 (7 days).'));
          return;
        }
        try {
          const body: RotateSecret = { overlap_seconds: seconds };
          const rotated = await busy(rotate, () => api<WebhookEndpointWithSecret>('POST', `${path}/rotate-secret`, body));
          if (!ctx.alive()) return;
          endpoint = rotated.data.endpoint;
          renderSummary();
          mount(
            secretSlot,
            secretPanel(
              rotated.data.secret,
              'New signing secret',
              button('Hide secret', () => mount(secretSlot), { 'data-testid': 'secret-hide' }),
            ),
          );
          secretSlot.scrollIntoView({ block: 'nearest' });
          rotateStatus.ok(
            seconds > 0
              ? `Secret rotated. The previous secret keeps signing for ${seconds} seconds.`
              : 'Secret rotated. The previous secret no longer signs.',
          );
        } catch (err) {
          rotateStatus.error(err);
        }
      },
    },
    h('h2', { id: 'rotate-title' }, 'Rotate the signing secret'),
    h(
      'p',
      { class: 'muted' },
      'During the overlap window every delivery carries two signatures (new and previous secret), so receivers can switch without dropping events.',
    ),
    field('Overlap (seconds)', overlap, '0 ends the previous secret now; at most 604800 (7 days). Default 86400 (one day).'),
    rotateStatus.el,
    rotate,
    secretSlot,
  );

  const renderDeliveries = () => {
    mount(
      deliveries,
      table(
        'Delivery history, newest first',
        [
          {
            header: 'Event',
            cell: (d) =>
              h(
                'div',
                null,
                h('div', { class: 'mono', 'data-testid': 'delivery-event-type' }, d.event_type),
                h('div', { class: 'muted small mono', title: `webhook-id ${d.event_id}` }, `id ${d.event_id.slice(0, 8)}…`),
                h('div', { class: 'muted small' }, time(d.created_at)),
              ),
          },
          {
            header: 'Status',
            cell: (d) =>
              h(
                'div',
                null,
                deliveryStatus(d),
                h(
                  'div',
                  { class: 'muted small', 'data-testid': 'delivery-attempts' },
                  `${d.attempts} ${d.attempts === 1 ? 'attempt' : 'attempts'}`,
                ),
              ),
          },
          {
            header: 'Response',
            cell: (d) =>
              h(
                'div',
                null,
                h(
                  'div',
                  { 'data-testid': 'delivery-response-status' },
                  d.response_status === null ? 'No response' : `HTTP ${d.response_status}`,
                ),
                d.response_body
                  ? h(
                      'code',
                      { class: 'excerpt', title: d.response_body, 'data-testid': 'delivery-response-body' },
                      excerpt(d.response_body, 120),
                    )
                  : null,
              ),
          },
          {
            header: 'Last error',
            cell: (d) =>
              d.last_error ? h('span', { class: 'error-text', 'data-testid': 'delivery-error' }, excerpt(d.last_error, 160)) : dash(null),
          },
          {
            header: 'Timing',
            cell: (d) =>
              h(
                'div',
                { class: 'small' },
                h('div', null, 'Last: ', time(d.last_attempt_at)),
                d.next_attempt_at ? h('div', null, 'Next retry: ', time(d.next_attempt_at)) : null,
              ),
          },
          {
            header: 'Actions',
            cell: (d) => {
              const view: HTMLButtonElement = button('Payload', () => void busy(view, () => showPayload(d)), {
                class: 'btn btn-small',
                'data-testid': 'delivery-view-payload',
                'aria-label': `Show the payload of the ${d.event_type} delivery from ${d.created_at}`,
              });
              const replay: HTMLButtonElement = button(
                'Replay',
                async () => {
                  deliveriesStatus.clear();
                  try {
                    const queued = (await busy(replay, () => api<WebhookDeliveryResponse>('POST', `${path}/deliveries/${d.id}/replay`)))
                      .data;
                    if (!ctx.alive()) return;
                    deliveriesStatus.ok(`Replay queued: event ${queued.event_id} will be sent again with the same webhook-id.`);
                    await loadDeliveries(false);
                  } catch (err) {
                    deliveriesStatus.error(err);
                  }
                },
                {
                  class: 'btn btn-small',
                  'data-testid': 'delivery-replay',
                  'aria-label': `Replay ${d.event_type} delivery from ${d.created_at}`,
                },
              );
              return h('div', { class: 'row' }, view, replay);
            },
          },
        ],
        rows,
        {
          testid: 'deliveries-table',
          rowTestid: 'delivery-row',
          rowId: (d) => d.id,
          empty: 'No deliveries yet. Events this endpoint subscribes to appear here; try “Send test event”.',
        },
      ),
    );
  };

  /** The payload viewer: the body Warden POSTs for a delivery, secret-looking values redacted by the server. */
  const showPayload = async (d: WebhookDelivery) => {
    deliveriesStatus.clear();
    try {
      const { payload } = (await api<WebhookDeliveryDetailResponse>('GET', `${path}/deliveries/${d.id}`)).data;
      if (!ctx.alive()) return;
      mount(
        payloadSlot,
        h(
          'div',
          { class: 'card payload', 'data-testid': 'delivery-payload', role: 'region', 'aria-labelledby': 'payload-title' },
          h(
            'div',
            { class: 'section-header' },
            h('h3', { id: 'payload-title' }, `Payload of ${payload.type}`),
            button('Close', () => mount(payloadSlot), { class: 'btn btn-small', 'data-testid': 'delivery-payload-close' }),
          ),
          h(
            'p',
            { class: 'muted small' },
            `webhook-id ${payload.id} · the body of every attempt and replay; values under secret-looking names are shown as [redacted].`,
          ),
          h('pre', { class: 'json', 'data-testid': 'delivery-payload-json', tabindex: '0' }, JSON.stringify(payload, null, 2)),
        ),
      );
      payloadSlot.scrollIntoView({ block: 'nearest' });
    } catch (err) {
      deliveriesStatus.error(err);
    }
  };

  const loadDeliveries = async (append: boolean) => {
    clearTimeout(pollTimer);
    try {
      const page = await api<WebhookDeliveryPage>('GET', withQuery(`${path}/deliveries`, { limit: 50, cursor: append ? cursor : null }));
      if (!ctx.alive()) return;
      rows = append ? [...rows, ...page.data] : page.data;
      cursor = page.has_more ? page.next_cursor : null;
      renderDeliveries();
      mount(more, cursor ? button('Load older deliveries', () => void loadDeliveries(true), { 'data-testid': 'deliveries-more' }) : null);
      // While something is in flight, refresh on its own so the outcome appears without a click.
      if (rows.some((d) => d.status === 'pending')) pollTimer = setTimeout(() => ctx.alive() && void loadDeliveries(false), 2000);
    } catch (err) {
      if (ctx.alive()) deliveriesStatus.error(err);
    }
  };

  const refresh: HTMLButtonElement = button(
    'Refresh',
    async () => {
      deliveriesStatus.clear();
      await busy(refresh, () => loadDeliveries(false));
    },
    { 'data-testid': 'deliveries-refresh' },
  );

  mount(
    ctx.root,
    h('p', { class: 'crumbs' }, h('a', { href: '#/webhooks' }, '← All endpoints')),
    pageHeader('Webhook endpoint'),
    status.el,
    summary,
    actions,
    h(
      'section',
      { 'aria-labelledby': 'deliveries-title', class: 'section' },
      h('div', { class: 'section-header' }, h('h2', { id: 'deliveries-title' }, 'Delivery history'), refresh),
      deliveriesStatus.el,
      deliveries,
      more,
      payloadSlot,
    ),
    rotateForm,
  );
  renderSummary();
  await loadDeliveries(false);
}

function excerpt(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
