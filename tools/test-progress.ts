/**
 * `npm test`'s progress beside vitest's own report (vitest.config.ts `reporters`): where the
 * output is not a terminal (CI, a pipe) a line per finished test file, with how many of how
 * many are done and the time so far, so a long run is never silent; and at the end, once, the
 * suites that were skipped, by file, with what the machine lacks that skips them.
 */
import { existsSync } from 'node:fs';
import type { Reporter, TestModule, TestSpecification } from 'vitest/node';

/** What skips whole suites here, when the machine lacks it. */
function lacking(): string[] {
  const reasons: string[] = [];
  if (!existsSync('/usr/bin/chromium'))
    reasons.push('no Chromium at /usr/bin/chromium: the browser tests are skipped (apt-get install chromium)');
  if (!process.env.DATABASE_URL)
    reasons.push('DATABASE_URL unset: the tests that need PostgreSQL (several processes on one database) are skipped');
  return reasons;
}

export default class TestProgress implements Reporter {
  private total = 0;
  private done = 0;
  private started = performance.now();
  private readonly live = process.stdout.isTTY === true;

  onTestRunStart(specifications: ReadonlyArray<TestSpecification>): void {
    this.total = specifications.length;
    this.done = 0;
    this.started = performance.now();
    if (!this.live) process.stdout.write(`npm test: ${this.total} test files\n`);
  }

  onTestModuleEnd(module: TestModule): void {
    this.done += 1;
    if (this.live) return;
    const elapsed = Math.round((performance.now() - this.started) / 1000);
    process.stdout.write(`[${this.done}/${this.total} files, ${elapsed} s] ${module.moduleId.replace(`${process.cwd()}/`, '')}\n`);
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const skipped: string[] = [];
    let tests = 0;
    for (const module of modules) {
      const file = module.moduleId.replace(`${process.cwd()}/`, '');
      // the outermost skipped suites (a skipped suite's own suites are not named again)
      for (const suite of module.children.allSuites())
        if (suite.state() === 'skipped' && !(suite.parent.type === 'suite' && suite.parent.state() === 'skipped'))
          skipped.push(`  ${file}: ${suite.name}`);
      for (const test of module.children.allTests()) if (test.result().state === 'skipped') tests += 1;
    }
    if (tests === 0) return;
    const lines = [`npm test skipped ${tests} tests:`, ...lacking().map((reason) => `  ${reason}`), ...skipped];
    process.stdout.write(`\n${lines.join('\n')}\n`);
  }
}
