/** What the dashboard shows of a request's context: its values under secret-looking names redacted. */
import { redactSecrets } from '../../shared/redact.ts';

interface WithContext {
  context: Record<string, unknown>;
  outcome_event?: WithContext | null;
}

export const withRedactedContext = <T extends WithContext>(item: T): T => ({
  ...item,
  context: redactSecrets(item.context) as Record<string, unknown>,
  // an act's outcome event, folded into it (`view=acts`), is shown as well
  ...(item.outcome_event ? { outcome_event: withRedactedContext(item.outcome_event) } : {}),
});
