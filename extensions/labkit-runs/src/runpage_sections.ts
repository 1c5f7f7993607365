/**
 * The run page's sections below its cockpit: the error of a failed run, the config as a table,
 * the checkpoints (validity re-checked by the server on view) and the lineage. Pure DOM
 * builders; every value is rendered as text (``textContent``), never as HTML.
 */
import { ICheckpoint, IRun, isRunId } from './api';
import { pressKey } from './clicks';
import { formatNumber } from './plot';
import { el } from './dom';
import { statusClass } from './sidebar';

/** A run record with the fields the run page shows beyond ``IRun``. */
export interface IRunRecord extends IRun {
  error?: string | null;
  ended?: number | null;
  host?: string | null;
  source?: string | null;
  factory?: string | null;
  tags?: string[];
  note?: string;
  /** the last lines of a failed run's traceback */
  traceback?: string | null;
}

/** A checkpoint as ``runs/ID/checkpoints?verify=1`` gives it. */
export interface IVerifiedCheckpoint extends ICheckpoint {
  metrics?: Record<string, unknown>;
  created?: number;
  /** why it is invalid (null when valid; absent when the files were not checked) */
  reason?: string | null;
}

/** "name · 9bd3": the run's name and the first 4 hex digits of its id's random part. */
export function shortTitle(run: { id: string; name?: string | null }): string {
  const suffix = run.id.split('-')[2] || run.id;
  return `${run.name || 'unnamed'} · ${suffix.slice(0, 4)}`;
}

/** A JSON value in one line, as the config holds it (``undefined`` as itself). */
export function jsonText(v: unknown): string {
  try {
    const s = JSON.stringify(v);
    return s === undefined ? String(v) : s;
  } catch {
    return String(v);
  }
}

export function bytesText(n: unknown): string {
  if (typeof n !== 'number' || !isFinite(n) || n < 0) {
    return '?';
  }
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  let v = n;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return i ? `${v.toPrecision(3)} ${units[i]}` : `${v} B`;
}

function numberText(v: unknown): string {
  return typeof v === 'number' ? formatNumber(v) : v === null || v === undefined ? '' : jsonText(v);
}

function section(title: string, cls: string): HTMLElement {
  const s = el('section', `labkit-runpage-section ${cls}`);
  s.appendChild(el('h3', undefined, title));
  return s;
}

/** The error of a failed (or dead) run, prominent; null when it has none. */
export function errorBox(run: IRunRecord): HTMLElement | null {
  // NOTE: only a failed or dead run: a resumed one may still hold an old error elsewhere
  if (run.status !== 'failed' && run.status !== 'dead') {
    return null;
  }
  const box = el('div', 'labkit-runpage-error');
  box.setAttribute('role', 'alert');
  box.append(el('div', 'labkit-runpage-error-title', run.status === 'dead'
    ? 'The process training this run stopped answering' : 'Training failed'));
  box.append(el('pre', 'labkit-runpage-error-text',
                run.error ? String(run.error) : 'no error was recorded'));
  if (typeof run.traceback === 'string' && run.traceback) {
    const lines = run.traceback.split('\n');
    const tb = el('details', 'labkit-runpage-traceback');
    tb.append(el('summary', undefined, `traceback (its last ${lines.length} lines)`),
              el('pre', 'labkit-runpage-traceback-text', run.traceback));
    box.append(tb);
  }
  return box;
}

function when(t: unknown): string {
  return typeof t === 'number' && isFinite(t) ? new Date(t * 1000).toLocaleString() : '';
}

/** "1 h 02 min", "3 min 05 s", "12 s". */
export function durationText(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const pad = (n: number) => String(n).padStart(2, '0');
  if (s >= 3600) {
    return `${Math.floor(s / 3600)} h ${pad(Math.floor((s % 3600) / 60))} min`;
  }
  return s >= 60 ? `${Math.floor(s / 60)} min ${pad(s % 60)} s` : `${s} s`;
}

/** When the run was created and how long it trained, where, and from what code. */
export function summaryLine(run: IRunRecord): HTMLElement {
  const parts: string[] = [];
  if (when(run.created)) {
    parts.push(`created ${when(run.created)}`);
  }
  // the time spent training (over every resume), as the loop reports it
  const elapsed = (run.progress as Record<string, unknown> | null)?.elapsed;
  if (typeof elapsed === 'number' && isFinite(elapsed)) {
    parts.push(`trained ${durationText(elapsed)}`);
  }
  if (when(run.ended)) {
    parts.push(`ended ${when(run.ended)}`);
  }
  if (run.host) {
    parts.push(`on ${run.host}`);
  }
  if (run.factory || run.source) {
    parts.push(`from ${run.factory || run.source}`);
  }
  parts.push(`id ${run.id}`);
  return el('div', 'labkit-runpage-summary', parts.join(' · '));
}

/** The config as a table of keys and JSON values. */
export function configSection(config: Record<string, unknown> | null | undefined): HTMLElement {
  const s = section('config', 'labkit-runpage-config');
  const entries = Object.entries(config && typeof config === 'object' ? config : {});
  if (!entries.length) {
    s.appendChild(el('div', 'labkit-runpage-none', 'no config'));
    return s;
  }
  // NOTE: the class the run panel's config had before it was a table: tests look for it
  const table = el('table', 'labkit-run-config labkit-runpage-table');
  const head = el('tr');
  head.append(el('th', undefined, 'key'), el('th', undefined, 'value'));
  table.appendChild(head);
  for (const [k, v] of entries) {
    const tr = el('tr');
    tr.dataset.key = k;
    tr.append(el('td', 'labkit-runpage-key', k), el('td', 'labkit-runpage-value', jsonText(v)));
    table.appendChild(tr);
  }
  s.appendChild(table);
  return s;
}

/** The checkpoints with their metrics, size and validity; a Fork button on each valid one. */
export function checkpointsSection(
  checkpoints: IVerifiedCheckpoint[],
  fork: (c: IVerifiedCheckpoint) => void,
  note: string
): HTMLElement {
  const s = section('checkpoints', 'labkit-runpage-checkpoints');
  if (note) {
    s.appendChild(el('div', 'labkit-runpage-note', note));
  }
  if (!checkpoints.length) {
    s.appendChild(el('div', 'labkit-runpage-none', 'no checkpoints'));
    return s;
  }
  const keys: string[] = [];
  for (const c of checkpoints) {
    for (const k of Object.keys(c.metrics && typeof c.metrics === 'object' ? c.metrics : {})) {
      if (!keys.includes(k)) {
        keys.push(k);
      }
    }
  }
  keys.sort();
  const table = el('table', 'labkit-checkpoints labkit-runpage-table');
  const head = el('tr');
  for (const h of ['id', 'iteration', 'epoch', ...keys, 'size', 'saved', 'valid', '']) {
    head.appendChild(el('th', undefined, h));
  }
  table.appendChild(head);
  for (const c of checkpoints) {
    const tr = el('tr');
    tr.dataset.checkpoint = String(c.id);
    const valid = c.valid === true;
    tr.classList.toggle('labkit-runpage-invalid', !valid);
    const m = (c.metrics || {}) as Record<string, unknown>;
    tr.append(el('td', undefined, numberText(c.id)), el('td', undefined, numberText(c.iteration)),
              el('td', undefined, numberText(c.epoch)),
              ...keys.map(k => el('td', 'labkit-runpage-num', numberText(m[k]))),
              el('td', 'labkit-runpage-num', bytesText(c.size)),
              el('td', 'labkit-runpage-when', typeof c.created === 'number'
                ? new Date(c.created * 1000).toLocaleString() : ''));
    const v = el('td', 'labkit-runpage-validity', valid ? 'valid' : 'invalid');
    if (!valid) {
      const why = c.reason || 'recorded as invalid';
      v.title = why;
      v.appendChild(el('div', 'labkit-runpage-reason', why));
    }
    const cell = el('td');
    if (valid) {
      const b = el('button', 'jp-mod-styled labkit-runpage-fork', 'Fork...');
      b.title = `a new run from checkpoint ${c.id}, with config changes`;
      pressKey(b, `fork ${c.id}`);
      b.onclick = () => fork(c);
      cell.appendChild(b);
    }
    tr.append(v, cell);
    table.appendChild(tr);
  }
  s.appendChild(table);
  return s;
}

/** One run of a lineage as ``runs/ID/lineage`` gives it. */
export interface ILineageNode {
  id: string;
  name?: string | null;
  status?: string;
  /** the parent's checkpoint this run was forked from */
  checkpoint?: { id: number; iteration: number | null } | null;
  children?: ILineageNode[];
  /** a parent that was deleted (only its id is known) */
  deleted?: boolean;
}

/** ``GET runs/ID/lineage``: the parent first in ``ancestors``; ``children`` nested. */
export interface ILineage {
  run: ILineageNode;
  ancestors: ILineageNode[];
  children: ILineageNode[];
  truncated: boolean;
  descendants: number;
}

/** Where the run came from and what was forked from it: one nested list from the oldest
 * ancestor down to every fork of a fork, each run by name and short id, a link to its page
 * (this run in bold, not a link), with its status and the checkpoint it started from. */
export function lineageSection(
  run: IRunRecord,
  lineage: ILineage | null,
  open: (id: string) => void
): HTMLElement {
  const s = section('lineage', 'labkit-runpage-lineage');
  const box = el('div', 'labkit-lineage');
  s.appendChild(box);
  if (!lineage) {
    box.textContent = (isRunId(run.parent_run) ? `forked from ${run.parent_run}` : 'not a fork') +
      ' (the lineage could not be read; Refresh to try again)';
    return s;
  }
  const item = (node: ILineageNode, self: boolean): HTMLLIElement => {
    const li = el('li', 'labkit-lineage-node');
    li.dataset.runId = node.id;
    if (node.deleted || !isRunId(node.id)) {
      li.append(el('span', 'labkit-lineage-deleted', `${node.id} (deleted)`));
      return li;
    }
    if (self) {
      li.append(el('strong', 'labkit-lineage-self', `${shortTitle(node)} (this run)`));
    } else {
      const a = el('a', 'labkit-run-link', shortTitle(node));
      a.href = '#';
      a.title = node.id;
      a.dataset.runId = node.id;
      pressKey(a, `open ${node.id}`);
      a.onclick = e => {
        e.preventDefault();
        open(node.id);
      };
      li.append(a);
    }
    li.append(' ', el('span', `labkit-run-status ${statusClass(node.status)}`,
                      String(node.status ?? '')));
    const ck = node.checkpoint;
    if (ck) {
      li.append(el('span', 'labkit-lineage-from', ` · from checkpoint ${ck.id}` +
        (typeof ck.iteration === 'number' ? ` (iteration ${ck.iteration})` : '')));
    }
    return li;
  };
  const subtree = (nodes: ILineageNode[] | undefined): HTMLUListElement | null => {
    if (!nodes?.length) {
      return null;
    }
    const ul = el('ul', 'labkit-lineage-tree');
    for (const n of nodes) {
      const li = item(n, false);
      const sub = subtree(n.children);
      if (sub) {
        li.append(sub);
      }
      ul.append(li);
    }
    return ul;
  };
  // the chain from the oldest ancestor down to this run, whose forks nest below it
  const self = item(lineage.run, true);
  const forks = subtree(lineage.children);
  if (forks) {
    self.append(forks);
  }
  let top: HTMLLIElement = self;
  for (const a of lineage.ancestors) {
    const li = item(a, false);
    const ul = el('ul', 'labkit-lineage-tree');
    ul.append(top);
    li.append(ul);
    top = li;
  }
  const root = el('ul', 'labkit-lineage-tree labkit-lineage-root');
  root.append(top);
  const n = lineage.descendants;
  box.append(el('div', 'labkit-lineage-summary',
                (lineage.ancestors.length ? `forked from ${shortTitle(lineage.ancestors[0])}`
                  : 'not a fork') +
                ` · ${n ? `${n} fork${n === 1 ? '' : 's'} below it` : 'no forks'}` +
                (lineage.truncated ? ' · the tree is cut short (too many runs to list)' : '')),
             root);
  return s;
}
