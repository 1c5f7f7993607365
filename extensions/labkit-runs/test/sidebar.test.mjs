// Unit tests of the Runs sidebar's pure rules (lib/sidebar_model.js), run by Node's test runner
// from tests/test_frontend_units.py.
import assert from 'node:assert/strict';
import { test } from 'node:test';

const lib = process.env.LABKIT_TS_LIB;
const { covers, formatValue, listQuery, rangeIds, relativeTime, ROW_HEIGHT, sharedScale,
        shortId, sparkSegments, visibleRange, windowFor } = await import(`${lib}/sidebar_model.mjs`);

test('visibleRange: the rows in view and an overscan, within the list', () => {
  assert.deepEqual(visibleRange(0, 420, 10000, 42, 5), { first: 0, end: 16 });
  const mid = visibleRange(42 * 5000, 420, 10000, 42, 5);
  assert.deepEqual(mid, { first: 4995, end: 5016 });
  // scrolled to the end: the last row is in
  assert.equal(visibleRange(42 * 10000 - 420, 420, 10000, 42, 5).end, 10000);
  assert.deepEqual(visibleRange(0, 420, 0), { first: 0, end: 0 });
  assert.deepEqual(visibleRange(NaN, NaN, 3, 42, 0), { first: 0, end: 1 });
  // scrolled past a list that got shorter: still a valid range
  const r = visibleRange(1e6, 400, 10, 42, 2);
  assert.ok(r.first <= r.end && r.end <= 10 && r.first >= 0);
  assert.equal(ROW_HEIGHT, 42);
});

test('windowFor and covers: a page-aligned window with margin, at most 1000 runs', () => {
  const w = windowFor({ first: 120, end: 140 }, 50);
  assert.deepEqual(w, { offset: 50, limit: 150 });
  assert.ok(covers({ offset: w.offset, count: w.limit, total: 10000 }, { first: 120, end: 140 }));
  assert.ok(!covers({ offset: 0, count: 100, total: 10000 }, { first: 120, end: 140 }));
  assert.ok(covers({ offset: 9950, count: 50, total: 10000 }, { first: 9990, end: 10000 }));
  assert.ok(!covers(null, { first: 0, end: 1 }));
  assert.deepEqual(windowFor({ first: 0, end: 20 }, 50), { offset: 0, limit: 100 });
  assert.equal(windowFor({ first: 0, end: 5000 }, 50).limit, 1000);
});

test('relativeTime, shortId, formatValue', () => {
  const now = 1_800_000_000;
  assert.equal(relativeTime(now - 10, now), 'just now');
  assert.equal(relativeTime(now - 300, now), '5 min ago');
  assert.equal(relativeTime(now - 3 * 3600, now), '3 h ago');
  assert.equal(relativeTime(now - 4 * 86400, now), '4 d ago');
  assert.equal(relativeTime(now - 30 * 86400, now), new Date((now - 30 * 86400) * 1000)
    .toISOString().slice(0, 10));
  assert.equal(relativeTime(null, now), '–');
  assert.equal(relativeTime('<b>', now), '–');
  assert.equal(shortId('20261204-101112-a1b2c3d4e5f60718'), 'a1b2');
  assert.equal(shortId('20261204-101112-abcdef'), 'abcd');
  assert.equal(formatValue(0.123456), '0.1235');
  assert.equal(formatValue(42), '42');
  assert.equal(formatValue(1.5e-7), '1.50e-7');
  assert.equal(formatValue(null), '–');
  assert.equal(formatValue(12345678.9), '1.23e+7');
});

test('sharedScale spans every finite value of every row; sparkSegments break at gaps', () => {
  assert.deepEqual(sharedScale([[1, 2, null], [0.5, NaN, 3], []]), { lo: 0.5, hi: 3 });
  assert.equal(sharedScale([[null], []]), null);
  const scale = { lo: 0, hi: 10 };
  const segs = sparkSegments([0, 10, null, 5], scale, 52, 22);
  assert.equal(segs.length, 2);
  assert.equal(segs[0], '1.0,21.0 17.7,1.0');
  assert.equal(segs[1], '51.0,11.0');  // one point alone: a dot
  // same values on a wider shared scale sit lower: rows are comparable
  const wide = sparkSegments([10], { lo: 0, hi: 20 }, 52, 22);
  assert.equal(wide[0], '26.0,11.0');
  assert.deepEqual(sparkSegments([], scale, 52, 22), []);
  assert.deepEqual(sparkSegments([3, 3], { lo: 3, hi: 3 }, 10, 10), ['1.0,5.0 9.0,5.0']);
});

test('rangeIds: both ends, either direction, unloaded rows skipped', () => {
  const ids = ['a', 'b', undefined, 'd', 'e'];
  assert.deepEqual(rangeIds(ids, 1, 4), ['b', 'd', 'e']);
  assert.deepEqual(rangeIds(ids, 4, 1), ['b', 'd', 'e']);
  assert.deepEqual(rangeIds(ids, 0, 0), ['a']);
});

test('listQuery encodes every value; all and empty are left out', () => {
  assert.equal(listQuery({ status: 'all', name: '', sort: 'newest', offset: 0, limit: 50,
                           metric: 'loss' }),
               'offset=0&limit=50&sort=newest&metric=loss&points=40');
  assert.equal(listQuery({ status: 'live', name: 'a&b=<c>', sort: 'name', offset: 100,
                           limit: 1, metric: '', ids: true }),
               'offset=100&limit=1&sort=name&status=live&q=a%26b%3D%3Cc%3E&ids=1');
});
