import type { SessionData } from './types.ts';

/** What a page gets from the shell. */
export interface PageContext {
  /** The page's container (inside <main>). */
  root: HTMLElement;
  /** Route parameters, e.g. the endpoint id of #/webhooks/<id>. */
  params: string[];
  session: SessionData;
  /** False once the user navigated away: late answers must not touch the DOM. */
  alive(): boolean;
  navigate(hash: string): void;
  /** Updates the header (e.g. after a plan change). */
  updateSession(patch: Partial<SessionData>): void;
}

export type Page = (ctx: PageContext) => void | Promise<void>;
