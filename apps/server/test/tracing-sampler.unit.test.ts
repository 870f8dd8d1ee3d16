import { describe, expect, it } from 'vitest';
import { DEFAULT_SAMPLER, useDefaultSampler } from '../src/observability/tracing.ts';

describe("useDefaultSampler: Warden's sampler unless OTEL_TRACES_SAMPLER names one", () => {
  it('sets parentbased_traceidratio at 0.1 when nothing is set', () => {
    const env: NodeJS.ProcessEnv = {};
    useDefaultSampler(env);
    expect(env).toEqual({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' });
    expect(DEFAULT_SAMPLER).toEqual({ name: 'parentbased_traceidratio', ratio: '0.1' });
  });
  it('keeps a ratio given alone, for its own sampler', () => {
    const env: NodeJS.ProcessEnv = { OTEL_TRACES_SAMPLER_ARG: '0.5' };
    useDefaultSampler(env);
    expect(env).toEqual({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.5' });
  });
  it('leaves a sampler the operator chose, and its argument, alone', () => {
    for (const env of [{ OTEL_TRACES_SAMPLER: 'always_on' }, { OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01' }]) {
      const before = { ...env };
      useDefaultSampler(env);
      expect(env).toEqual(before);
    }
  });
});
