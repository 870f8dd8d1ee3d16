/** An admin command's result as a person reads it (`--json` prints the result itself). */
import type { AdminCommand } from '../admin/commands.ts';

export function printHuman(command: AdminCommand, result: unknown): void {
  const r = result as Record<string, unknown>;
  switch (command) {
    case 'keys.create':
      console.log(`key ${r.id} for workspace ${r.workspace} (${(r.permissions as string[]).join(', ')})`);
      console.log(`${r.key}\n(shown once: store it now)`);
      break;
    case 'workspaces.create':
      console.log(`workspace ${r.slug} created (${r.id})`);
      break;
    case 'keys.revoke':
      console.log(`key ${r.id} revoked`);
      break;
    case 'webhooks.create':
      console.log(`webhook ${r.id} → ${r.url} (${(r.events as string[]).join(', ')})`);
      console.log(`signing secret: ${r.secret}\n(shown once: store it now)`);
      break;
    case 'billing.set-plan':
      console.log(`plan: ${r.previous_plan} → ${r.plan}`);
      break;
    case 'migrate':
      console.log((r.applied as string[]).length ? `applied: ${(r.applied as string[]).join(', ')}` : 'up to date');
      break;
    case 'keys.list':
      printTable(result as Record<string, unknown>[], ['id', 'prefix', 'name', 'created_at', 'revoked_at', 'permissions'], 'no keys');
      break;
    case 'credentials.set': {
      const auth = r.auth as Record<string, string>;
      console.log(`credential ${r.name} (${auth.header}: ${auth.hint}) for ${(r.hosts as string[]).join(', ')}`);
      break;
    }
    case 'credentials.list':
      printTable(
        (result as Record<string, unknown>[]).map((c) => ({
          ...c,
          auth: `${(c.auth as Record<string, string>).header}: ${(c.auth as Record<string, string>).hint}`,
        })),
        ['name', 'hosts', 'auth', 'updated_at'],
        'no credentials',
      );
      break;
    case 'credentials.delete':
      console.log(`credential ${r.id} deleted`);
      break;
    case 'webhooks.list':
      printTable(result as Record<string, unknown>[], ['id', 'url', 'events', 'paused', 'disabled', 'created_at'], 'no webhook endpoints');
      break;
    case 'webhooks.pause':
    case 'webhooks.resume':
      console.log(`webhook ${r.id} ${r.paused ? 'paused' : 'active'}`);
      break;
    case 'webhooks.delete':
      console.log(`webhook ${r.id} deleted`);
      break;
    default:
      console.log(JSON.stringify(result, null, 2));
  }
}

/** Rows as aligned columns for a person (`--json` prints the rows as JSON); lists become a,b. */
function printTable(rows: Record<string, unknown>[], columns: string[], empty: string): void {
  if (rows.length === 0) {
    console.log(empty);
    return;
  }
  const cell = (value: unknown) => (Array.isArray(value) ? value.join(',') : value === null || value === undefined ? '-' : String(value));
  const table = [columns.map((c) => c.toUpperCase()), ...rows.map((row) => columns.map((c) => cell(row[c])))];
  const widths = columns.map((_, i) => Math.max(...table.map((line) => (line[i] as string).length)));
  for (const line of table)
    console.log(
      line
        .map((text, i) => (i === line.length - 1 ? text : text.padEnd(widths[i] as number)))
        .join('  ')
        .trimEnd(),
    );
}
