/**
 * Where an upstream's authorization server sends the admin's browser back after a connect
 * (features/credentials/upstream-oauth.ts): public, since the one-use state is its key. The
 * outcome is shown on the dashboard's MCP servers page; an unknown state is 400.
 */
import { type Request, type Response, Router } from 'express';
import { CALLBACK_PATH } from '../features/credentials/upstream-oauth.ts';
import type { McpServersService } from '../features/mcp-servers/mcp-servers.service.ts';

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);

export function upstreamOAuthCallbackRouter(mcpServers: McpServersService): Router {
  const router = Router();
  router.get(CALLBACK_PATH, async (req: Request, res: Response) => {
    const outcome = await mcpServers.completeOAuth(new URLSearchParams(req.originalUrl.split('?')[1] ?? ''));
    // the query held a code: neither cached nor passed on as a referrer
    res.set('Cache-Control', 'no-store');
    res.set('Referrer-Policy', 'no-referrer');
    if (outcome.slug === undefined) {
      res
        .status(400)
        .type('html')
        .send(
          `<!doctype html><meta charset="utf-8"><title>Warden</title><p>${escapeHtml(outcome.detail ?? '')}.</p>` +
            '<p><a href="/dashboard/#/mcp-servers">MCP servers</a></p>',
        );
      return;
    }
    // the code was exchanged: the dashboard asks a session of the workspace to confirm (the id in the fragment, never sent to a server)
    if (outcome.confirmation) {
      res.redirect(303, `/dashboard/#/mcp-servers/oauth/confirm/${outcome.confirmation}`);
      return;
    }
    const shown = new URLSearchParams({
      server: outcome.slug,
      ...(outcome.agent ? { agent: outcome.agent } : {}),
      ...(outcome.detail ? { detail: outcome.detail } : {}),
    });
    res.redirect(303, `/dashboard/#/mcp-servers/oauth/${outcome.connected ? 'connected' : 'failed'}?${shown}`);
  });
  return router;
}
