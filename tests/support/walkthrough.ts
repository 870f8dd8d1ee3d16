/**
 * A README walk-through as a person follows it: its shell blocks read into steps (a command and
 * the output the README shows under it as `# …` lines), and a documented output read as a
 * pattern an actual output must match whole.
 *
 * How the README writes outputs, and what the pattern makes of it:
 * - `# ` starts an output line, `#  ` (two spaces) continues the previous one where it was
 *   wrapped (no space is added);
 * - `…` stands for anything (fields, the rest of a value);
 * - what is random in every run is a wildcard: a token of 4 or more hex characters with a digit
 *   (ids, hashes, key ids) and the run of letters and digits just before a `…` (a secret's or a
 *   cursor's first characters); a whole UUID is captured, so that the README's example id, where
 *   it appears again (`APPROVAL=8bd26fb8-…`), is replaced by the id this run got;
 * - `# the same request again:` repeats the step before; `# <file>: <content>` after a command
 *   that writes `> <file>` is the file's content;
 * - everything else, numbers included, must match exactly: that is what drifts.
 */

export interface Step {
  /** The shell command, or null when the step runs the previous one again. */
  command: string | null;
  /** The output the README shows, lines joined (null: none shown). */
  shown: string | null;
  /** The file whose content is shown instead of the output. */
  file?: string;
}

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;

/** The steps of one fenced block. */
export function stepsOf(block: string): Step[] {
  const steps: Step[] = [];
  let command: string[] = [];
  let quoted = false;
  const finishCommand = () => {
    if (command.length > 0) steps.push({ command: command.join('\n'), shown: null });
    command = [];
  };
  for (const line of block.split('\n')) {
    if (quoted || (command.length > 0 && command.at(-1)?.endsWith('\\'))) {
      command.push(line);
      quoted = (quoted ? 1 : 0) + ((line.match(/'/g) ?? []).length % 2) === 1;
      continue;
    }
    if (line.startsWith('#')) {
      finishCommand();
      const last = steps.at(-1);
      if (/^# .* again:$/.test(line)) steps.push({ command: null, shown: null });
      else if (line.startsWith('#  ') && last?.shown != null) last.shown += line.slice(3);
      else if (last) {
        const file = /^# ([\w.-]+): (.*)$/.exec(line);
        const writes = last.command ? new RegExp(`> ${file?.[1]?.replace(/\./g, '\\.')}\\s*$`).test(last.command) : false;
        if (file && writes && last.shown === null) {
          last.file = file[1];
          last.shown = file[2] as string;
        } else last.shown = last.shown === null ? line.slice(2) : `${last.shown}\n${line.slice(2)}`;
      }
      continue;
    }
    finishCommand();
    if (line.trim() === '') continue;
    command.push(line);
    quoted = (line.match(/'/g) ?? []).length % 2 === 1;
  }
  finishCommand();
  return steps;
}

const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Whether `actual` is what `shown` shows. `known` maps the README's example UUIDs to this run's
 * (those seen in earlier outputs are literal here); new ones found here are added to it.
 */
export function matchShown(shown: string, actual: string, known: Map<string, string>): boolean {
  let pattern = '';
  const captured: string[] = [];
  // a token: a UUID, a hex-ish run, a run before `…`, `…`, or one other character
  const token =
    /([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})|([A-Za-z0-9+/=]+)(?=…)|(…)|([0-9a-f]*[0-9][0-9a-f]*)|([\s\S])/g;
  for (const [, uuid, beforeEllipsis, ellipsis, hexish, other] of shown.matchAll(token)) {
    if (uuid !== undefined) {
      const run = known.get(uuid);
      if (run !== undefined) pattern += literal(run);
      else if (captured.includes(uuid)) pattern += `\\k<u${captured.indexOf(uuid)}>`;
      else {
        pattern += `(?<u${captured.length}>[0-9a-f-]{36})`;
        captured.push(uuid);
      }
    } else if (beforeEllipsis !== undefined) pattern += '[A-Za-z0-9+/=_-]*';
    else if (ellipsis !== undefined) pattern += '[\\s\\S]*?';
    else if (hexish !== undefined) pattern += hexish.length >= 4 && /[0-9]/.test(hexish) ? '[0-9a-f]+' : literal(hexish);
    else pattern += literal(other as string);
  }
  const match = new RegExp(`^${pattern}$`).exec(actual.trim());
  if (!match) return false;
  for (const [i, uuid] of captured.entries()) known.set(uuid, match.groups?.[`u${i}`] as string);
  return true;
}

/** `text` with the README's example UUIDs replaced by this run's. */
export const withKnown = (text: string, known: Map<string, string>) => text.replace(UUID, (uuid) => known.get(uuid) ?? uuid);
