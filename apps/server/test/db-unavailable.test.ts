/** Which database errors are "the database is unreachable" (503 service_unavailable) and which stay 500. */
import { describe, expect, it } from 'vitest';
import { isDatabaseUnavailable } from '../src/db/unavailable.ts';

const withCode = (code: string, message = 'x') => Object.assign(new Error(message), { code });

describe('isDatabaseUnavailable', () => {
  it.each([
    ['ECONNREFUSED', withCode('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:5432')],
    ['ECONNRESET', withCode('ECONNRESET', 'read ECONNRESET')],
    ['ETIMEDOUT', withCode('ETIMEDOUT')],
    ['pg: Connection terminated unexpectedly', new Error('Connection terminated unexpectedly')],
    ['pg-pool: Connection terminated due to connection timeout', new Error('Connection terminated due to connection timeout')],
    ['pg-pool: timeout exceeded when trying to connect', new Error('timeout exceeded when trying to connect')],
    ['pg: a client whose connection failed', new Error('Client has encountered a connection error and is not queryable')],
    ['SQLSTATE 08006 connection_failure', withCode('08006')],
    ['SQLSTATE 08P01 protocol_violation', withCode('08P01')],
    ['SQLSTATE 57P01 admin_shutdown', withCode('57P01', 'terminating connection due to administrator command')],
    ['SQLSTATE 57P02 crash_shutdown', withCode('57P02')],
    ['SQLSTATE 57P03 cannot_connect_now', withCode('57P03', 'the database system is starting up')],
    ['SQLSTATE 53300 too_many_connections', withCode('53300', 'sorry, too many clients already')],
    ['a cause two levels down', new Error('outer', { cause: new Error('middle', { cause: withCode('ECONNREFUSED') }) })],
    ['an AggregateError of connect attempts', new AggregateError([withCode('ECONNREFUSED'), withCode('ECONNREFUSED')], 'connect')],
  ])('is true for %s', (_label, error) => {
    expect(isDatabaseUnavailable(error)).toBe(true);
  });

  it.each([
    ['a unique violation (23505)', withCode('23505', 'duplicate key value violates unique constraint')],
    ['a syntax error (42601)', withCode('42601')],
    ['a statement timeout (57014)', withCode('57014', 'canceling statement due to statement timeout')],
    ['a plain bug', new TypeError("Cannot read properties of undefined (reading 'id')")],
    ['not an error at all', 'ECONNREFUSED'],
    ['null', null],
  ])('is false for %s', (_label, error) => {
    expect(isDatabaseUnavailable(error)).toBe(false);
  });

  it('terminates on a cause cycle', () => {
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    (a as { cause?: unknown }).cause = b;
    expect(isDatabaseUnavailable(a)).toBe(false);
  });
});
