/**
 * The built-in OAuth authorization server over HTTP, on the MCP SDK's own handlers (the pieces
 * of its `mcpAuthRouter`): `/authorize`, `/token` (authorization code with PKCE S256, refresh),
 * `/register` (RFC 7591), `/revoke` (RFC 7009), and the RFC 8414 metadata at
 * `/.well-known/oauth-authorization-server`, built per request for the public origin (the
 * issuer). The SDK parses, authenticates clients, checks PKCE and answers OAuth errors; the
 * rules and storage are features/oauth/builtin-server.ts. The authorize step sends the browser
 * to the dashboard's consent page.
 */
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { authorizationHandler } from '@modelcontextprotocol/sdk/server/auth/handlers/authorize.js';
import { clientRegistrationHandler } from '@modelcontextprotocol/sdk/server/auth/handlers/register.js';
import { revocationHandler } from '@modelcontextprotocol/sdk/server/auth/handlers/revoke.js';
import { tokenHandler } from '@modelcontextprotocol/sdk/server/auth/handlers/token.js';
import type { OAuthServerProvider } from '@modelcontextprotocol/sdk/server/auth/provider.js';
import { createOAuthMetadata } from '@modelcontextprotocol/sdk/server/auth/router.js';
import type { OAuthClientInformationFull } from '@modelcontextprotocol/sdk/shared/auth.js';
import { type ErrorRequestHandler, type Request, type Response, Router } from 'express';
import type { Config } from '../config.ts';
import type { BuiltinAuthorizationServer } from '../features/oauth/builtin-server.ts';
import { SCOPES_SUPPORTED } from '../features/oauth/protected-resource.ts';
import { ApiError } from '../shared/errors.ts';
import { NO_OAUTH_ORIGIN, oauthOrigin } from './oauth-resource.ts';

/** Where the dashboard shows an authorization for consent (its hash route). */
export const consentPath = (id: string) => `/dashboard/#/oauth/consent/${id}`;

function provider(config: Config, server: BuiltinAuthorizationServer): OAuthServerProvider {
  return {
    clientsStore: {
      getClient: (clientId) => server.getClient(clientId),
      // the SDK has issued the client's id (and a secret for a confidential client) by now
      registerClient: (client) => server.registerClient(client as OAuthClientInformationFull),
    },
    authorize: async (client, params, res) => {
      const origin = oauthOrigin(config, res.req);
      if (origin === undefined) throw new ApiError('not_found', NO_OAUTH_ORIGIN);
      const id = await server.begin(client, params, origin);
      res.redirect(302, consentPath(id));
    },
    challengeForAuthorizationCode: (client, code) => server.challengeFor(client, code),
    exchangeAuthorizationCode: (client, code, _verifier, redirectUri, resource) => server.exchangeCode(client, code, redirectUri, resource),
    exchangeRefreshToken: (client, refreshToken, scopes, resource) => server.exchangeRefresh(client, refreshToken, scopes, resource),
    // Warden checks its tokens where they are used (features/oauth/access-tokens.ts), for the endpoint called
    verifyAccessToken: async () => {
      throw new InvalidTokenError('Tokens are checked by the MCP endpoints');
    },
    revokeToken: (client, request) => server.revokeToken(client, request.token),
  };
}

/** A registration body that is not JSON: RFC 7591 §3.2.2's `invalid_client_metadata`, not a server error. */
const malformedRegistration: ErrorRequestHandler = (error, _req, res, next) => {
  if ((error as { type?: string }).type !== 'entity.parse.failed') return next(error);
  res.status(400).set('Cache-Control', 'no-store').json({
    error: 'invalid_client_metadata',
    error_description: 'The registration request body is not JSON (RFC 7591: a JSON object of client metadata)',
  });
};

export function authorizationServerRouter(config: Config, server: BuiltinAuthorizationServer): Router {
  const oauth = provider(config, server);
  const router = Router();
  router.get('/.well-known/oauth-authorization-server', (req: Request, res: Response) => {
    const origin = oauthOrigin(config, req);
    if (origin === undefined) throw new ApiError('not_found', NO_OAUTH_ORIGIN);
    let metadata: ReturnType<typeof createOAuthMetadata>;
    try {
      metadata = createOAuthMetadata({ provider: oauth, issuerUrl: new URL(origin), scopesSupported: [...SCOPES_SUPPORTED] });
    } catch (error) {
      // an http issuer other than loopback: OAuth needs WARDEN_PUBLIC_URL with https
      throw new ApiError('not_found', 'The authorization server needs an https WARDEN_PUBLIC_URL', { cause: error });
    }
    res.set('Access-Control-Allow-Origin', '*');
    res.json({ ...metadata, issuer: origin, client_id_metadata_document_supported: true });
  });
  router.use('/authorize', authorizationHandler({ provider: oauth }));
  router.use('/token', tokenHandler({ provider: oauth }));
  router.use('/register', clientRegistrationHandler({ clientsStore: oauth.clientsStore }), malformedRegistration);
  router.use('/revoke', revocationHandler({ provider: oauth }));
  return router;
}
