import { beforeEach, describe, expect, it } from 'vitest';
import { type CompiledCondition, compileCondition, evaluateCondition } from '../src/features/policies/cel.ts';
import { startDecisionBudget } from '../src/features/policies/limits.ts';

// Evaluations spend the budget of a decision (limits.ts); here each test is one.
beforeEach(() => startDecisionBudget());

type Vars = Parameters<typeof evaluateCondition>[1];

const base: Vars = {
  input: { action: 'db.query', resource: 'orders' },
  execution: null,
  context: {
    amount: 150,
    env: 'prod',
    roles: ['admin', 'dev'],
    items: [1, 2],
    ticket: 'T-1',
    name: 'bob',
    count: 4,
    limits: { daily: 10 },
  },
  agent: { risk_level: 'high', id: 'agent-1' },
};
const withContext = (context: Record<string, unknown>): Vars => ({ ...base, context: { ...base.context, ...context } });
const withAgent = (agent: Record<string, unknown> | null): Vars => ({ ...base, agent });

function compiled(expression: string): CompiledCondition {
  const result = compileCondition(expression);
  if (!result.ok) throw new Error(`expected '${expression}' to compile: ${result.message} at ${result.position}`);
  return result.condition;
}
const evaluate = (expression: string, vars: Vars = base) => evaluateCondition(compiled(expression), vars);

describe('CEL conditions: evaluation', () => {
  it.each<[string, boolean, Vars]>([
    ['context.amount > 100', true, base],
    ['context.amount > 100', false, withContext({ amount: 50 })],
    ['context.amount > 100', true, withContext({ amount: 150.5 })],
    ['context.amount > 100', false, withContext({ amount: 100 })],
    ['context.amount > 100.5', true, base],
    ['context.amount > 150.5', false, base],
    ['context.amount > 100.5', false, withContext({ amount: 100.25 })],
    ['context.amount == 150', true, base],
    ['context.amount == 150.0', true, base],
    ['input.action.startsWith("db.") && context.env == "prod"', true, base],
    ['input.action.startsWith("db.") && context.env == "prod"', false, withContext({ env: 'dev' })],
    ['input.action.startsWith("db.") && context.env == "prod"', false, { ...base, input: { action: 'http.get' } }],
    ['"admin" in context.roles', true, base],
    ['"admin" in context.roles', false, withContext({ roles: ['dev'] })],
    ['size(context.items) <= 3', true, base],
    ['size(context.items) <= 3', false, withContext({ items: [1, 2, 3, 4] })],
    ['has(context.ticket)', true, base],
    ['has(context.ticket)', false, { ...base, context: { amount: 1 } }],
    ['agent.risk_level == "high"', true, base],
    ['agent.risk_level == "high"', false, withAgent({ risk_level: 'low' })],
    ['context.name == "bob"', true, base],
    ['context.name < "carl"', true, base],
    ['context.name > "carl"', false, base],
    ['context.env != "dev"', true, base],
    ['context.count == 4 && context.count >= 4 && context.count < 5', true, base],
    ['size(context.items) < context.count', true, base],
    ['context.env == 1', false, base], // equality across types is false, not an error
    ['context.roles.exists(r, r == "dev")', true, base],
    ['input.resource in ["orders", "invoices"]', true, base],
  ])('%s → %s (case %#)', (expression, expected, vars) => {
    expect(evaluate(expression, vars)).toBe(expected);
  });

  it('mixes int literals with JSON numbers in arithmetic (an extension to strict CEL)', () => {
    expect(evaluate('context.amount + 1 > 150', base)).toBe(true);
    expect(evaluate('context.amount * 2 == 300', base)).toBe(true);
    expect(evaluate('context.amount - 0.5 == 149.5', base)).toBe(true);
    expect(evaluate('context.amount / 4 == 37.5', base)).toBe(true);
    expect(evaluate('context.count % 2 == 0', base)).toBe(true);
    expect(evaluate('context.count % 3 == 0', base)).toBe(false);
    expect(evaluate('size(context.items) * 1.5 == 3.0', base)).toBe(true);
    expect(evaluate('int(context.amount) == 150', withContext({ amount: 150.7 }))).toBe(true);
    expect(() => evaluate('context.count % 0 == 0', base)).toThrow(/modulus by zero/);
  });

  it('works when agent is null', () => {
    const none = withAgent(null);
    expect(evaluate('agent == null', none)).toBe(true);
    expect(evaluate('agent == null', base)).toBe(false);
    expect(evaluate('agent != null && agent.risk_level == "high"', none)).toBe(false);
    expect(evaluate('agent == null || agent.risk_level == "low"', none)).toBe(true);
    expect(evaluate('has(agent.risk_level)', none)).toBe(false);
  });

  it('reuses one compiled condition across inputs', () => {
    const condition = compiled('context.amount > 100 && agent.risk_level == "high"');
    expect(evaluateCondition(condition, base)).toBe(true);
    expect(evaluateCondition(condition, withContext({ amount: 10 }))).toBe(false);
    expect(evaluateCondition(condition, withAgent({ risk_level: 'low' }))).toBe(false);
  });
});

describe('CEL conditions: compile errors', () => {
  it.each<[string, number]>([
    ['context.amount >', 16],
    ['context.amount > 100 &&& true', 23],
    ['a && (b', 7],
    ['"unterminated', 0],
    ['context.amount >\n  == 100', 19],
  ])('syntax error in %j is reported at offset %i', (expression, position) => {
    const result = compileCondition(expression);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.message).toBeTruthy();
    expect(result.message).not.toContain('\n');
    expect(result.position).toBe(position);
  });

  it('rejects an empty condition', () => {
    const result = compileCondition('');
    expect(result.ok).toBe(false);
  });

  it('rejects unknown variables and type errors when compiling, with a position', () => {
    const unknown = compileCondition('context.amount > 1 && user.admin');
    expect(unknown).toMatchObject({ ok: false, position: 22 });
    expect(unknown.ok ? '' : unknown.message).toMatch(/user/);

    expect(compileCondition('1 + "a" == 2')).toMatchObject({ ok: false, position: 0 });
    expect(compileCondition('size(1) == 1')).toMatchObject({ ok: false });
    expect(compileCondition('input.action.nope()')).toMatchObject({ ok: false });
  });

  it('rejects a condition whose type is known not to be boolean', () => {
    for (const expression of ['1 + 2', '"text"', 'null', '[true]']) {
      const result = compileCondition(expression);
      expect(result, expression).toMatchObject({ ok: false, position: 0 });
      expect(result.ok ? '' : result.message).toMatch(/boolean/);
    }
  });

  it('never throws', () => {
    for (const expression of [')', '((((', '\u0000', 'a'.repeat(100_000), '1'.repeat(400), `${'!'.repeat(10_000)}true`]) {
      expect(() => compileCondition(expression)).not.toThrow();
    }
    expect(() => compileCondition(undefined as unknown as string)).not.toThrow();
  });
});

describe('CEL conditions: evaluation errors', () => {
  it('throws a plain Error when the result is not a boolean (no coercion)', () => {
    for (const [expression, type] of [
      ['context.amount', 'double'],
      ['context.name', 'string'],
      ['context.roles', 'list'],
      ['context.limits', 'map'],
      ['agent', 'null'],
      ['context.items[0]', 'double'],
    ] as const) {
      const condition = compiled(expression); // type dyn: only known at run time
      const vars = expression === 'agent' ? withAgent(null) : base;
      expect(() => evaluateCondition(condition, vars), expression).toThrow(Error);
      expect(() => evaluateCondition(condition, vars), expression).toThrow(new RegExp(`boolean.*${type}`));
    }
    expect(() => evaluate('context.flag', withContext({ flag: 1 }))).toThrow(/boolean/);
    expect(() => evaluate('context.flag', withContext({ flag: 'true' }))).toThrow(/boolean/);
  });

  it('throws when a field is missing', () => {
    expect(() => evaluate('context.missing == 1')).toThrow(/missing/);
    expect(() => evaluate('context.missing == 1')).toThrow(/at offset 8/);
    expect(() => evaluate('input.tool.startsWith("x")')).toThrow(/tool/);
    expect(() => evaluate('agent.risk_level == "high"', withAgent(null))).toThrow(Error);
    expect(() => evaluate('agent.team == "x"')).toThrow(/team/);
  });

  it('throws when the types do not fit', () => {
    expect(() => evaluate('context.name > 3')).toThrow(/overload/);
    expect(() => evaluate('context.amount > 100', withContext({ amount: '150' }))).toThrow(Error);
    expect(() => evaluate('size(context.amount) > 1')).toThrow(Error);
  });

  it('throws plain Errors whose message is one line', () => {
    try {
      evaluate('context.missing == 1');
      expect.unreachable();
    } catch (error) {
      expect(Object.getPrototypeOf(error)).toBe(Error.prototype);
      expect((error as Error).message).not.toContain('\n');
    }
  });

  it('does not turn errors into false where CEL says the other side decides', () => {
    // CEL's && and || are commutative over errors: a definite result on either side wins.
    expect(evaluate('context.missing == 1 || true')).toBe(true);
    expect(evaluate('context.missing == 1 && false')).toBe(false);
    expect(() => evaluate('context.missing == 1 || false')).toThrow(/missing/);
  });
});

describe('compileCondition refuses matches()', () => {
  it('refuses a regular-expression match with its position, so no crafted input can stall evaluation', () => {
    const result = compileCondition('input.action.matches("^(a+)+$")');
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.position).toBe(13);
      expect(result.message).toContain('matches()');
    }
  });

  it.each<[string, number]>([
    // the attack that passed the old text search: a comment and a line break between the name and "("
    ['context.s.matches // x\n("^(a+)+$")', 10],
    ['context.s.\n  // matches(\n  matches("^(a+)+$")', 27],
    ['context.s . matches ("a")', 12],
    ['context.l.exists(x, x.matches("^(a+)+$"))', 22],
    ['true && (context.s).matches("a")', 20],
  ])('finds it on the parsed expression, whatever the text around it: %j at %i', (expression, position) => {
    const result = compileCondition(expression);
    expect(result).toMatchObject({ ok: false, position });
    expect(result.ok ? '' : result.message).toMatch(/^matches\(\) is not supported/);
  });

  it('does not refuse the word elsewhere (a field, a string)', () => {
    expect(compileCondition('context.matches == "matches(x)"').ok).toBe(true);
    expect(compileCondition('has(context.matches)').ok).toBe(true);
  });
});

describe('readsCall: whether a condition may read what differs between calls of one tool', () => {
  const readsCall = (expression: string) => {
    const compiled = compileCondition(expression);
    if (!compiled.ok) throw new Error(compiled.message);
    return compiled.condition.readsCall;
  };
  it.each([
    'execution.arguments.a > 10',
    'has(execution.arguments.a)',
    'execution["arguments"]["a"] > 1',
    'execution.arguments_sha256 == "x"',
    'execution.params.size() > 0',
    'cel.bind(x, execution, x.tool == "a")',
    'execution.exists(k, k == "tool")',
    'execution != null && execution.tool == "a" && execution.arguments.a == 1',
    '[execution][0].tool == "a"',
    'execution[input.action] == "a"',
  ])('%s reads the call', (expression) => {
    expect(readsCall(expression)).toBe(true);
  });
  it.each([
    'execution.tool == "nuke"',
    'execution["server"] == "github" && execution.method == "tools/call"',
    'has(execution.tool) && execution.mode == "mcp_proxy"',
    'execution.prompt == "p" || execution.uri.startsWith("file:")',
    'context.amount > 10',
    'input.tool == "x" && agent.slug == "bot"',
  ])('%s does not', (expression) => {
    expect(readsCall(expression)).toBe(false);
  });
});
