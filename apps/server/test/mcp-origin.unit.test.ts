/** The MCP gateway's Origin rule (DNS-rebinding protection) and WARDEN_MCP_ALLOWED_ORIGINS. */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.ts';
import { originAllowed } from '../src/http/mcp-gateway.ts';

describe('originAllowed', () => {
  const listed = new Set(['https://ai.example.com', 'http://intranet:8080']);

  it('serves no Origin, loopback origins and listed ones', () => {
    for (const origin of [
      undefined,
      'http://localhost',
      'http://LOCALHOST:3000',
      'http://127.0.0.1:8080',
      'http://127.1.2.3',
      'https://[::1]:443',
    ])
      expect(originAllowed(origin, new Set()), origin).toBe(true);
    for (const origin of ['https://ai.example.com', 'https://AI.example.com:443', 'http://intranet:8080'])
      expect(originAllowed(origin, listed), origin).toBe(true);
  });

  it('refuses any other origin, a rebinding page of a loopback-looking name included', () => {
    for (const origin of [
      'http://evil.example.com',
      'http://localhost.evil.example',
      'http://127.0.0.1.nip.io',
      'http://ai.example.com',
      'https://ai.example.com:8443',
      'http://intranet',
      'null',
      'file://',
      'chrome-extension://abc',
      'http://a, http://localhost',
      '',
    ])
      expect(originAllowed(origin, listed), origin).toBe(false);
  });

  it('serves every origin when * is listed', () => {
    expect(originAllowed('http://evil.example.com', new Set(['*']))).toBe(true);
  });
});

describe('WARDEN_MCP_ALLOWED_ORIGINS', () => {
  it('reads origins and *, refusing anything that is not one', () => {
    expect(loadConfig({ WARDEN_MCP_ALLOWED_ORIGINS: ' https://ai.example.com/ ,*,http://intranet:8080' }).mcpAllowedOrigins).toEqual([
      'https://ai.example.com',
      '*',
      'http://intranet:8080',
    ]);
    expect(loadConfig({}).mcpAllowedOrigins).toEqual([]);
    for (const bad of ['ai.example.com', 'https://ai.example.com/path', 'ftp://files.example.com', 'https://user@ai.example.com'])
      expect(() => loadConfig({ WARDEN_MCP_ALLOWED_ORIGINS: bad }), bad).toThrow(/WARDEN_MCP_ALLOWED_ORIGINS/);
  });
});
