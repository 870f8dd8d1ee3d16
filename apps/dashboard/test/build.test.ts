/** The in-memory build: the files the server serves, and what a strict CSP needs of them. */
import { describe, expect, it } from 'vitest';
import { buildDashboard } from '../build.ts';

describe('buildDashboard', () => {
  it('returns index.html, app.js, app.css and the icon with their content types', async () => {
    const files = await buildDashboard();
    expect([...files.keys()].sort()).toEqual(['/', '/app.css', '/app.js', '/favicon.svg']);
    expect(files.get('/')!.type).toMatch(/^text\/html/);
    expect(files.get('/app.js')!.type).toMatch(/^text\/javascript/);
    expect(files.get('/app.css')!.type).toMatch(/^text\/css/);
    expect(files.get('/favicon.svg')!.type).toBe('image/svg+xml');
    expect(await buildDashboard()).toBe(files);
  });

  it("works under default-src 'self': no inline script, style or handler; no eval", async () => {
    const files = await buildDashboard();
    const html = files.get('/')!.body;
    expect(html).toMatch(/<script type="module" src="\/dashboard\/app\.js\?v=[0-9a-f]{12}"><\/script>/);
    expect(html).toMatch(/<link rel="stylesheet" href="\/dashboard\/app\.css\?v=[0-9a-f]{12}">/);
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/<style|\sstyle=|\son[a-z]+=/i);
    expect(html).not.toMatch(/https?:\/\//);
    const js = files.get('/app.js')!.body;
    expect(js).not.toMatch(/\beval\(|new Function\(|innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
    expect(js).not.toMatch(/localStorage|sessionStorage/);
  });

  it('talks to /dashboard/api with the cookie and sends X-CSRF-Token', async () => {
    const js = (await buildDashboard()).get('/app.js')!.body;
    expect(js).toContain('/dashboard/api');
    expect(js).toContain('same-origin');
    expect(js).toContain('x-csrf-token');
  });
});
