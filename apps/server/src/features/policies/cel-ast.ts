/**
 * The parsed form of a CEL condition (cel.ts) and what is read off it: refused calls, the
 * comprehensions' nesting, whether it reads what differs between calls of one tool.
 *
 * cel-js (8.0.0) gives the AST as `program.ast`: nodes with `op`, `args`, `start`/`end` (source
 * offsets) and, through the public `meta` getter, what the type checker and the macro expander
 * attached: `alternate` (a macro such as all() expanded into a `comprehension` node, whose
 * `args` hold `iterable`, `step` and, once checked, `iterCtx`) or `macro` (has(), cel.bind()).
 * A node evaluates through its `evaluate(ev, ast, ctx)` method, which the library itself
 * replaces on the instance on first use; metering replaces it the same way (see wrap).
 */

/** Functions refused in conditions, checked on the parsed expression (not its text), with why. */
export const REFUSED_FUNCTIONS: Record<string, string> = {
  // backtracking RegExp in cel-js, which refuses a replacement; a linear-time engine measured too
  // slow per decision (docs/decisions/0010-policy-cost-limits.md)
  matches:
    'matches() is not supported: regular expressions cost too much per decision (backtracking, or a slow linear engine); use startsWith, endsWith, contains, or a glob in `match`',
};

export type Evaluate = (this: Node, ev: unknown, ast: Node, ctx: unknown) => unknown;

interface IterContext {
  setIterValue(value: unknown, ev: unknown): IterContext;
}

export interface Node {
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

export interface ComprehensionArgs {
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
export function forEachChild(node: Node, visit: (child: Node) => void): void {
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
export function parseTree(root: Node, visit: (node: Node) => void): void {
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

export function refusedCall(root: Node, source: string): { message: string; position: number } | null {
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
 * Fields of `execution` that every call of one MCP tool shares (acts/act.ts McpFacts):
 * what it names, never what it is sent with.
 */
const CALL_INVARIANT_FIELDS = new Set(['mode', 'server', 'method', 'tool', 'prompt', 'uri']);

/**
 * Whether a condition may read what differs between calls of one tool: anything of `execution`
 * but CALL_INVARIANT_FIELDS selected by name (`execution.tool`, `execution["server"]`). Any other
 * use of `execution` (its arguments, params or digests, or the whole map passed on) counts: a
 * tool list must not judge every call by one (engine.ts, `anyCall`).
 */
export function readsCallFacts(root: Node): boolean {
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
export function comprehensionNesting(node: Node): { depth: number; at: number | null } {
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
