/** What the dashboard shows of a request's context: its values under secret-looking names redacted. */
import { redactSecrets } from '../../shared/redact.ts';

export const withRedactedContext = <T extends { context: Record<string, unknown> }>(item: T): T => ({
  ...item,
  context: redactSecrets(item.context) as Record<string, unknown>,
});
