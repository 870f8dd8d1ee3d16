/** Sign in with a workspace API key holding `admin`; the key is sent once and never stored. */
import { ApiError, api } from '../api.ts';
import { h } from '../dom.ts';
import type { Login, Session, SessionData } from '../types.ts';
import { busy, field, notice } from '../ui.ts';

export function loginPage(container: HTMLElement, message: string | undefined, onLogin: (session: SessionData) => void): void {
  const key = h('input', {
    type: 'password',
    name: 'api_key',
    autocomplete: 'off',
    required: true,
    spellcheck: 'false',
    'data-testid': 'login-key',
  });
  const status = notice('login-error');
  if (message) status.ok(message);
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'login-submit' }, 'Sign in');
  const form = h(
    'form',
    {
      class: 'card login-card',
      'aria-labelledby': 'login-title',
      novalidate: true,
      onsubmit: async (event: Event) => {
        event.preventDefault();
        status.clear();
        const value = key.value.trim();
        if (!value) {
          status.error(new Error('Enter a workspace API key.'));
          key.focus();
          return;
        }
        try {
          const body: Login = { api_key: value };
          const session = await busy(submit, () => api<Session>('POST', '/session', body));
          key.value = '';
          onLogin(session.data);
        } catch (err) {
          key.select();
          if (err instanceof ApiError && err.status === 401) status.error(new Error(`That key is unknown or revoked (${err.code}).`));
          else if (err instanceof ApiError && err.status === 403)
            status.error(new Error(`That key does not hold the admin permission (${err.code}).`));
          else status.error(err);
        }
      },
    },
    h(
      'div',
      { class: 'brand login-brand' },
      h('span', { class: 'logo', 'aria-hidden': 'true' }, 'W'),
      h('span', { class: 'brand-name' }, 'Warden'),
    ),
    h('h1', { id: 'login-title' }, 'Sign in to the dashboard'),
    h(
      'p',
      { class: 'muted' },
      'Use a workspace API key with the admin permission. The key is exchanged for a session cookie and is not stored in the browser.',
    ),
    field('Workspace API key', key),
    status.el,
    submit,
  );
  container.append(h('main', { id: 'main', class: 'login' }, form));
  key.focus();
}
