/**
 * Serves the dashboard's single-page app (apps/dashboard, compiled in memory by esbuild once
 * at start) under /dashboard, with a strict Content-Security-Policy: no inline code, no
 * other origin.
 */
import { type Request, type Response, Router } from 'express';
import { StaticAsset } from './static-asset.ts';

/** apps/dashboard's build module: its TypeScript from source, its JavaScript when the server runs built (npm run build). */
const DASHBOARD_BUILD = new URL(
  import.meta.url.endsWith('.ts') ? '../../../dashboard/build.ts' : '../../../dashboard/dist/build.js',
  import.meta.url,
).href;

type Assets = Map<string, { body: string; type: string }>;
type Served = Map<string, StaticAsset>;

export function dashboardAssets(): Router {
  const router = Router();
  let assets: Promise<Served> | undefined;
  const load = () => {
    // apps/dashboard is its own package; its build module is loaded on the first page request.
    assets ??= import(DASHBOARD_BUILD)
      .then((m: { buildDashboard: () => Promise<Assets> }) => m.buildDashboard())
      .then((built) => new Map([...built].map(([path, file]) => [path, new StaticAsset(file.body, file.type)])));
    return assets;
  };
  router.get(/^\/dashboard(\/.*)?$/, async (req: Request, res: Response, next) => {
    if (req.path.startsWith('/dashboard/api')) return next();
    if (req.path === '/dashboard') return res.redirect(301, '/dashboard/');
    try {
      const files = await load();
      const path = req.path.slice('/dashboard'.length);
      // The app routes by hash: any page path gets the app, an unknown file is a 404.
      const file = files.get(path) ?? (/\.[a-z0-9]+$/i.test(path) ? undefined : files.get('/'));
      if (!file) return next();
      res.setHeader('Content-Security-Policy', "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
      res.setHeader('X-Content-Type-Options', 'nosniff');
      res.setHeader('Referrer-Policy', 'no-referrer');
      await file.send(req, res);
    } catch (error) {
      next(error);
    }
  });
  return router;
}
