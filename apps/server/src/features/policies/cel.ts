/**
 * CEL conditions of policy rules: compiled once when a policy is saved or loaded, evaluated per decision.
 *
 * Library: @marcbachmann/cel-js, for its speed and its type checker (errors at save, at the
 * offending token); the measurements against @bufbuild/cel are in
 * docs/decisions/0014-cel-library.md. Its `matches()` uses JavaScript RegExp (backtracking), so
 * conditions may not call it: refused when compiled, on the parsed expression
 * (REFUSED_FUNCTIONS in cel-ast.ts).
 *
 * Cost: evaluations run on the event loop every workspace shares, so each one spends the decision's budget
 * (limits.ts) as it goes — nodes, comprehension iterations, the size of the values operations touch, absorbed
 * errors — and the first charge past it ends the evaluation (cel-metering.ts).
 *
 * Numbers: JSON numbers arrive as JS numbers, which CEL sees as `double`; CEL integer literals (`100`) are
 * `int`. Comparisons and equality across int and double are defined by CEL and work for any value
 * (`context.amount > 100` holds for 150 and 150.5; `context.count == 3` holds for 3). Arithmetic is not:
 * strict CEL has no `double + int`. So that policy authors need not write `1.0` because JSON has no int type,
 * this environment adds mixed overloads `double ⊕ int` and `int ⊕ double` for + - * / %, and `double % double`,
 * all yielding double (`%` by zero is an error, like int `%`). `int(x)` and `double(x)` convert explicitly.
 *
 * Variables: `input` (map), `context` (map) and `agent` (map or null, so declared `dyn`). Any other identifier
 * is a compile error. Positions are 0-based offsets into the expression string (UTF-16 code units).
 */
import { Environment, type ParseResult } from '@marcbachmann/cel-js';
import { truncate } from '../../shared/text.ts';
import { comprehensionNesting, forEachChild, type Node, parseTree, readsCallFacts, refusedCall } from './cel-ast.ts';
import { errorUnits, meterScope } from './cel-metering.ts';
import { BUDGET_EXCEEDED, charge, LIMITS, meter, startDecisionBudget } from './limits.ts';

export interface ConditionVariables {
  input: Record<string, unknown>;
  context: Record<string, unknown>;
  agent: Record<string, unknown> | null;
  /** What Warden's proxy will run (see acts/act.ts), or null for a bare evaluation. */
  execution: Record<string, unknown> | null;
}

/** A parsed, type-checked and metered condition, only produced by compileCondition. */
class Condition {
  readonly #program: ParseResult;
  /** Cost units of one evaluation outside comprehension steps (which charge per iteration). */
  readonly #units: number;
  /** Cost units of an error that ends the evaluation (cel-js quotes the source up to the failing node). */
  readonly #errorUnits: number;
  /** Whether it reads what differs between calls of one tool (see readsCallFacts). */
  readonly readsCall: boolean;
  constructor(program: ParseResult, units: number, errorUnits: number, readsCall: boolean) {
    this.#program = program;
    this.#units = units;
    this.#errorUnits = errorUnits;
    this.readsCall = readsCall;
  }
  static run(condition: Condition, variables: ConditionVariables): unknown {
    charge(condition.#units);
    return condition.#program(variables);
  }
  static errorUnits(condition: Condition): number {
    return condition.#errorUnits;
  }
}

export type CompiledCondition = Condition;

export type CompileResult = { ok: true; condition: CompiledCondition } | { ok: false; message: string; position: number | null };

const env = createEnvironment();

function createEnvironment(): Environment {
  const e = new Environment({ homogeneousAggregateLiterals: false })
    .registerVariable('input', 'map')
    .registerVariable('context', 'map')
    .registerVariable('agent', 'dyn')
    .registerVariable('execution', 'dyn');
  const ops: [string, (a: number, b: number) => number][] = [
    ['+', (a, b) => a + b],
    ['-', (a, b) => a - b],
    ['*', (a, b) => a * b],
    ['/', (a, b) => a / b],
    ['%', (a, b) => a % b],
  ];
  for (const [op, apply] of ops) {
    const checked = op === '%' ? (a: number, b: number) => apply(a, nonZeroModulus(b)) : apply;
    e.registerOperator(`double ${op} int: double`, (a: number, b: bigint) => checked(a, Number(b)));
    e.registerOperator(`int ${op} double: double`, (a: bigint, b: number) => checked(Number(a), b));
  }
  e.registerOperator('double % double: double', (a: number, b: number) => a % nonZeroModulus(b));
  return e;
}

function nonZeroModulus(b: number): number {
  if (b === 0) throw new Error('modulus by zero');
  return b;
}

/**
 * Compiled conditions by their text: a policy set is compiled again after every change to any
 * policy of its workspace (and a condition already when the policy is saved), while most of its
 * conditions stay the same. A compiled condition has no state of its own between evaluations
 * (they run one at a time), so one can serve every rule and workspace that has the same text.
 * Bounded by the characters of the expressions held (~60 bytes of AST each): cleared when full.
 */
const compiledConditions = new Map<string, CompileResult>();
const COMPILED_CHARACTERS = 500_000;
let compiledCharacters = 0;

/** Parses and type-checks a condition, and meters it for the decision budget (limits.ts). Never throws. */
export function compileCondition(expression: string): CompileResult {
  if (typeof expression !== 'string') return compileUncached(expression);
  const cached = compiledConditions.get(expression);
  if (cached) return cached;
  const result = compileUncached(expression);
  if (compiledCharacters + expression.length > COMPILED_CHARACTERS) {
    compiledConditions.clear();
    compiledCharacters = 0;
  }
  compiledConditions.set(expression, result);
  compiledCharacters += expression.length + 1;
  return result;
}

function compileUncached(expression: string): CompileResult {
  try {
    const program = env.parse(expression);
    const refused = refusedCall(program.ast as unknown as Node, expression);
    if (refused) return { ok: false, ...refused };
    const checked = program.check();
    if (!checked.valid) {
      return checked.error ? failure(checked.error) : { ok: false, message: 'invalid condition', position: null };
    }
    if (checked.type !== 'bool' && checked.type !== 'dyn') {
      return { ok: false, message: `a condition must evaluate to a boolean, but this one has type ${checked.type}`, position: 0 };
    }
    const units = meterScope(program.ast as unknown as Node);
    const ast = program.ast as unknown as Node;
    return { ok: true, condition: new Condition(program, units, errorUnits(expression.length), readsCallFacts(ast)) };
  } catch (error) {
    return failure(error);
  }
}

/**
 * The static limits of a condition (limits.ts), checked when a policy is saved: the number of
 * expression nodes and the nesting of comprehensions. (Not when a saved policy is loaded: the
 * runtime budget bounds what an older, larger condition can cost.) Null when within them or
 * when the condition does not parse (compileCondition reports that).
 */
export function checkConditionLimits(expression: string): { message: string; position: number | null } | null {
  let ast: Node;
  try {
    ast = env.parse(expression).ast as unknown as Node;
  } catch {
    return null;
  }
  const nodes: Node[] = [];
  parseTree(ast, (node) => nodes.push(node));
  if (nodes.length > LIMITS.conditionNodes) {
    const at = nodes.map((node) => node.start).sort((a, b) => a - b)[LIMITS.conditionNodes] ?? null;
    return {
      message: `a condition may have at most ${LIMITS.conditionNodes} expression nodes (names, literals, operators, calls); this one has ${nodes.length}`,
      position: at,
    };
  }
  const deepest = comprehensionNesting(ast);
  if (deepest.depth > LIMITS.comprehensionNesting) {
    return {
      message: `comprehensions (all, exists, exists_one, map, filter) may be nested at most ${LIMITS.comprehensionNesting} deep; this one nests ${deepest.depth}`,
      position: deepest.at,
    };
  }
  return null;
}

/** The variables a condition may read (any other identifier is a compile error, or a comprehension's own). */
const VARIABLES = new Set(['input', 'context', 'agent', 'execution']);

/**
 * Whether a condition can never hold: it reads none of the variables, so its value is the same
 * for every decision, and that value is not `true` (false, or an error, which never matches).
 * Compliance counts only rules that can take effect. A condition that reads a variable may hold.
 */
export function conditionNeverHolds(expression: string): boolean {
  const compiled = compileCondition(expression);
  if (!compiled.ok) return true;
  let readsVariable = false;
  const ast = env.parse(expression).ast as unknown as Node;
  const visit = (node: Node) => {
    if (node.op === 'id' && VARIABLES.has(node.args as string)) readsVariable = true;
  };
  visit(ast);
  parseTree(ast, (node) => forEachChild(node, visit));
  if (readsVariable) return false;
  const saved = { ...meter }; // evaluated outside any decision: whatever budget is running is left as it was
  startDecisionBudget();
  try {
    return evaluateCondition(compiled.condition, { input: {}, context: {}, agent: null, execution: null }) !== true;
  } catch {
    return true;
  } finally {
    Object.assign(meter, saved);
  }
}

/**
 * Evaluates a compiled condition. Throws a plain Error when evaluation fails (missing field, no matching
 * overload, ...) or when the result is not a boolean, and BUDGET_EXCEEDED when the decision's budget
 * (limits.ts) runs out, also if an error absorbed inside the expression (`||`, all()) hid it; the caller
 * decides how to fail closed.
 */
export function evaluateCondition(condition: CompiledCondition, variables: ConditionVariables): boolean {
  let result: unknown;
  // cel-js creates an Error for every failing step, also where `||` or all() absorb it: no stack
  // traces, which cost several times the error itself here (docs/decisions/0010-policy-cost-limits.md)
  const stackTraceLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    result = Condition.run(condition, variables);
  } catch (error) {
    if (error === BUDGET_EXCEEDED || meter.exceeded) throw BUDGET_EXCEEDED;
    meter.remaining -= Condition.errorUnits(condition); // the error's own cost; the next charge throws if that was the last straw
    const { message, position } = describeError(error);
    throw new Error(`condition evaluation failed${position === null ? '' : ` at offset ${position}`}: ${message}`, { cause: error });
  } finally {
    Error.stackTraceLimit = stackTraceLimit;
  }
  if (meter.exceeded) throw BUDGET_EXCEEDED;
  if (typeof result !== 'boolean') {
    throw new Error(`a condition must evaluate to a boolean, but this one returned ${celTypeOf(result)}`);
  }
  return result;
}

function failure(error: unknown): { ok: false; message: string; position: number | null } {
  return { ok: false, ...describeError(error) };
}

/**
 * How much of a cel-js message is kept: it may quote the condition (up to 4,096 characters),
 * and it ends up in error messages and audit events, whose `message` the spec caps at 2,000.
 */
const MAX_CEL_MESSAGE = 500;

/** cel-js errors carry a one-line `summary` and a source `range`; `message` adds a multi-line source excerpt. */
function describeError(error: unknown): { message: string; position: number | null } {
  if (!(error instanceof Error)) return { message: truncate(String(error), MAX_CEL_MESSAGE), position: null };
  const { summary, range } = error as Error & { summary?: unknown; range?: { start?: unknown } };
  const message = typeof summary === 'string' && summary !== '' ? summary : error.message.split('\n')[0] || 'invalid condition';
  const position = typeof range?.start === 'number' ? range.start : null;
  return { message: truncate(message, MAX_CEL_MESSAGE), position };
}

function celTypeOf(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'no value';
  switch (typeof value) {
    case 'bigint':
      return 'int';
    case 'number':
      return 'double';
    case 'string':
      return 'string';
    case 'object':
      if (Array.isArray(value)) return 'list';
      if (value instanceof Uint8Array) return 'bytes';
      if (value instanceof Date) return 'timestamp';
      return 'map';
    default:
      return typeof value;
  }
}
