/**
 * The metering of CEL conditions (cel.ts).
 *
 * Every evaluation spends the decision's budget (limits.ts, COST):
 * - the nodes of the expression outside comprehension steps, once per evaluation (Condition.run);
 * - a comprehension step's nodes, once per iteration (charged as the library sets the
 *   iteration variable, outside the step's own error handling, so exhaustion ends the loop);
 * - the values that size-dependent operations consume (arguments and receivers of functions,
 *   operands of comparisons, `in`, `+`, a comprehension's range): their characters and
 *   elements, walked (iteratively, stopping once the budget is spent) before the operation runs;
 * - each error absorbed by `||`, `&&`, all() or exists(), whose message cel-js builds with an
 *   excerpt of the source.
 * A charge that finds the budget spent throws BUDGET_EXCEEDED; the flag it leaves makes
 * evaluateCondition fail even where the expression absorbed the throw.
 * The hooks are cel-js internals (a node's `evaluate`, a comprehension's `iterCtx.setIterValue`):
 * test/policy-limits.unit.test.ts's runtime-budget tests fail if an upgrade bypasses either.
 */
import { type ComprehensionArgs, type Evaluate, forEachChild, type Node } from './cel-ast.ts';
import { BUDGET_EXCEEDED, COST, charge, meter } from './limits.ts';

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

export const errorUnits = (sourceEnd: number) => COST.error + sourceEnd / COST.errorSourceCharsPerUnit;

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
export function meterScope(root: Node): number {
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
