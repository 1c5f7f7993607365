// Unit tests of the compare page's pure rules (lib/compare_model.js) and the parallel
// coordinates' maths (lib/parcoords_layout.js), run by Node's test runner from
// tests/test_frontend_units.py: LABKIT_TS_LIB names a folder holding them as .mjs.
import assert from 'node:assert/strict';
import { test } from 'node:test';

const lib = process.env.LABKIT_TS_LIB;
const {
  bestOf, compareValues, configDiff, damageOf, defaultMode, duration, filterRows, flatten,
  knownConfigs, parseFilter, runLabels, sameText, sameValue, sortRows, valueText
} = await import(`${lib}/compare_model.mjs`);
const { axisFor, axisTicks, axisX, nearest, polyline, position, segmentDistance } =
  await import(`${lib}/parcoords_layout.mjs`);

test('flatten makes dotted keys, keeps lists and empty objects as values', () => {
  assert.deepEqual(flatten({ lr: 0.1, model: { depth: 2, act: { name: 'relu' } }, sizes: [1, 2],
                             extra: {} }),
                   { lr: 0.1, 'model.depth': 2, 'model.act.name': 'relu', sizes: [1, 2], extra: {} });
  assert.deepEqual(flatten(null), {});
  assert.deepEqual(flatten([1, 2]), {});
});

test('configDiff: the keys that differ (or that a run lacks), and the same in all', () => {
  const d = configDiff([
    { lr: 0.1, epochs: 3, model: { depth: 2, width: 8 }, opt: 'adam' },
    { lr: 0.01, epochs: 3, model: { depth: 2, width: 16 }, opt: 'adam', seed: 1 },
    { lr: 0.1, epochs: 3.0, model: { depth: 2, width: 8 }, opt: 'adam' }
  ]);
  assert.deepEqual(d.differ, ['lr', 'model.width', 'seed']);
  assert.deepEqual(d.same, [['epochs', 3], ['model.depth', 2], ['opt', 'adam']]);
  assert.equal(sameText(d.same), 'epochs=3, model.depth=2, opt=adam');
  assert.deepEqual(d.flat[1]['model.width'], 16);
  // 1 and "1" differ; equal lists are the same; null and absent differ
  assert.deepEqual(configDiff([{ a: 1, b: [1, 2], c: null }, { a: '1', b: [1, 2] }]).differ,
                   ['a', 'c']);
  assert.ok(sameValue([1, { x: 2 }], [1, { x: 2 }]) && !sameValue(1, '1'));
  assert.deepEqual(configDiff([]), { flat: [], differ: [], same: [] });
});

test('valueText writes values as text, never as markup', () => {
  assert.equal(valueText('<b>x</b>'), '<b>x</b>');
  assert.equal(valueText(0.001), '0.001');
  assert.equal(valueText(undefined), '—');
  assert.equal(valueText(null), 'null');
  assert.equal(valueText({ a: [1] }), '{"a":[1]}');
  assert.equal(valueText(true), 'true');
});

test('bestOf: the lowest or highest finite value and its first iteration', () => {
  const s = { iteration: [1, 2, 3, 4, 5], value: [0.5, null, 0.2, 0.9, 0.2] };
  assert.deepEqual(bestOf(s, 'min'), { value: 0.2, iteration: 3 });
  assert.deepEqual(bestOf(s, 'max'), { value: 0.9, iteration: 4 });
  assert.equal(bestOf({ iteration: [1], value: [null] }, 'min'), null);
  assert.equal(bestOf(undefined, 'min'), null);
  assert.deepEqual(bestOf({ iteration: [1, 2], value: [NaN, -Infinity] }, 'min'), null);
  assert.equal(defaultMode('valid_accuracy'), 'max');
  assert.equal(defaultMode('train_loss'), 'min');
});

test('duration: ended (or last heartbeat, or now) minus started (or created)', () => {
  assert.equal(duration({ started: 100, ended: 160 }, 999), 60);
  assert.equal(duration({ created: 100, heartbeat: 130 }, 999), 30);
  assert.equal(duration({ started: 100 }, 250), 150);
  assert.equal(duration({}, 250), null);
  assert.equal(duration({ started: 200, ended: 100 }, 250), 0);
});

const rows = [
  { id: 'a', cells: { run: 'mlp · 0a1b', lr: 0.1, opt: 'adam', best: 0.5 } },
  { id: 'b', cells: { run: 'mlp · 9f00', lr: 0.01, opt: 'sgd', best: undefined } },
  { id: 'c', cells: { run: 'cnn · 1234', lr: 0.001, opt: 'adam', best: 0.25 } },
  { id: 'd', cells: { run: 'mlp · 10ff', lr: 0.1, opt: 'Adam W', best: 0.75 } }
];
const ids = rs => rs.map(r => r.id).join('');

test('sortRows: numbers by value, text in natural order, stable, absent last both ways', () => {
  assert.equal(ids(sortRows(rows, 'lr')), 'cbad');
  assert.equal(ids(sortRows(rows, 'lr', true)), 'adbc');
  assert.equal(ids(sortRows(rows, 'best')), 'cadb');
  assert.equal(ids(sortRows(rows, 'best', true)), 'dacb');
  assert.equal(ids(sortRows(rows, 'run')), 'cabd', 'natural order: 0a1b, 9f00, 10ff');
  assert.equal(ids(sortRows(rows, 'nope')), 'abcd');
  assert.ok(compareValues(2, 'x') < 0 && compareValues('x10', 'x9') > 0);
  assert.equal(ids(rows), 'abcd', 'the rows given are not reordered');
});

test('filters: text contained (any case), or a comparison, numeric when both sides are', () => {
  assert.equal(ids(filterRows(rows, { opt: 'ADAM' })), 'acd');
  assert.equal(ids(filterRows(rows, { lr: '> 0.005' })), 'abd');
  assert.equal(ids(filterRows(rows, { lr: '<=0.01' })), 'bc');
  assert.equal(ids(filterRows(rows, { lr: '=0.1' })), 'ad');
  assert.equal(ids(filterRows(rows, { opt: '= adam' })), 'ac');
  assert.equal(ids(filterRows(rows, { opt: '!=adam' })), 'bd');
  assert.equal(ids(filterRows(rows, { best: '< 0.6' })), 'ac', 'an absent value is no match');
  assert.equal(ids(filterRows(rows, { best: '!= 0.5' })), 'bcd');
  assert.equal(ids(filterRows(rows, { opt: 'adam', lr: '>0.01' })), 'ad', 'filters combine');
  assert.equal(ids(filterRows(rows, { opt: '  ', lr: '' })), 'abcd');
  assert.equal(parseFilter('0.0')(0.001), true, 'plain text matches as text');
  assert.equal(parseFilter('<b>')('<b>x'), true);
});

test('runLabels: name and short id, longer ids when two would read the same', () => {
  assert.deepEqual(runLabels([{ id: '20261204-101500-0123456789abcdef', name: 'mlp' },
                              { id: '20261204-101501-ffff456789abcdef', name: null }]),
                   ['mlp · 0123', 'unnamed · ffff']);
  const same = runLabels([{ id: '20261204-101500-0123aa6789abcdef', name: 'x' },
                          { id: '20261204-101500-0123bb6789abcdef', name: 'x' }]);
  assert.deepEqual(same, ['x · 0123aa', 'x · 0123bb']);
});

test('axes: numeric linear, log over two decades, categorical otherwise', () => {
  assert.deepEqual(axisFor('lr', [0.1, 0.2, undefined]), { kind: 'linear', key: 'lr', lo: 0.1, hi: 0.2 });
  assert.deepEqual(axisFor('lr', [1e-4, 1e-2, 1e-1]), { kind: 'log', key: 'lr', lo: 1e-4, hi: 0.1 });
  assert.equal(axisFor('x', [-1, 1000]).kind, 'linear', 'no log axis across zero');
  assert.deepEqual(axisFor('opt', ['sgd', 'adam', 'sgd', null]),
                   { kind: 'category', key: 'opt', categories: ['adam', 'sgd'] });
  assert.deepEqual(axisFor('m', [1, 'a']).categories, ['1', 'a'], 'mixed: categorical');
  assert.deepEqual(axisFor('w', [[1], [2]]).categories, ['[1]', '[2]']);
});

test('positions: 0 at the bottom, 1 at the top; a lone value in the middle; absent null', () => {
  const lin = axisFor('a', [2, 4]);
  assert.equal(position(lin, 2), 0);
  assert.equal(position(lin, 3), 0.5);
  assert.equal(position(lin, 4), 1);
  assert.equal(position(lin, undefined), null);
  assert.equal(position(lin, 'x'), null);
  const log = axisFor('lr', [1e-4, 1e-2, 1]);
  assert.ok(Math.abs(position(log, 1e-2) - 0.5) < 1e-12);
  assert.equal(position(log, 0), null);
  assert.equal(position(axisFor('one', [7, 7]), 7), 0.5);
  const cat = axisFor('opt', ['sgd', 'adam', 'rms']);
  assert.deepEqual(['adam', 'rms', 'sgd'].map(c => position(cat, c)), [0, 0.5, 1]);
  assert.equal(position(cat, 'nope'), null);
  assert.equal(position(axisFor('c', ['x']), 'x'), 0.5);
});

test('ticks: ends and three between for numbers, every category', () => {
  const t = axisTicks(axisFor('a', [0, 1]), v => v.toFixed(2));
  assert.deepEqual(t, [['0.00', 0], ['0.25', 0.25], ['0.50', 0.5], ['0.75', 0.75], ['1.00', 1]]);
  const lt = axisTicks(axisFor('lr', [1e-4, 1]), v => v.toExponential(0));
  assert.deepEqual(lt.map(x => x[0]), ['1e-4', '1e-3', '1e-2', '1e-1', '1e+0']);
  assert.deepEqual(axisTicks(axisFor('c', ['b', 'a'])), [['a', 0], ['b', 1]]);
  assert.deepEqual(axisTicks(axisFor('one', [3])), [['3', 0.5]]);
});

const frame = { width: 420, height: 220, left: 10, right: 10, top: 10, bottom: 10 };

test('polylines: axes spread evenly, y grows down, a point per value on its axis', () => {
  assert.deepEqual(axisX(3, frame), [10, 210, 410]);
  assert.deepEqual(axisX(1, frame), [210]);
  const axes = [axisFor('lr', [0, 1]), axisFor('opt', ['a', 'b']), axisFor('best', [0, 10])];
  assert.deepEqual(polyline(axes, [1, 'a', 5], frame), [[10, 10], [210, 210], [410, 110]]);
  assert.deepEqual(polyline(axes, [undefined, 'b', 10], frame), [[210, 10], [410, 10]]);
});

test('nearest: the polyline under the mouse within reach, else -1', () => {
  assert.equal(segmentDistance(5, 5, [0, 0], [10, 0]), 5);
  assert.equal(segmentDistance(-3, 4, [0, 0], [10, 0]), 5, 'beyond an end: to the end');
  const lines = [[[0, 0], [100, 0]], [[0, 50], [100, 100]], [[50, 200]]];
  assert.equal(nearest(lines, 50, 3), 0);
  assert.equal(nearest(lines, 50, 74), 1);
  assert.equal(nearest(lines, 52, 198), 2, 'a lone point');
  assert.equal(nearest(lines, 50, 30), -1);
  assert.equal(nearest([], 0, 0), -1);
});

test('damageOf: why a run cannot be read, or null for a sound one', () => {
  assert.equal(damageOf({ status: 'damaged', damaged: 'its config is not JSON (x)' }),
               'its config is not JSON (x)');
  assert.equal(damageOf({ status: 'damaged' }), 'its row in the run store cannot be read');
  assert.equal(damageOf({ status: 'finished', damaged: 'its tags is not a JSON list' }),
               'its tags is not a JSON list');
  assert.equal(damageOf({ status: 'finished' }), null);
  assert.equal(damageOf({ status: 'failed', damaged: 7 }), null);
});

test('knownConfigs: a damaged run\'s empty config is unknown, not a config that differs', () => {
  const runs = [{ status: 'finished', config: { lr: 0.1, epochs: 3 } },
                { status: 'damaged', damaged: 'its config is not JSON', config: {} },
                { status: 'finished', config: { lr: 0.2, epochs: 3 } }];
  const d = configDiff(knownConfigs(runs));
  assert.deepEqual(d.differ, ['lr']);
  assert.deepEqual(d.same, [['epochs', 3]]);
  assert.deepEqual(knownConfigs([runs[1]]), []);
});
