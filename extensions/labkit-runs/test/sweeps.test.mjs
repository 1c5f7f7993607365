// Unit tests of the Sweeps section's pure rules (lib/sweeps_model.js), run by Node's test
// runner from tests/test_frontend_units.py.
import assert from 'node:assert/strict';
import { test } from 'node:test';

const lib = process.env.LABKIT_TS_LIB;
const { bestFirst, compareIds, doneText, paramsText, sweepDamage, sweepStatusClass,
        trialsToLoad } =
  await import(`${lib}/sweeps_model.mjs`);

const t = (trial, value, run_id = `r${trial}`) =>
  ({ trial, status: 'finished', params: {}, value, run_id });

test('bestFirst: by mode, valueless last, ties by trial number', () => {
  const trials = [t(0, 0.5), t(1, null), t(2, 0.9), t(3, 0.5), t(4, NaN)];
  assert.deepEqual(bestFirst(trials, 'max').map(x => x.trial), [2, 0, 3, 1, 4]);
  assert.deepEqual(bestFirst(trials, 'min').map(x => x.trial), [0, 3, 2, 1, 4]);
  assert.deepEqual(trials.map(x => x.trial), [0, 1, 2, 3, 4]);  // not sorted in place
});

test('compareIds: the best trials with a run, at most max, each once', () => {
  const trials = [];
  for (let i = 0; i < 80; i++) {
    trials.push(t(i, i));
  }
  trials.push(t(80, 1000, null));  // no run yet: never compared
  const best = compareIds(trials, 'max', 50);
  assert.equal(best.length, 50);
  assert.equal(best[0], 'r79');
  assert.equal(best[49], 'r30');
  assert.deepEqual(compareIds(trials, 'min', 3), ['r0', 'r1', 'r2']);
  assert.deepEqual(compareIds([t(0, 1, 'a'), t(1, 2, 'a')], 'min'), ['a']);
  assert.deepEqual(compareIds([t(0, 1, 'bad')], 'min', 50, id => id !== 'bad'), []);
});

test('doneText and sweepStatusClass', () => {
  assert.equal(doneText(12, 20), '12/20 done');
  assert.equal(doneText(undefined, null), '0/0 done');
  assert.equal(sweepStatusClass('stopped'), 'labkit-status-stopped');
  assert.equal(sweepStatusClass('<b>'), 'labkit-status-unknown');
  assert.equal(sweepStatusClass('damaged'), 'labkit-status-damaged');
});

test('paramsText: short numbers, cut to length', () => {
  assert.equal(paramsText({ lr: 0.00123456, depth: 3, act: 'relu' }),
               'lr=0.00123 · depth=3 · act=relu');
  assert.equal(paramsText(null), '');
  const long = paramsText({ name: 'x'.repeat(200) }, 20);
  assert.equal(long.length, 20);
  assert.ok(long.endsWith('…'));
});

test('sweepDamage: why a listed sweep cannot be read, or null', () => {
  assert.equal(sweepDamage({ status: 'damaged', damaged: 'its settings is not a JSON object' }),
               'its settings is not a JSON object');
  assert.equal(sweepDamage({ status: 'damaged' }), 'its row in the run store cannot be read');
  assert.equal(sweepDamage({ status: 'running' }), null);
});

test('trialsToLoad: each open sweep that can be read, none while the section is collapsed', () => {
  const sweeps = [{ id: 'a', status: 'running' }, { id: 'b', status: 'damaged', damaged: 'x' },
                  { id: 'c', status: 'finished' }, { id: 'd', status: 'finished' }];
  assert.deepEqual(trialsToLoad(sweeps, new Set(['a', 'b', 'd', 'gone']), false), ['a', 'd']);
  assert.deepEqual(trialsToLoad(sweeps, new Set(['a']), true), []);
});
