// Unit tests of the frontend's pure helpers (lib/series.js, lib/plot.js), run by Node's own
// test runner from tests/test_frontend_units.py: LABKIT_TS_LIB names a folder holding the
// compiled modules as .mjs.
import assert from 'node:assert/strict';
import { test } from 'node:test';

const lib = process.env.LABKIT_TS_LIB;
const { append, clock, firstTime, groupOf, orderGroups, plottable, progressOf, thin, xFormat,
        xValues } = await import(`${lib}/series.mjs`);
const { formatNumber, lastAtOrBefore, smooth, ticks, escapeHtml } = await import(`${lib}/plot.mjs`);

test('append keeps each point once, in order, whatever arrives', () => {
  let s = append(undefined, { iteration: [1, 2, 3], value: [1, 2, 3] });
  s = append(s, { iteration: [2, 3, 4, 5], value: [9, 9, 4, 5] });  // overlap: only 4, 5
  s = append(s, { iteration: [1, 7, 6], value: [0, 7, 6] });          // backwards: 7 only
  assert.deepEqual(s.iteration, [1, 2, 3, 4, 5, 7]);
  assert.deepEqual(s.value, [1, 2, 3, 4, 5, 7]);
  s = append(s, { iteration: ['8', 9, null], value: [8, '<b>', 10] });
  assert.deepEqual(s.iteration, [1, 2, 3, 4, 5, 7, 9]);
  assert.equal(s.value.at(-1), null, 'a value that is not a number is a gap');
});

test('thin keeps the ends and every bucket extreme, at most maxPoints, in order', () => {
  const n = 10000;
  const it = Array.from({ length: n }, (_, i) => i);
  const value = it.map(i => Math.sin(i / 50));
  value[6789] = 99;
  value[1234] = -99;
  const t = thin({ iteration: it, value }, 500);
  assert.ok(t.iteration.length <= 500);
  assert.equal(t.iteration[0], 0);
  assert.equal(t.iteration.at(-1), n - 1);
  assert.ok(t.iteration.includes(6789) && t.iteration.includes(1234));
  assert.ok(t.iteration.every((x, i) => i === 0 || x > t.iteration[i - 1]));
  const small = { iteration: [1, 2], value: [1, 2] };
  assert.equal(thin(small, 500), small);
});

test('figures: loss first, then by name; per-batch, train, valid, test', () => {
  assert.deepEqual(orderGroups(['valid_acc', 'zeta', 'train_loss', 'loss', 'acc', 'valid_loss']),
                   [['loss', ['loss', 'train_loss', 'valid_loss']], ['acc', ['acc', 'valid_acc']],
                    ['zeta', ['zeta']]]);
  assert.equal(groupOf('test_accuracy'), 'accuracy');
  assert.ok(!plottable('time_step') && !plottable('best_valid_loss') && plottable('loss'));
});

test('progress keeps only checked numbers', () => {
  const p = progressOf({ progress: { iteration: '<img>', epoch: 3, elapsed: Infinity,
                                     training: 'yes', last: { loss: 0.5, x: '<b>' },
                                     planned: { epochs: 10, iterations: '9' } } });
  assert.equal(p.iteration, 0);
  assert.equal(p.epoch, 3);
  assert.equal(p.elapsed, null);
  assert.equal(p.training, false);
  assert.deepEqual(p.last, { loss: 0.5 });
  assert.deepEqual(p.planned, { epochs: 10, iterations: null, seconds: null });
  assert.equal(progressOf(null).iteration, 0);
});

test('smoothing is debiased, and leaves gaps', () => {
  assert.deepEqual(smooth([5, 5, 5], 0.9).map(v => Number(v.toFixed(9))), [5, 5, 5]);
  const s = smooth([0, 10, null, 10], 0.5);
  assert.equal(s[0], 0);
  assert.equal(s[2], null);
  assert.ok(s[1] > 5 && s[1] < 10);
  assert.deepEqual(smooth([1, 2], 0), [1, 2]);
});

test('ticks are round and cover the range; numbers and clocks read well', () => {
  const u = ticks(0, 1, 5);
  assert.equal(u.length, 6);
  assert.equal(u[0], 0);
  assert.ok(Math.abs(u[5] - 1) < 1e-9 && Math.abs(u[1] - 0.2) < 1e-9);
  const t = ticks(0.13, 0.87, 4);
  assert.ok(t.length >= 3 && t[0] >= 0.13 && t.at(-1) <= 0.87);
  assert.equal(formatNumber(0.000012345), '1.23e-5');
  assert.equal(formatNumber(1234.5678), '1235');
  assert.equal(clock(3725), '1:02:05');
  assert.equal(clock(65), '1:05');
  assert.equal(lastAtOrBefore([1, 3, 5], 4), 1);
  assert.equal(lastAtOrBefore([1, 3, 5], 0), -1);
  assert.equal(escapeHtml('<a href="x">'), '&#60;a href=&#34;x&#34;&#62;');
});

test('xValues: iteration, epoch (fractional with a known length), wall time from t0', () => {
  const s = { iteration: [10, 20, 30], epoch: [0, 1, 1], time: [100, null, 90], value: [1, 2, 3] };
  assert.deepEqual(xValues(s, 'iteration', 0), [10, 20, 30]);
  assert.deepEqual(xValues(s, 'epoch', 0), [0, 1, 1]);
  assert.deepEqual(xValues(s, 'epoch', 0, 20), [0.5, 1, 1.5]);
  // a missing time keeps the previous one; time never goes back along a curve
  assert.deepEqual(xValues(s, 'time', 95), [5, 5, 5]);
  // no time recorded at all: by iteration
  assert.deepEqual(xValues({ iteration: [1, 2], value: [0, 0] }, 'time', Infinity), [1, 2]);
  assert.equal(firstTime([s, { iteration: [1], time: [null, 42], value: [0] }]), 42);
  assert.equal(firstTime([{ iteration: [], value: [] }]), Infinity);
  assert.equal(xFormat('time')(75), clock(75));
  assert.equal(xFormat('epoch')(1.23456), '1.23');
  assert.equal(xFormat('iteration')(9.6), '10');
});
