/**
 * The Fork form: a new run from a checkpoint of a run, with config changes. Every key of the
 * run's config is a typed input (numbers, true/false, text; lists and other values as JSON;
 * nested objects as ``a.b`` keys), a changed value is highlighted and only the changed
 * top-level keys are sent; the checkpoint defaults to the newest valid one (an invalid one is
 * listed, disabled, with why); a name for the new run. The rules are in ``forkform_model.ts``.
 * Every value is rendered as text, never as HTML.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { api, IRun, runPath } from './api';
import {
  FieldKind,
  flatten,
  forkChanges,
  IField,
  newestValid,
  parseValue,
  valueText
} from './forkform_model';
import { formatNumber } from './plot';
import { IVerifiedCheckpoint } from './runpage_sections';
import { el } from './dom';

/** What the form asks the server for. */
export interface IForkRequest {
  checkpoint: number;
  changes: Record<string, unknown>;
  /** the new run's name, when it differs from its parent's */
  name: string | null;
}

/** What the reader typed, kept across a reopened form. */
interface IState {
  texts: Map<string, string>;
  checkpoint: number | null;
  name: string;
}

function checkpointLabel(c: IVerifiedCheckpoint): string {
  const m = (c.metrics || {}) as Record<string, unknown>;
  const metrics = Object.keys(m).sort().filter(k => typeof m[k] === 'number')
    .map(k => `${k} ${formatNumber(m[k] as number)}`);
  const what = [`checkpoint ${c.id}`, `iteration ${c.iteration}`, `epoch ${c.epoch}`,
                ...metrics.slice(0, 3)].join(' · ');
  return c.valid ? what : `${what} (invalid: ${c.reason || 'recorded as invalid'})`;
}

class ForkBody extends Widget {
  constructor(private run: IRun, private checkpoints: IVerifiedCheckpoint[],
              private state: IState) {
    super();
    this.addClass('labkit-fork-form');
    this.fields = flatten(run.config || {});
    const node = this.node;
    node.appendChild(el('p', 'labkit-fork-help',
                        'A new run that starts from a checkpoint of this one with the values ' +
                        'below. Changed values are highlighted; only they are sent.'));
    const top = el('div', 'labkit-fork-top');
    const ckLabel = el('label', undefined, 'checkpoint ');
    this.select = el('select', 'labkit-fork-checkpoint');
    for (const c of [...this.checkpoints].reverse()) {
      const o = el('option', undefined, checkpointLabel(c));
      o.value = String(c.id);
      o.disabled = !c.valid;
      this.select.appendChild(o);
    }
    if (state.checkpoint !== null) {
      this.select.value = String(state.checkpoint);
    }
    this.select.onchange = () => {
      this.state.checkpoint = Number(this.select.value);
      this.showState();
    };
    ckLabel.appendChild(this.select);
    const nameLabel = el('label', undefined, 'name ');
    this.name = el('input', 'labkit-fork-name');
    this.name.value = state.name;
    this.name.placeholder = run.name || 'unnamed';
    this.name.oninput = () => {
      this.state.name = this.name.value;
      this.showState();
    };
    nameLabel.appendChild(this.name);
    top.append(ckLabel, nameLabel);
    node.appendChild(top);
    // what will be sent, above the fields (a long config scrolls)
    this.summary = el('div', 'labkit-fork-summary');
    this.summary.setAttribute('role', 'status');
    node.appendChild(this.summary);
    const table = el('table', 'labkit-fork-fields');
    for (const f of this.fields) {
      table.appendChild(this.row(f));
    }
    if (!this.fields.length) {
      node.appendChild(el('div', 'labkit-runpage-none', 'this run has no config to change'));
    }
    node.appendChild(table);
    this.showState();
  }

  private fields: IField[];
  private select: HTMLSelectElement;
  private name: HTMLInputElement;
  private summary: HTMLDivElement;
  private rows = new Map<string, { tr: HTMLElement; why: HTMLElement; kind: FieldKind;
                                   input: HTMLInputElement | HTMLSelectElement }>();

  private row(f: IField): HTMLElement {
    const tr = el('tr', 'labkit-fork-field');
    tr.dataset.key = f.key;
    const original = valueText(f.kind, f.value);
    const text = this.state.texts.get(f.key) ?? original;
    let input: HTMLInputElement | HTMLSelectElement;
    if (f.kind === 'boolean') {
      input = el('select');
      for (const v of ['true', 'false']) {
        const o = el('option', undefined, v);
        o.value = v;
        input.appendChild(o);
      }
    } else {
      input = el('input');
      input.type = 'text';
      input.spellcheck = false;
      if (f.kind === 'number') {
        input.inputMode = 'decimal';
      }
    }
    input.value = text;
    input.classList.add(`labkit-fork-${f.kind}`);
    input.setAttribute('aria-label', f.key);
    const changed = () => {
      this.state.texts.set(f.key, input.value);
      this.showState();
    };
    input.oninput = changed;
    input.onchange = changed;
    const reset = el('button', 'jp-mod-styled labkit-fork-reset', 'reset');
    reset.title = `back to ${original.slice(0, 80)}`;
    reset.onclick = e => {
      e.preventDefault();
      input.value = original;
      changed();
    };
    const why = el('div', 'labkit-fork-why');
    const cell = el('td');
    cell.append(input, why);
    tr.append(el('td', 'labkit-runpage-key', f.key), el('td', 'labkit-fork-kind', f.kind),
              cell, el('td', undefined));
    (tr.lastChild as HTMLElement).appendChild(reset);
    this.rows.set(f.key, { tr, why, kind: f.kind, input });
    return tr;
  }

  /** The request, or what is wrong with the form. */
  value(): { ok: true; request: IForkRequest } | { ok: false; error: string } {
    const edited: Record<string, unknown> = {};
    const bad: string[] = [];
    for (const [key, r] of this.rows) {
      const p = parseValue(r.kind, r.input.value);
      if (p.ok) {
        edited[key] = p.value;
      } else {
        bad.push(`${key}: ${p.error}`);
      }
    }
    if (bad.length) {
      return { ok: false, error: `fix ${bad.length === 1 ? 'this value' : 'these values'}: ` +
               bad.join('; ') };
    }
    const cid = Number(this.select.value);
    const ck = this.checkpoints.find(c => c.id === cid);
    if (!ck || !ck.valid) {
      return { ok: false, error: 'no valid checkpoint to start from' };
    }
    const name = this.name.value.trim();
    return { ok: true, request: {
      checkpoint: cid, changes: forkChanges(this.run.config || {}, edited),
      name: name && name !== (this.run.name || '') ? name : null } };
  }

  /** Highlight what changed and what cannot be read; say what will be sent. */
  private showState(): void {
    for (const [key, r] of this.rows) {
      const f = this.fields.find(x => x.key === key) as IField;
      const p = parseValue(r.kind, r.input.value);
      r.tr.classList.toggle('labkit-fork-invalid', !p.ok);
      r.why.textContent = p.ok ? '' : `expected ${p.error}`;
      r.tr.classList.toggle('labkit-fork-changed',
                            r.input.value !== valueText(f.kind, f.value));
    }
    const v = this.value();
    const keys = v.ok ? Object.keys(v.request.changes) : [];
    this.summary.classList.toggle('labkit-fork-error', !v.ok);
    this.summary.textContent = !v.ok ? v.error : keys.length
      ? `changes sent: ${keys.join(', ')}` : 'no config changes: the same config, continued';
  }
}

/** Ask for a fork of run ``id`` (from ``checkpoint`` if given and valid); null when the reader
 * cancels. A form with a value that cannot be read opens again, as it was, with why. */
export async function forkForm(id: string, checkpoint: number | null):
  Promise<IForkRequest | null> {
  const [run, listed] = await Promise.all([
    api<IRun>(runPath(id)),
    api<{ checkpoints: IVerifiedCheckpoint[] }>(`${runPath(id, 'checkpoints')}?verify=1`)
  ]);
  const cks = listed.checkpoints;
  const asked = cks.find(c => c.id === checkpoint && c.valid);
  const start = asked || newestValid(cks);
  if (!start) {
    throw new Error(`run ${id} has no valid checkpoint to fork from` +
                    (cks.length ? ' (every one failed its check: see its run page)' : ''));
  }
  const state: IState = { texts: new Map(), checkpoint: start.id, name: run.name || '' };
  for (;;) {
    const body = new ForkBody(run, cks, state);
    const answer = await showDialog({
      title: `Fork run ${run.name || 'unnamed'} (${id})`,
      body,
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Fork' })],
      focusNodeSelector: 'input'
    });
    if (!answer.button.accept) {
      return null;
    }
    const v = body.value();
    if (v.ok) {
      return v.request;
    }
    await showDialog({ title: 'labkit: the fork was not made', body: v.error,
                       buttons: [Dialog.okButton({ label: 'Back to the form' })] });
  }
}
