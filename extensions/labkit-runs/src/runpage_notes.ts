/**
 * What people write about a run, on its run page: its name (renamed in place; the tab title
 * follows), its tags as chips (add, remove) and a free-text note saved explicitly. Each change
 * is a ``PATCH runs/ID`` (``labkit/server/handlers.py``, checked there as in ``lk.runs``);
 * the server's answer, or its refusal, is shown next to what was changed. Values the reader
 * is editing are never overwritten by a refresh. Every value is rendered as text.
 */
import { api, runPath } from './api';
import { pressKey } from './clicks';
import { IRunRecord } from './runpage_sections';
import { el } from './dom';

/** a tag as the server accepts it (``labkit.runs.notes.TAG_RE``, at most 40 characters) */
export const TAG = /^[A-Za-z0-9][A-Za-z0-9_.:+=@/-]{0,39}$/;

export class RunNotes {
  readonly node: HTMLElement;

  constructor(private runId: string, private changed: (run: IRunRecord) => void) {
    this.node = el('div', 'labkit-runpage-notes');
    // the name
    const nameRow = el('div', 'labkit-runpage-name-row');
    this.name = el('input', 'labkit-runpage-name');
    this.name.setAttribute('aria-label', 'run name');
    this.name.placeholder = 'unnamed';
    this.name.title = "the run's name: edit it, then Enter (Escape undoes)";
    this.rename = el('button', 'jp-mod-styled labkit-runpage-rename', 'Rename');
    this.rename.title = 'save the new name (Enter)';
    this.rename.disabled = true;
    this.name.oninput = () => {
      this.rename.disabled = !this.name.value.trim() || this.name.value === this.saved.name;
    };
    this.name.onkeydown = e => {
      if (e.key === 'Enter') {
        void this.saveName();
      } else if (e.key === 'Escape') {
        this.name.value = this.saved.name;
        this.rename.disabled = true;
      }
    };
    this.rename.onclick = () => void this.saveName();
    this.nameMessage = el('span', 'labkit-runpage-saved');
    this.nameMessage.setAttribute('role', 'status');
    nameRow.append(this.name, this.rename, this.nameMessage);
    // the tags
    const tagRow = el('div', 'labkit-runpage-tags-row');
    this.chips = el('span', 'labkit-runpage-tags');
    this.tagInput = el('input', 'labkit-runpage-tag-input');
    this.tagInput.placeholder = 'add a tag';
    this.tagInput.setAttribute('aria-label', 'new tag');
    this.tagInput.onkeydown = e => {
      if (e.key === 'Enter') {
        void this.addTag();
      }
    };
    const add = el('button', 'jp-mod-styled labkit-runpage-tag-add', 'Add tag');
    add.onclick = () => void this.addTag();
    this.tagMessage = el('span', 'labkit-runpage-saved');
    this.tagMessage.setAttribute('role', 'status');
    tagRow.append(el('span', 'labkit-runpage-label', 'tags'), this.chips, this.tagInput, add,
                  this.tagMessage);
    // the note
    const noteBox = el('details', 'labkit-runpage-note-box');
    this.noteSummary = el('summary', undefined, 'note');
    this.note = el('textarea', 'labkit-runpage-note-text');
    this.note.rows = 4;
    this.note.placeholder = 'what this run tried, what came of it...';
    this.note.setAttribute('aria-label', 'note');
    this.saveNote = el('button', 'jp-mod-styled labkit-runpage-note-save', 'Save note');
    this.saveNote.disabled = true;
    this.note.oninput = () => {
      const dirty = this.note.value !== this.saved.note;
      this.saveNote.disabled = !dirty;
      this.noteMessage.textContent = dirty ? 'not saved' : '';
    };
    this.note.onkeydown = e => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        void this.saveNoteNow();
      }
    };
    this.saveNote.onclick = () => void this.saveNoteNow();
    this.noteMessage = el('span', 'labkit-runpage-saved');
    this.noteMessage.setAttribute('role', 'status');
    const noteBar = el('div', 'labkit-runpage-note-bar');
    noteBar.append(this.saveNote, this.noteMessage);
    noteBox.append(this.noteSummary, this.note, noteBar);
    this.node.append(nameRow, tagRow, noteBox);
  }

  private name: HTMLInputElement;
  private rename: HTMLButtonElement;
  private nameMessage: HTMLSpanElement;
  private chips: HTMLSpanElement;
  private tagInput: HTMLInputElement;
  private tagMessage: HTMLSpanElement;
  private noteSummary: HTMLElement;
  private note: HTMLTextAreaElement;
  private saveNote: HTMLButtonElement;
  private noteMessage: HTMLSpanElement;
  private saved = { name: '', tags: [] as string[], note: '' };

  /** Show ``run``'s values, except where the reader has unsaved edits. */
  show(run: IRunRecord): void {
    const name = run.name || '';
    if (this.name.value === this.saved.name && document.activeElement !== this.name) {
      this.name.value = name;
    }
    const note = typeof run.note === 'string' ? run.note : '';
    if (this.note.value === this.saved.note) {
      this.note.value = note;
    }
    this.saved = { name, tags: Array.isArray(run.tags) ? run.tags.map(String) : [], note };
    this.rename.disabled = !this.name.value.trim() || this.name.value === name;
    this.saveNote.disabled = this.note.value === note;
    this.noteSummary.textContent = note ? `note (${note.split('\n')[0].slice(0, 60)}` +
      `${note.length > 60 || note.includes('\n') ? '…' : ''})` : 'note (none yet)';
    const tags = JSON.stringify(this.saved.tags);
    if (this.chips.dataset.tags !== tags) {  // NOTE: not at each poll of a live run
      this.chips.dataset.tags = tags;
      this.chips.replaceChildren(...this.saved.tags.map(t => this.chip(t)));
    }
  }

  private chip(tag: string): HTMLElement {
    const c = el('span', 'labkit-tag', tag);
    c.dataset.tag = tag;
    const x = el('button', 'labkit-tag-remove', '×');
    x.title = `remove the tag ${tag}`;
    x.setAttribute('aria-label', `remove tag ${tag}`);
    pressKey(x, `untag ${tag}`);
    // NOTE: a change, not the whole list: another page's tags added meanwhile are kept
    x.onclick = () => void this.patch({ remove_tags: [tag] }, this.tagMessage, `removed ${tag}`);
    c.appendChild(x);
    return c;
  }

  private async saveName(): Promise<void> {
    const name = this.name.value.trim();
    if (!name || name === this.saved.name) {
      return;
    }
    this.name.value = name;
    await this.patch({ name }, this.nameMessage, 'renamed');
  }

  private async addTag(): Promise<void> {
    const tag = this.tagInput.value.trim();
    if (!tag) {
      return;
    }
    if (!TAG.test(tag)) {
      this.say(this.tagMessage, `not a tag: ${tag.slice(0, 40)} (a letter or digit first, ` +
               'then letters, digits and _ . : + = @ / -; at most 40, no spaces)', true);
      return;
    }
    if (this.saved.tags.includes(tag)) {
      this.tagInput.value = '';
      return;
    }
    if (await this.patch({ add_tags: [tag] }, this.tagMessage, `added ${tag}`)) {
      this.tagInput.value = '';
    }
  }

  private async saveNoteNow(): Promise<void> {
    await this.patch({ note: this.note.value }, this.noteMessage, 'note saved');
  }

  private say(where: HTMLElement, text: string, error = false): void {
    where.textContent = text;
    where.classList.toggle('labkit-runpage-refused', error);
  }

  /** Send ``body``; on success show the saved run and ``done`` (with the time). */
  private async patch(body: Record<string, unknown>, where: HTMLElement, done: string):
    Promise<boolean> {
    this.say(where, 'saving…');
    let run: IRunRecord;
    try {
      run = await api<IRunRecord>(runPath(this.runId), {
        method: 'PATCH', body: JSON.stringify(body) });
    } catch (e) {
      this.say(where, `not saved: ${(e as Error).message}`, true);
      return false;
    }
    // what was saved is what its input holds now; other unsaved edits stay as they are
    if ('name' in body) {
      this.saved.name = this.name.value = run.name || '';
    }
    if ('note' in body) {
      this.saved.note = this.note.value = run.note || '';
    }
    this.show(run);
    this.say(where, `${done} ${new Date().toLocaleTimeString()}`);
    this.changed(run);
    return true;
  }
}
