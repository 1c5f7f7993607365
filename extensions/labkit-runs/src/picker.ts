/**
 * The palette's run pickers: a dialog with a text filter over its own list request (``GET
 * runs?limit=200&q=...``, newest first), so that they work whether the Runs sidebar is open or
 * not and reach every run of the store, not only the window the sidebar loaded. Every value is
 * rendered as text.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { api, IRun, isRunId } from './api';
import { listQuery } from './sidebar_model';

/** How many runs one picker request lists (the newest that match the filter). */
export const PICK_LIMIT = 200;

/** The label of a run in a picker: its full id first (what is picked), name, status. */
export function pickLabel(r: IRun): string {
  return `${r.id} · ${r.name || 'unnamed'} · ${r.status}`;
}

class PickerBody extends Widget implements Dialog.IBodyWidget<string[]> {
  constructor(multiple: boolean) {
    super();
    this.addClass('labkit-picker');
    this.filter = document.createElement('input');
    this.filter.type = 'search';
    this.filter.className = 'labkit-picker-filter';
    this.filter.placeholder = 'filter by name or id';
    this.filter.setAttribute('aria-label', 'filter runs by name or id');
    this.filter.oninput = () => {
      window.clearTimeout(this.typing);
      this.typing = window.setTimeout(() => void this.load(), 200);
    };
    this.select = document.createElement('select');
    this.select.className = 'labkit-picker-list';
    this.select.multiple = multiple;
    this.select.size = 12;
    this.select.setAttribute('aria-label', 'runs');
    this.note = document.createElement('div');
    this.note.className = 'labkit-picker-note';
    this.node.append(this.filter, this.select, this.note);
  }

  readonly filter: HTMLInputElement;
  private select: HTMLSelectElement;
  private note: HTMLDivElement;
  private typing: number | undefined;
  private seq = 0;

  /** Ask for the newest runs matching the filter (an older answer never replaces a newer). */
  async load(): Promise<void> {
    const seq = ++this.seq;
    const text = this.filter.value.trim();
    const query = listQuery({ status: 'all', name: text, sort: 'newest', offset: 0,
                              limit: PICK_LIMIT, metric: '' });
    try {
      const body = await api<{ runs: IRun[]; total: number }>(`runs?${query}`);
      if (seq !== this.seq) {
        return;
      }
      const runs = (body.runs || []).filter(r => isRunId(r.id));
      const kept = new Set(this.getValue());
      this.select.replaceChildren(...runs.map(r => {
        const o = new Option(pickLabel(r), r.id);
        o.selected = kept.has(r.id);
        return o;
      }));
      if (!this.select.multiple && runs.length && this.select.selectedIndex < 0) {
        this.select.selectedIndex = 0;
      }
      const total = body.total ?? runs.length;
      this.note.textContent = !total
        ? (text ? `no run matches "${text}"` : 'There are no runs in this workspace yet.')
        : total > runs.length
          ? `the newest ${runs.length} of ${total.toLocaleString('en-US')} runs` +
            `${text ? ' matching' : ''}; type part of a name or id to narrow`
          : `${total} run${total === 1 ? '' : 's'}${text ? ' matching' : ''}`;
    } catch (e) {
      if (seq === this.seq) {
        this.note.textContent = `labkit: cannot list the runs: ${(e as Error).message}`;
      }
    }
  }

  getValue(): string[] {
    return Array.from(this.select.selectedOptions).map(o => o.value).filter(isRunId);
  }
}

/** Ask the user for runs (one, or several with ``multiple``); [] when cancelled. */
export async function pickRuns(title: string, multiple = false): Promise<string[]> {
  const body = new PickerBody(multiple);
  void body.load();
  const answer = await showDialog({
    title,
    body,
    focusNodeSelector: '.labkit-picker-filter',
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: multiple ? 'Compare' : 'OK' })]
  });
  return answer.button.accept ? answer.value ?? [] : [];
}
