// Unit tests of the fork form's rules (lib/forkform_model.js) and the plots' zoom maths
// (lib/plot.js), run by Node's test runner from tests/test_frontend_units.py.
import assert from 'node:assert/strict';
import { test } from 'node:test';

const lib = process.env.LABKIT_TS_LIB;
const { flatten, forkChanges, kindOf, newestValid, parseValue, sameValue, setAt, valueText } =
  await import(`${lib}/forkform_model.mjs`);
const { nearestIn, yExtent, zoomRange } = await import(`${lib}/plot.mjs`);

const CONFIG = { lr: 0.01, epochs: 3, device: 'cpu', dropout: true,
                 opt: { name: 'adam', betas: [0.9, 0.999], sched: { warmup: 5 } },
                 layers: [64, 10], empty: {}, 'a.b': { c: 1 }, odd: { 'x.y': 2 }, none: null };

test('flatten opens nested objects into dotted keys and keeps the rest whole', () => {
  const f = flatten(CONFIG);
  assert.deepEqual(f.map(x => x.key), ['lr', 'epochs', 'device', 'dropout', 'opt.name',
    'opt.betas', 'opt.sched.warmup', 'layers', 'empty', 'a.b', 'odd', 'none']);
  const by = Object.fromEntries(f.map(x => [x.key, x]));
  assert.equal(by.lr.kind, 'number');
  assert.equal(by.dropout.kind, 'boolean');
  assert.equal(by['opt.name'].kind, 'string');
  assert.deepEqual(by['opt.sched.warmup'].path, ['opt', 'sched', 'warmup']);
  assert.equal(by['opt.betas'].kind, 'json');
  assert.equal(by.empty.kind, 'json');
  assert.equal(by.none.kind, 'json');
  // a key holding a dot would be ambiguous as a dotted path: kept whole, as JSON
  assert.deepEqual(by['a.b'].path, ['a.b']);
  assert.equal(by['a.b'].kind, 'json');
  assert.equal(by.odd.kind, 'json');
  assert.deepEqual(flatten(null), []);
});

test('parseValue reads each kind strictly and says what it expected', () => {
  assert.deepEqual(parseValue('number', ' 1e-3 '), { ok: true, value: 0.001 });
  assert.deepEqual(parseValue('number', '-2'), { ok: true, value: -2 });
  for (const bad of ['', 'abc', '0x10', '1_000', 'Infinity', 'NaN', '1e400', '01', '1.']) {
    const r = parseValue('number', bad);
    assert.equal(r.ok, false, bad);
    assert.match(r.error, /a number/);
  }
  assert.deepEqual(parseValue('boolean', 'false'), { ok: true, value: false });
  assert.equal(parseValue('boolean', 'yes').ok, false);
  assert.deepEqual(parseValue('string', ' keeps spaces '), { ok: true, value: ' keeps spaces ' });
  assert.deepEqual(parseValue('json', '[1, {"a": null}]'), { ok: true, value: [1, { a: null }] });
  const r = parseValue('json', '[1,');
  assert.equal(r.ok, false);
  assert.match(r.error, /^JSON/);
  assert.equal(valueText('json', [1, 2]), '[1,2]');
  assert.equal(valueText('string', '<b>'), '<b>');
  assert.equal(kindOf(null), 'json');
});

test('forkChanges sends only the top-level keys that changed, each whole', () => {
  assert.deepEqual(forkChanges(CONFIG, {}), {});
  assert.deepEqual(forkChanges(CONFIG, { lr: 0.01, epochs: 3 }), {}, 'same values: no change');
  assert.deepEqual(forkChanges(CONFIG, { lr: 0.02 }), { lr: 0.02 });
  const c = forkChanges(CONFIG, { 'opt.sched.warmup': 10, device: 'cpu' });
  assert.deepEqual(c, { opt: { name: 'adam', betas: [0.9, 0.999], sched: { warmup: 10 } } });
  assert.equal(CONFIG.opt.sched.warmup, 5, 'the config itself is not changed');
  assert.deepEqual(forkChanges(CONFIG, { 'a.b': { c: 2 }, layers: [64, 10] }), { 'a.b': { c: 2 } });
  assert.deepEqual(forkChanges(CONFIG, { nope: 1 }), {}, 'a key not in the config is ignored');
});

test('sameValue compares JSON values by content, setAt copies', () => {
  assert.ok(sameValue({ a: 1, b: [1, { c: 2 }] }, { b: [1, { c: 2 }], a: 1 }));
  assert.ok(!sameValue({ a: 1 }, { a: 1, b: undefined }));
  assert.ok(!sameValue([1], { 0: 1 }));
  assert.ok(!sameValue(1, '1'));
  const o = { a: { b: 1 } };
  const n = setAt(o, ['a', 'b'], 2);
  assert.deepEqual(n, { a: { b: 2 } });
  assert.deepEqual(o, { a: { b: 1 } });
});

test('newestValid picks the newest valid checkpoint, or none', () => {
  const cks = [{ id: 1, iteration: 6, valid: true }, { id: 3, iteration: 18, valid: false },
               { id: 2, iteration: 12, valid: true }];
  assert.equal(newestValid(cks).id, 2);
  assert.equal(newestValid([{ id: 1, iteration: 6, valid: false }]), null);
  assert.equal(newestValid([]), null);
});

test('zoomRange turns a drag into an ordered x-range inside the frame', () => {
  // frame from pixel 50, 200 wide, showing 0..100: 2 pixels per unit
  assert.deepEqual(zoomRange(70, 150, 50, 200, 0, 100), [10, 50]);
  assert.deepEqual(zoomRange(150, 70, 50, 200, 0, 100), [10, 50], 'dragged leftwards');
  assert.deepEqual(zoomRange(0, 90, 50, 200, 0, 100), [0, 20], 'clamped to the frame');
  assert.equal(zoomRange(70, 72, 50, 200, 0, 100), null, 'a click is not a zoom');
  assert.equal(zoomRange(10, 20, 50, 200, 0, 100), null, 'all of it left of the frame');
  assert.equal(zoomRange(60, 90, 50, 0, 0, 100), null);
  // zooming twice narrows from the shown range
  const [a, b] = zoomRange(70, 150, 50, 200, 0, 100);
  assert.deepEqual(zoomRange(50, 150, 50, 200, a, b), [10, 30]);
});

test('yExtent fits y to the points inside the x-range; nearestIn stays inside it', () => {
  const x = [0, 1, 2, 3, 4, 5];
  const y = [100, 5, null, 7, 3, -50];
  assert.deepEqual(yExtent(x, y, 1, 4), [3, 7]);
  assert.deepEqual(yExtent(x, y, 0.5, 1.5), [5, 5]);
  assert.equal(yExtent(x, y, 2, 2), null, 'only a gap');
  assert.equal(yExtent(x, y, 6, 9), null);
  assert.deepEqual(yExtent(x, y, 0, 5, Math.abs), [3, 100]);
  assert.equal(nearestIn(x, 4.4, 1, 4), 4);
  assert.equal(nearestIn(x, 4.9, 1, 4), 4, 'not 5: outside the range shown');
  assert.ok(Number.isNaN(nearestIn(x, 9, 6, 9)));
});
