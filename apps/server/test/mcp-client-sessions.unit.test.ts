/**
 * What a gateway client session keeps of the client's capabilities (the protocol's parts of
 * sampling, elicitation and roots; nothing else it sent), and the ids Warden asks a client's
 * questions under: an answer counts only from the agent the id was given to, under the key of
 * the deployment.
 */
import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import type { DB } from '../src/db/schema.ts';
import { createEgressGuard } from '../src/egress/guard.ts';
import { McpClientSessions, relayedCapabilities } from '../src/features/execution/mcp-client-sessions.ts';
import { McpConnector } from '../src/features/execution/mcp-connector.ts';

describe('relayedCapabilities', () => {
  it('keeps the parts of sampling, elicitation and roots the protocol names, as empty objects', () => {
    expect(
      relayedCapabilities({
        sampling: { context: {}, tools: { deep: 'x' }, extra: {} },
        elicitation: { form: {}, url: {}, other: 1 },
        roots: { listChanged: true, more: 'junk' },
        experimental: { anything: {} },
        tasks: {},
      }),
    ).toEqual({ sampling: { context: {}, tools: {} }, elicitation: { form: {}, url: {} }, roots: { listChanged: true } });
  });

  it('keeps a capability declared without parts, and leaves out what is not an object', () => {
    expect(relayedCapabilities({ sampling: {}, elicitation: true, roots: { listChanged: 'yes' } })).toEqual({ sampling: {}, roots: {} });
    expect(relayedCapabilities(null)).toEqual({});
    expect(relayedCapabilities('sampling')).toEqual({});
  });
});

describe('question ids', () => {
  const connector = new McpConnector(createEgressGuard([]));
  const made: McpClientSessions[] = [];
  // no database: question ids are made and checked without one (the sweep, stopped at the end, never runs)
  const sessions = (key: Buffer) => {
    const made1 = new McpClientSessions({} as Kysely<DB>, connector, key);
    made.push(made1);
    return made1;
  };
  const key = randomBytes(32);
  const here = sessions(key);

  it('are answered only by the agent they were given to', () => {
    const id = here.questionId('agent-a');
    expect(id).toMatch(/^warden-[0-9a-f-]{36}-[A-Za-z0-9_-]{22}$/);
    expect(here.askedOf(id, 'agent-a')).toBe(true);
    expect(here.askedOf(id, 'agent-b')).toBe(false);
    expect(here.questionId('agent-a')).not.toBe(id);
  });

  it('are recognised by every process of the deployment (the same key), by no other', () => {
    const id = here.questionId('agent-a');
    expect(sessions(Buffer.from(key)).askedOf(id, 'agent-a')).toBe(true);
    expect(sessions(randomBytes(32)).askedOf(id, 'agent-a')).toBe(false);
  });

  it('refuse a forged or malformed id', () => {
    const id = here.questionId('agent-a');
    const uuid = id.slice('warden-'.length, 'warden-'.length + 36);
    expect(here.askedOf(`warden-${uuid}-${'A'.repeat(22)}`, 'agent-a')).toBe(false);
    expect(here.askedOf(`warden-${crypto.randomUUID()}${id.slice(-23)}`, 'agent-a')).toBe(false);
    expect(here.askedOf(`warden-${uuid}`, 'agent-a')).toBe(false);
    expect(here.askedOf(`${id}x`, 'agent-a')).toBe(false);
  });

  afterAll(async () => {
    for (const one of made) one.close();
    await connector.close();
  });
});
