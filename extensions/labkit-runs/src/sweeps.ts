/**
 * The Runs sidebar's Sweeps section (paired with ``labkit/server/sweeps.py``): a collapsible
 * list above the runs, one header per sweep — name, short id, status, "12/20 done", the best
 * value — that opens to its trials (each a run: a click opens its page). "Compare" opens the
 * compare page with the sweep's trial runs (the best ``MAX_COMPARE`` by its metric); "Pause",
 * "Resume" and "Stop" ask the sweep's driver, as ``Sweep.pause()``, ``resume()`` and ``stop()``
 * do (Pause and Stop while it runs, Resume and Stop while it is paused). Its own capped request per
 * refresh, so the runs' virtual list is untouched; each open sweep's trials are then read on
 * their own, so one that cannot be read says so under its header and the others show as usual.
 * A damaged sweep (its row cannot be read: ``GET sweeps`` lists it so, ``sweeps/ID`` is a 503)
 * is one row naming the damage. Every value is rendered as text.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';

import { api, askSweep, isRunId, SweepRequest } from './api';
import { pressKey } from './clicks';
import { CommandIDs } from './commands';
import { el } from './dom';
import { formatValue, shortId } from './sidebar_model';
import { bestFirst, compareIds, doneText, ITrial, paramsText, sweepDamage,
         sweepStatusClass, trialsToLoad } from './sweeps_model';

/** The most sweeps listed (newest first) and the most trials shown under an open one. */
export const MAX_SWEEPS = 20;
export const MAX_TRIAL_ROWS = 200;
const MAX_COMPARE = 50;

export interface ISweepSummary {
  id: string;
  name: string | null;
  status: string;
  counts: Record<string, number>;
  trials: number;
  done: number;
  best: number | null;
  metric: string | null;
  mode: string | null;
  created: number;
  /** why its row cannot be read (status ``damaged``) */
  damaged?: string;
}

interface ISweepDetail {
  id: string;
  total: number;
  settings: { metric?: string; mode?: string };
  trials: ITrial[];
}


export class SweepsSection {
  constructor(private app: JupyterFrontEnd) {
    this.node = el('div', 'labkit-sweeps');
    this.node.hidden = true;  // until a sweep exists
    this.toggle = el('button', 'labkit-sweeps-toggle');
    this.toggle.setAttribute('aria-expanded', 'true');
    this.toggle.onclick = () => {
      this.collapsed = !this.collapsed;
      this.render();
    };
    this.error = el('div', 'labkit-sweeps-error');
    this.list = el('div', 'labkit-sweeps-list');
    this.list.setAttribute('role', 'list');
    this.node.append(this.toggle, this.error, this.list);
  }

  readonly node: HTMLDivElement;
  sweeps: ISweepSummary[] = [];
  total = 0;
  private toggle: HTMLButtonElement;
  private error: HTMLDivElement;
  private list: HTMLDivElement;
  private collapsed = false;
  private open = new Set<string>();
  private details = new Map<string, ISweepDetail>();
  /** why an open sweep's trials could not be read, by sweep id */
  private failed = new Map<string, string>();
  private seq = 0;

  /** One request for the newest sweeps; then one per open sweep for its trials, each shown
   * when it comes (one that fails says so in its own place). */
  async refresh(): Promise<void> {
    const seq = ++this.seq;
    try {
      const body = await api<{ sweeps: ISweepSummary[]; total: number }>(
        `sweeps?limit=${MAX_SWEEPS}`);
      if (seq !== this.seq) {
        return;
      }
      this.sweeps = (body.sweeps || []).filter(s => isRunId(s.id));
      this.total = body.total ?? this.sweeps.length;
      this.error.textContent = '';
    } catch (e) {
      if (seq === this.seq) {
        this.error.textContent = `labkit sweeps: ${(e as Error).message}`;
        this.render();
      }
      return;
    }
    const load = trialsToLoad(this.sweeps, this.open, this.collapsed);
    for (const shown of [this.details, this.failed]) {
      for (const id of [...shown.keys()].filter(id => !load.includes(id))) {
        shown.delete(id);
      }
    }
    this.render();
    await Promise.all(load.map(id => this.loadTrials(id, seq)));
  }

  /** Sweep ``id``'s trials, for its open header; a failure is kept for that sweep alone. */
  private async loadTrials(id: string, seq: number): Promise<void> {
    try {
      const d = await api<ISweepDetail>(
        `sweeps/${encodeURIComponent(id)}?limit=${MAX_TRIAL_ROWS}`);
      if (seq !== this.seq) {
        return;
      }
      this.details.set(id, d);
      this.failed.delete(id);
    } catch (e) {
      if (seq !== this.seq) {
        return;
      }
      this.details.delete(id);
      this.failed.set(id, (e as Error).message);
    }
    this.render();
  }

  render(): void {
    this.node.hidden = !this.total && !this.error.textContent;
    this.toggle.textContent = `${this.collapsed ? '▸' : '▾'} Sweeps (${this.total})`;
    this.toggle.setAttribute('aria-expanded', String(!this.collapsed));
    this.list.hidden = this.collapsed;
    if (this.collapsed) {
      return;
    }
    const items: HTMLElement[] = this.sweeps.map(s => this.item(s));
    if (this.total > this.sweeps.length) {
      items.push(el('div', 'labkit-sweeps-more',
                    `${this.total - this.sweeps.length} older sweeps: labkit sweep ls`));
    }
    this.list.replaceChildren(...items);
  }

  private item(s: ISweepSummary): HTMLElement {
    const box = el('div', 'labkit-sweep');
    box.setAttribute('role', 'listitem');
    box.dataset.sweepId = s.id;
    const damage = sweepDamage(s);
    if (damage !== null) {
      return this.damagedItem(box, s, damage);
    }
    const isOpen = this.open.has(s.id);
    const head = el('div', 'labkit-sweep-header');
    head.setAttribute('role', 'button');
    head.setAttribute('aria-expanded', String(isOpen));
    head.tabIndex = 0;
    pressKey(head, `sweep ${s.id}`);
    head.title = `${s.name || 'sweep'} · ${s.id}\n${s.status} · ${doneText(s.done, s.trials)}` +
      (s.metric ? `\nbest ${s.metric} (${s.mode}): ${formatValue(s.best)}` : '');
    const flip = () => {
      if (isOpen) {
        this.open.delete(s.id);
      } else {
        this.open.add(s.id);
      }
      this.render();
      void this.refresh();
    };
    head.onclick = flip;
    head.onkeydown = e => {
      if (e.key === 'Enter' || e.key === ' ') {
        e.preventDefault();
        flip();
      }
    };
    const line1 = el('div', 'labkit-run-line');
    const actions = el('div', 'labkit-sweep-actions');
    line1.append(el('span', 'labkit-sweep-arrow', isOpen ? '▾' : '▸'),
                 el('span', 'labkit-run-name', String(s.name || 'sweep')),
                 el('span', 'labkit-run-id', shortId(s.id)), actions);
    const line2 = el('div', 'labkit-run-line labkit-run-meta');
    line2.append(el('span', `labkit-run-status ${sweepStatusClass(s.status)}`, String(s.status)),
                 el('span', 'labkit-sweep-done', doneText(s.done, s.trials)),
                 el('span', 'labkit-sweep-best',
                    s.best === null || s.best === undefined ? '' : `best ${formatValue(s.best)}`));
    const text = el('div', 'labkit-run-text');
    text.append(line1, line2);
    const compare = el('button', 'jp-mod-styled labkit-sweep-compare', 'Compare');
    compare.title = `Open the trials side by side (the best ${MAX_COMPARE} by ` +
      `${s.metric || 'the metric'})`;
    pressKey(compare, `sweep ${s.id} compare`);
    compare.onclick = e => {
      e.stopPropagation();
      void this.compare(s);
    };
    actions.append(compare);
    const button = (what: SweepRequest, label: string, title: string): void => {
      const b = el('button', `jp-mod-styled labkit-sweep-${what}`, label);
      b.title = title;
      pressKey(b, `sweep ${s.id} ${what}`);
      b.onclick = e => {
        e.stopPropagation();
        b.disabled = true;
        void this.request(s, what);
      };
      actions.append(b);
    };
    if (s.status === 'running') {
      button('pause', 'Pause', 'Ask the sweep to checkpoint its trials and wait (Resume continues them)');
    } else if (s.status === 'paused') {
      button('resume', 'Resume', 'Ask the paused sweep to continue its trials from their checkpoints');
    }
    if (s.status === 'running' || s.status === 'paused') {
      button('stop', 'Stop', 'Ask the sweep to checkpoint its trials and stop (lk.sweep.resume continues it)');
    }
    head.append(text);
    box.append(head);
    const detail = this.details.get(s.id);
    const failed = this.failed.get(s.id);
    if (isOpen && failed !== undefined) {
      const why = el('div', 'labkit-sweep-empty labkit-sweep-failed',
                     `its trials cannot be read: ${failed}`);
      why.title = why.textContent || '';
      box.append(why);
    } else if (isOpen) {
      box.append(detail ? this.trials(detail) : el('div', 'labkit-sweep-empty', '…'));
    }
    return box;
  }

  /** A sweep whose row cannot be read: one row, its name, short id and why; nothing to open,
   * compare or ask (``labkit sweep ls`` lists it too). */
  private damagedItem(box: HTMLElement, s: ISweepSummary, damage: string): HTMLElement {
    box.classList.add('labkit-sweep-damaged');
    const head = el('div', 'labkit-sweep-header');
    head.title = `${s.name || 'sweep'} · ${s.id}\ndamaged: ${damage}\n` +
      'its row in the run store cannot be read (labkit sweep ls lists it)';
    const line1 = el('div', 'labkit-run-line');
    line1.append(el('span', 'labkit-sweep-arrow', '!'),
                 el('span', 'labkit-run-name', String(s.name || 'sweep')),
                 el('span', 'labkit-run-id', shortId(s.id)));
    const line2 = el('div', 'labkit-run-line labkit-run-meta');
    line2.append(el('span', `labkit-run-status ${sweepStatusClass('damaged')}`, 'damaged'),
                 el('span', 'labkit-sweep-damage', damage));
    const text = el('div', 'labkit-run-text');
    text.append(line1, line2);
    head.append(text);
    box.append(head);
    return box;
  }

  private trials(d: ISweepDetail): HTMLElement {
    const wrap = el('div', 'labkit-sweep-trials');
    const rows = bestFirst(d.trials || [], d.settings?.mode);
    if (!rows.length) {
      wrap.append(el('div', 'labkit-sweep-empty', 'no trials'));
    }
    for (const t of rows) {
      const row = el('div', 'labkit-trial-row');
      row.setAttribute('role', 'listitem');
      const rid = isRunId(t.run_id) ? t.run_id : null;
      if (rid) {
        row.dataset.runId = rid;
        pressKey(row, `trial ${rid}`);
        row.onclick = () => void this.app.commands.execute(CommandIDs.open, { id: rid });
      }
      row.append(el('span', 'labkit-trial-number', `#${t.trial}`),
                 el('span', `labkit-run-status ${sweepStatusClass(t.status)}`, String(t.status)),
                 el('span', 'labkit-run-value', formatValue(t.value)),
                 el('span', 'labkit-trial-params', paramsText(t.params)));
      row.title = `trial ${t.trial} · ${t.status}` + (rid ? ` · run ${rid}` : ' · not started') +
        `\n${paramsText(t.params, 400)}`;
      wrap.append(row);
    }
    if (d.total > (d.trials || []).length) {
      wrap.append(el('div', 'labkit-sweeps-more',
                     `${d.total - d.trials.length} more trials: labkit sweep show`));
    }
    return wrap;
  }

  /** The compare page with the sweep's trial runs, the best ``MAX_COMPARE`` by its metric. */
  private async compare(s: ISweepSummary): Promise<void> {
    try {
      const d = await api<ISweepDetail>(
        `sweeps/${encodeURIComponent(s.id)}?best=${MAX_COMPARE}`);
      const ids = compareIds(d.trials || [], d.settings?.mode, MAX_COMPARE, isRunId);
      if (!ids.length) {
        this.error.textContent = `Sweep ${shortId(s.id)} has no trial with a run yet.`;
        return;
      }
      this.error.textContent = '';
      await this.app.commands.execute(CommandIDs.compare, { ids });
    } catch (e) {
      this.error.textContent = `labkit sweeps: ${(e as Error).message}`;
    }
  }

  /** Ask the sweep's driver to stop, pause or resume, as ``Sweep.stop()`` etc. do. */
  private async request(s: ISweepSummary, what: SweepRequest): Promise<void> {
    try {
      await askSweep(s.id, what);
      this.error.textContent = '';
    } catch (e) {
      this.error.textContent = `labkit sweeps: ${(e as Error).message}`;
    }
    void this.refresh();
  }
}
