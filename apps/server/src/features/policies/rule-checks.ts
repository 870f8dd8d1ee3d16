/** The checks a policy's rules pass when saved (and when simulated): CEL compiles, limits hold. */
import type { PolicyRule } from '@warden/contract';
import { ApiError } from '../../shared/errors.ts';
import { checkConditionLimits } from './cel.ts';
import { checkConditions } from './engine.ts';
import { checkPolicyLimits } from './limits.ts';

/** CEL conditions are compiled when a policy is saved, so a broken one never reaches evaluation. */
export function checkRules(rules: PolicyRule[]): void {
  const failure = checkConditions(rules);
  if (failure) {
    const at = failure.position === null ? '' : ` at position ${failure.position}`;
    throw new ApiError('invalid_policy', `rules[${failure.index}].condition: ${failure.message}${at}`);
  }
}

/** The limits one policy's rules must keep by themselves (limits.ts): 400 `invalid_policy` naming the rule and the limit. */
export function checkLimits(rules: readonly PolicyRule[]): void {
  const broken = checkPolicyLimits(rules);
  if (broken) throw new ApiError('invalid_policy', broken);
  for (const [index, rule] of rules.entries()) {
    if (rule.condition === undefined) continue;
    const failure = checkConditionLimits(rule.condition);
    if (!failure) continue;
    const name = rule.id ? `rules[${index}] ('${rule.id}')` : `rules[${index}]`;
    const at = failure.position === null ? '' : ` at position ${failure.position}`;
    throw new ApiError('invalid_policy', `${name}.condition: ${failure.message}${at}`);
  }
}
