/**
 * Issue 38: every alert the README recommends ("Worth an alert:" in "Operating Warden") is on
 * the Grafana dashboard (docs/operations/grafana-dashboard.json), in its first row, "Alerts at a
 * glance": each expression, without its comparison, is in a panel's query there once the
 * dashboard's `job=~"$job"` selector is taken out, and that panel colours a threshold.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

interface Panel {
  type: string;
  title: string;
  targets?: { expr: string }[];
  fieldConfig?: { defaults?: { thresholds?: { steps: { value: number | null }[] } } };
}

/** The README's alert expressions: the code spans with a comparison in the "Worth an alert:" list. */
function readmeAlerts(): string[] {
  const readme = readFileSync(`${ROOT}README.md`, 'utf8');
  const start = readme.indexOf('Worth an alert:');
  const end = readme.indexOf('\n\n', readme.indexOf('\n- **', start) + 1);
  expect(start).toBeGreaterThan(0);
  const list = readme.slice(start, end).replace(/\n\s+/g, ' ');
  return [...list.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string).filter((span) => /\s(>|<|==|!=)\s/.test(span));
}

/** Without the dashboard's job selector and without blanks. */
const normalise = (expr: string) =>
  expr.replaceAll('job=~"$job"', '').replaceAll('{,', '{').replaceAll(',}', '}').replaceAll('{}', '').replace(/\s+/g, '');

/** The panels of the first row (up to the next row). */
function alertRow(): Panel[] {
  const dashboard = JSON.parse(readFileSync(`${ROOT}docs/operations/grafana-dashboard.json`, 'utf8')) as { panels: Panel[] };
  const [first, ...rest] = dashboard.panels;
  expect(first).toMatchObject({ type: 'row', title: 'Alerts at a glance' });
  const next = rest.findIndex((panel) => panel.type === 'row');
  return rest.slice(0, next);
}

it('has every alert the README recommends on the dashboard, with a threshold', () => {
  const alerts = readmeAlerts();
  expect(alerts.length).toBeGreaterThanOrEqual(8);
  const panels = alertRow();
  const missing = alerts.filter((alert) => {
    const expr = normalise(alert.split(/\s(?:>|<|==|!=)\s/)[0] as string);
    const panel = panels.find((p) => p.targets?.some((t) => normalise(t.expr).includes(expr)));
    const steps = panel?.fieldConfig?.defaults?.thresholds?.steps ?? [];
    return !panel || !steps.some((step) => step.value !== null);
  });
  expect(missing).toEqual([]);
});
