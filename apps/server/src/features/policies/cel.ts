/**
 * CEL conditions of policy rules: compiled once when a policy is saved or loaded, evaluated per decision.
 *
 * Library: @marcbachmann/cel-js, for its speed and its type checker (errors at save, at the
 * offending token); the measurements against @bufbuild/cel are in
 * docs/decisions/0014-cel-library.md. Its `matches()` uses JavaScript RegExp (backtracking), so
 * conditions may not call it: refused when compiled, on the parsed expression
 * (REFUSED_FUNCTIONS below).
 *
 * Cost: evaluations run on the event loop every workspace shares, so each one spends the decision's budget
 * (limits.ts) as it goes — nodes, comprehension iterations, the size of the values operations touch, absorbed
 * errors — and the first charge past it ends the evaluation (see Metering below).
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
import { BUDGET_EXCEEDED, COST, charge, LIMITS, meter, startDecisionBudget } from './limits.ts';

export interface ConditionVariables {
  input: Record<string, unknown>;
  context: Record<string, unknown>;
  agent: Record<string, unknown> | null;
  /** What Warden's proxy will run (see decisions/act.ts), or null for a bare evaluation. */
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

/** Functions refused in conditions, checked on the parsed expression (not its text), with why. */
const REFUSED_FUNCTIONS: Record<string, string> = {
  // backtracking RegExp in cel-js, which refuses a replacement; a linear-time engine measured too
  // slow per decision (docs/decisions/0010-policy-cost-limits.md)
  matches:
    'matches() is not supported: regular expressions cost too much per decision (backtracking, or a slow linear engine); use startsWith, endsWith, contains, or a glob in `match`',
};

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

// ---- The parsed expression ------------------------------------------------------------------
//
// cel-js (8.0.0) gives the AST as `program.ast`: nodes with `op`, `args`, `start`/`end` (source
// offsets) and, through the public `meta` getter, what the type checker and the macro expander
// attached: `alternate` (a macro such as all() expanded into a `comprehension` node, whose
// `args` hold `iterable`, `step` and, once checked, `iterCtx`) or `macro` (has(), cel.bind()).
// A node evaluates through its `evaluate(ev, ast, ctx)` method, which the library itself
// replaces on the instance on first use; metering replaces it the same way (see wrap).

type Evaluate = (this: Node, ev: unknown, ast: Node, ctx: unknown) => unknown;

interface IterContext {
  setIterValue(value: unknown, ev: unknown): IterContext;
}

interface Node {
  op: string;
  args: unknown;
  start: number;
  end: number;
  evaluate: Evaluate;
  readonly meta: {
    alternate?: Node;
    macro?: { val?: Node; exp?: Node; evaluate?: unknown };
    evaluate?: Evaluate;
  };
}

interface ComprehensionArgs {
  iterable: Node;
  init: Node;
  step: Node;
  iterCtx?: IterContext;
  errorsAreFatal?: boolean;
}

const COMPREHENSIONS = new Set(['all', 'exists', 'exists_one', 'map', 'filter']);

const isNode = (value: unknown): value is Node =>
  typeof value === 'object' && value !== null && typeof (value as Node).op === 'string' && 'meta' in (value as object);

/** Calls `visit` with each node an AST node holds in `args`, whatever its shape (the tree as parsed, before macro expansion). */
function forEachChild(node: Node, visit: (child: Node) => void): void {
  const args = node.args;
  if (isNode(args)) visit(args);
  else if (Array.isArray(args)) {
    for (const item of args) {
      if (isNode(item)) visit(item);
      else if (Array.isArray(item)) for (const inner of item) if (isNode(inner)) visit(inner);
    }
  }
}

/** Every node of the tree as parsed (macros unexpanded). */
function parseTree(root: Node, visit: (node: Node) => void): void {
  const stack = [root];
  const push = (child: Node) => stack.push(child);
  while (stack.length > 0) {
    const node = stack.pop() as Node;
    visit(node);
    forEachChild(node, push);
  }
}

/** The method name's offset in a call `receiver.name(…)`: after the receiver, closing parentheses, spaces, comments and the dot. */
function methodNamePosition(source: string, receiver: Node): number {
  let at = receiver.end;
  while (at < source.length) {
    if (source.startsWith('//', at)) {
      const eol = source.indexOf('\n', at);
      at = eol < 0 ? source.length : eol;
    } else if (/[\s.)]/.test(source[at] as string)) at += 1;
    else break;
  }
  return at;
}

function refusedCall(root: Node, source: string): { message: string; position: number } | null {
  let found: { message: string; position: number } | null = null;
  parseTree(root, (node) => {
    if (found || (node.op !== 'call' && node.op !== 'rcall')) return;
    const [name, receiver] = node.args as [string, Node];
    const message = Object.hasOwn(REFUSED_FUNCTIONS, name) ? REFUSED_FUNCTIONS[name] : undefined;
    if (message) found = { message, position: node.op === 'rcall' ? methodNamePosition(source, receiver) : node.start };
  });
  return found;
}

/**
 * Fields of `execution` that every call of one MCP tool shares (decisions/act.ts McpFacts):
 * what it names, never what it is sent with.
 */
const CALL_INVARIANT_FIELDS = new Set(['mode', 'server', 'method', 'tool', 'prompt', 'uri']);

/**
 * Whether a condition may read what differs between calls of one tool: anything of `execution`
 * but CALL_INVARIANT_FIELDS selected by name (`execution.tool`, `execution["server"]`). Any other
 * use of `execution` (its arguments, params or digests, or the whole map passed on) counts: a
 * tool list must not judge every call by one (engine.ts, `anyCall`).
 */
function readsCallFacts(root: Node): boolean {
  const isExecution = (node: unknown) => isNode(node) && node.op === 'id' && node.args === 'execution';
  if (isExecution(root)) return true;
  let reads = false;
  parseTree(root, (node) => {
    if (reads) return;
    forEachChild(node, (child) => {
      if (!isExecution(child)) return;
      const [receiver, field] = node.args as [Node, unknown];
      const named = node.op === '.' ? field : node.op === '[]' && isNode(field) && field.op === 'value' ? field.args : undefined;
      if (receiver !== child || typeof named !== 'string' || !CALL_INVARIANT_FIELDS.has(named)) reads = true;
    });
  });
  return reads;
}

/** How deep comprehensions nest inside each other's predicates (a chain such as `l.map(…).filter(…)` does not nest). */
function comprehensionNesting(node: Node): { depth: number; at: number | null } {
  if (node.op === 'rcall' && node.meta.alternate && COMPREHENSIONS.has((node.args as [string])[0])) {
    const [, receiver, args] = node.args as [string, Node, Node[]];
    const outer = comprehensionNesting(receiver);
    let inner: { depth: number; at: number | null } = { depth: 0, at: null };
    for (const arg of args) {
      const nested = comprehensionNesting(arg);
      if (nested.depth > inner.depth) inner = nested;
    }
    const mine = { depth: inner.depth + 1, at: inner.depth === 0 ? node.start : inner.at };
    return outer.depth > mine.depth ? outer : mine;
  }
  let deepest: { depth: number; at: number | null } = { depth: 0, at: null };
  forEachChild(node, (child) => {
    const nested = comprehensionNesting(child);
    if (nested.depth > deepest.depth) deepest = nested;
  });
  return deepest;
}

// ---- Metering -------------------------------------------------------------------------------
//
// Every evaluation spends the decision's budget (limits.ts, COST):
// - the nodes of the expression outside comprehension steps, once per evaluation (Condition.run);
// - a comprehension step's nodes, once per iteration (charged as the library sets the
//   iteration variable, outside the step's own error handling, so exhaustion ends the loop);
// - the values that size-dependent operations consume (arguments and receivers of functions,
//   operands of comparisons, `in`, `+`, a comprehension's range): their characters and
//   elements, walked (iteratively, stopping once the budget is spent) before the operation runs;
// - each error absorbed by `||`, `&&`, all() or exists(), whose message cel-js builds with an
//   excerpt of the source.
// A charge that finds the budget spent throws BUDGET_EXCEEDED; the flag it leaves makes
// evaluateCondition fail even where the expression absorbed the throw.
// The hooks are cel-js internals (a node's `evaluate`, a comprehension's `iterCtx.setIterValue`):
// test/policy-limits.unit.test.ts's runtime-budget tests fail if an upgrade bypasses either.

/** Units per character of an operand, per function or method name, where it is not DEFAULT_CHAR_UNITS. */
const CHAR_UNITS: Record<string, number> = {
  size: 1 / COST.sizeCharsPerUnit,
  split: 1 / COST.splitCharsPerUnit,
  bytes: 1 / COST.bytesCharsPerUnit,
  base64: 1 / COST.bytesCharsPerUnit,
  hex: 1 / COST.bytesCharsPerUnit,
  json: 1 / COST.bytesCharsPerUnit,
  string: 1 / COST.bytesCharsPerUnit,
};
const DEFAULT_CHAR_UNITS = 1 / COST.charsPerUnit;
/** Timestamp methods that take a time zone (one argument) and build an Intl formatter for it. */
const TIME_ZONE_METHODS = new Set([
  'getDate',
  'getDayOfMonth',
  'getDayOfWeek',
  'getDayOfYear',
  'getFullYear',
  'getHours',
  'getMilliseconds',
  'getMinutes',
  'getMonth',
  'getSeconds',
]);

const errorUnits = (sourceEnd: number) => COST.error + sourceEnd / COST.errorSourceCharsPerUnit;

/** Units for a value an operation consumes: its characters and, for lists and maps, every element. */
function weigh(value: unknown, charUnits: number, elementUnits: number, limit: number): number {
  if (typeof value === 'string') return value.length * charUnits;
  if (typeof value !== 'object' || value === null) return 0;
  if (Array.isArray(value)) {
    // a flat list (the usual case, e.g. roles) without the stack below
    let flat = value.length * elementUnits;
    for (let i = 0; i < value.length && flat <= limit; i++) {
      const element = value[i];
      if (typeof element === 'string') flat += element.length * charUnits;
      else if (typeof element === 'object' && element !== null) {
        flat = -1;
        break;
      }
    }
    if (flat >= 0) return flat;
  }
  let total = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0 && total <= limit) {
    const item = stack.pop();
    if (typeof item === 'string') total += item.length * charUnits;
    else if (Array.isArray(item)) {
      total += item.length * elementUnits;
      for (const element of item) if (typeof element === 'object' || typeof element === 'string') stack.push(element);
    } else if (item instanceof Uint8Array) total += item.length * charUnits;
    else if (typeof item === 'object' && item !== null) {
      for (const key in item) {
        total += elementUnits + key.length * charUnits;
        const element = (item as Record<string, unknown>)[key];
        if (typeof element === 'object' || typeof element === 'string') stack.push(element);
      }
    }
  }
  return total;
}

/**
 * Units for a list or map an operation does not walk (size(), `in` a map, a comprehension's
 * range, whose steps pay per element): cel-js still follows its first elements to type it
 * (debugTypeDeep), one unit per level.
 */
function firstElementDepth(value: object, limit: number): number {
  let depth = 1;
  let item: unknown = value;
  while (typeof item === 'object' && item !== null && depth <= limit) {
    if (Array.isArray(item)) item = item[0];
    else {
      let first: unknown;
      for (const key in item) {
        first = (item as Record<string, unknown>)[key];
        break;
      }
      item = first;
    }
    depth += 1;
  }
  return depth;
}

/** Units for listing a map's keys (size() of a map, a comprehension over one): one per key. */
function keyCount(value: object, limit: number): number {
  let keys = 0;
  for (const _ in value) if (++keys > limit) break;
  return keys;
}

/**
 * How an operation goes over a list or map operand: `all` of it (comparisons, most functions);
 * its `keys` only (size(), a comprehension's range, whose steps pay per element): a map's keys
 * and the first elements; or all of a list but one key of a map (`in`).
 */
type Walk = 'all' | 'keys' | 'in';

/** The node's evaluate as the library would resolve it, or an earlier wrapper. */
function currentEvaluate(node: Node): Evaluate {
  if (Object.hasOwn(node, 'evaluate')) return node.evaluate;
  const { alternate, macro, evaluate } = node.meta;
  if (alternate) return (ev, _ast, ctx) => alternate.evaluate(ev, alternate, ctx);
  if (macro) {
    const run = macro.evaluate as (ev: unknown, macro: unknown, ctx: unknown) => unknown;
    return (ev, _ast, ctx) => run(ev, macro, ctx);
  }
  if (!evaluate) throw new Error(`cannot meter a '${node.op}' node`);
  return evaluate;
}

function wrap(node: Node, around: (inner: Evaluate) => Evaluate): void {
  node.evaluate = around(currentEvaluate(node));
}

/** Charges what `node`'s value weighs each time it is evaluated for a size-dependent operation. */
function consumed(node: Node, scope: { units: number }, charUnits: number, elementUnits: number = COST.element, walk: Walk = 'all'): void {
  if (node.op === 'value') {
    scope.units += weigh(node.args, charUnits, elementUnits, Number.POSITIVE_INFINITY); // a literal weighs the same every time
    return;
  }
  wrap(node, (inner) => (ev, ast, ctx) => {
    const value = inner.call(node, ev, ast, ctx);
    if (typeof value === 'string') charge(value.length * charUnits);
    else if (typeof value === 'object' && value !== null) {
      const list = Array.isArray(value);
      if (walk === 'all' || (walk === 'in' && list)) charge(weigh(value, charUnits, elementUnits, meter.remaining));
      else charge(firstElementDepth(value, meter.remaining) + (walk === 'keys' && !list ? keyCount(value, meter.remaining) : 0));
    }
    return value;
  });
}

/** Charges an error thrown under `node` that its parent may absorb. */
function absorbable(node: Node): void {
  const units = errorUnits(node.end);
  wrap(node, (inner) => (ev, ast, ctx) => {
    try {
      return inner.call(node, ev, ast, ctx);
    } catch (error) {
      if (error !== BUDGET_EXCEEDED) charge(units);
      throw error;
    }
  });
}

/** Meters the evaluation tree under `root`; returns the units of one evaluation outside comprehension steps. */
function meterScope(root: Node): number {
  const scope = { units: 2 }; // the call itself
  meterNode(root, scope);
  return scope.units;
}

const OPERATORS = new Set(['==', '!=', '<', '<=', '>', '>=', 'in', '+', '-', '*', '/', '%', '!_', '-_']);
const PARSING_CALLS = new Set(['timestamp', 'duration']);
const CONVERTING_CALLS = new Set(['string', 'int', 'uint', 'double', 'bool', 'bytes', 'dyn', 'type']);

function nodeUnits(node: Node): number {
  if (node.op === 'call' || node.op === 'rcall') {
    const name = (node.args as [string])[0];
    if (PARSING_CALLS.has(name)) return COST.parse;
    if (CONVERTING_CALLS.has(name)) return COST.convert;
    return COST.call;
  }
  return OPERATORS.has(node.op) ? COST.operator : COST.node;
}

function meterNode(node: Node, scope: { units: number }): void {
  const { alternate, macro } = node.meta;
  if (alternate) {
    scope.units += COST.node;
    meterNode(alternate, scope); // a macro expanded (all, exists, map, …): the expansion is what runs
    return;
  }
  if (macro) {
    // has(): walks its field path without evaluating those nodes; cel.bind(): its value and expression
    scope.units += macro.val ? COST.node : COST.has;
    if (macro.val) meterNode(macro.val, scope);
    if (macro.exp) meterNode(macro.exp, scope);
    return;
  }
  scope.units += nodeUnits(node);
  switch (node.op) {
    case 'comprehension': {
      const args = node.args as ComprehensionArgs;
      meterNode(args.iterable, scope);
      consumed(args.iterable, scope, DEFAULT_CHAR_UNITS, COST.element, 'keys'); // each iteration pays for itself
      meterNode(args.init, scope);
      const step = { units: 1 };
      meterNode(args.step, step);
      if (!args.errorsAreFatal) absorbable(args.step); // all(), exists() go on past a failing step
      const ctx = args.iterCtx;
      if (!ctx) throw new Error('cannot meter a comprehension that was not type-checked');
      const setIterValue = ctx.setIterValue;
      const units = step.units;
      ctx.setIterValue = (value, ev) => {
        charge(units);
        return setIterValue.call(ctx, value, ev);
      };
      return;
    }
    case 'call':
    case 'rcall': {
      const [name, ...rest] = node.args as [string, ...unknown[]];
      const receiver = node.op === 'rcall' ? (rest[0] as Node) : null;
      const args = (node.op === 'rcall' ? rest[1] : rest[0]) as Node[];
      const charUnits = CHAR_UNITS[name] ?? DEFAULT_CHAR_UNITS;
      const elementUnits = name === 'join' ? COST.joinElement : COST.element;
      const walk: Walk = name === 'size' ? 'keys' : 'all';
      if (receiver) {
        meterNode(receiver, scope);
        consumed(receiver, scope, charUnits, elementUnits, walk);
      }
      for (const arg of args) meterNode(arg, scope);
      if (name === 'duration') {
        // its parser runs an unanchored regex, quadratic in the string
        for (const arg of args) durationArgument(arg, scope);
      } else for (const arg of args) consumed(arg, scope, charUnits, elementUnits, walk);
      if (receiver && args.length === 1 && TIME_ZONE_METHODS.has(name)) scope.units += COST.timeZone;
      return;
    }
    case '||':
    case '&&': {
      const [left, right] = node.args as [Node, Node];
      meterNode(left, scope);
      meterNode(right, scope);
      absorbable(left);
      return;
    }
    case '==':
    case '!=':
    case '<':
    case '<=':
    case '>':
    case '>=':
    case 'in':
    case '+': {
      const [left, right] = node.args as [Node, Node];
      meterNode(left, scope);
      meterNode(right, scope);
      consumed(left, scope, DEFAULT_CHAR_UNITS);
      consumed(right, scope, DEFAULT_CHAR_UNITS, COST.element, node.op === 'in' ? 'in' : 'all');
      return;
    }
    default:
      // literals, names, field and index access, list and map literals, ?:, !, -, * / %, and the
      // comprehension's accumulator nodes: constant work per node, or per child node
      forEachChild(node, (child) => meterNode(child, scope));
  }
}

function durationArgument(node: Node, scope: { units: number }): void {
  const squared = (text: string) => (text.length * text.length) / 50;
  if (node.op === 'value') {
    if (typeof node.args === 'string') scope.units += squared(node.args);
    return;
  }
  wrap(node, (inner) => (ev, ast, ctx) => {
    const value = inner.call(node, ev, ast, ctx);
    if (typeof value === 'string') charge(squared(value));
    return value;
  });
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
