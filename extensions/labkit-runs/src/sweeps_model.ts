/**
 * The Sweeps section's pure rules (no imports, tested under Node in
 * ``test/sweeps.test.mjs``): a sweep's header texts, its trials best first, and which trial
 * runs the compare page gets.
 */

/** A trial as ``GET sweeps/ID`` gives it. */
export interface ITrial {
  trial: number;
  status: string;
  params: Record<string, unknown>;
  value: number | null;
  run_id: string | null;
}

/** The statuses a sweep has (``dead``: running or paused, its driver gone; ``damaged``: its
 * row cannot be read), for a class name. */
export const SWEEP_STATUSES = ['running', 'paused', 'finished', 'stopped', 'failed', 'interrupted',
                               'dead', 'damaged'];

export function sweepStatusClass(status: unknown): string {
  return `labkit-status-${SWEEP_STATUSES.includes(status as string) ? status : 'unknown'}`;
}

/** "12/20 done": trials that have ended (finished, stopped or failed) of all. */
export function doneText(done: unknown, trials: unknown): string {
  const d = typeof done === 'number' && Number.isFinite(done) ? done : 0;
  const n = typeof trials === 'number' && Number.isFinite(trials) ? trials : 0;
  return `${d}/${n} done`;
}

function finite(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

/** The trials best first by ``mode`` (``max``: higher is better), those without a value last,
 * ties and the valueless by trial number; a new array. */
export function bestFirst<T extends ITrial>(trials: T[], mode: unknown): T[] {
  const sign = mode === 'max' ? -1 : 1;
  return [...trials].sort((a, b) => {
    const fa = finite(a.value), fb = finite(b.value);
    if (fa !== fb) {
      return fa ? -1 : 1;
    }
    const d = fa && fb ? sign * ((a.value as number) - (b.value as number)) : 0;
    return d || a.trial - b.trial;
  });
}

/** The run ids the compare page gets for a sweep: its trials that have a run, best first,
 * at most ``max`` (the compare page's limit), each once. */
export function compareIds(trials: ITrial[], mode: unknown, max = 50,
                           valid: (id: unknown) => boolean = id => typeof id === 'string'):
    string[] {
  const out: string[] = [];
  for (const t of bestFirst(trials, mode)) {
    if (out.length >= max) {
      break;
    }
    if (valid(t.run_id) && !out.includes(t.run_id as string)) {
      out.push(t.run_id as string);
    }
  }
  return out;
}

/** "lr=0.001 · depth=3 · act=relu": a trial's parameters in one short line. */
export function paramsText(params: unknown, maxLength = 80): string {
  if (!params || typeof params !== 'object') {
    return '';
  }
  const parts = Object.entries(params as Record<string, unknown>).map(([k, v]) =>
    `${k}=${finite(v) && !Number.isInteger(v) ? v.toPrecision(3) : String(v)}`);
  const text = parts.join(' · ');
  return text.length > maxLength ? `${text.slice(0, maxLength - 1)}…` : text;
}

/** Why a listed sweep's row cannot be read (``GET sweeps`` gives it ``damaged``), or null. */
export function sweepDamage(s: { status?: unknown; damaged?: unknown }): string | null {
  if (typeof s.damaged === 'string' && s.damaged) {
    return s.damaged;
  }
  return s.status === 'damaged' ? 'its row in the run store cannot be read' : null;
}

/** The ids of the sweeps whose trials a refresh reads: the open ones that can be read (a
 * damaged sweep's ``sweeps/ID`` is a 503), none while the section is collapsed. */
export function trialsToLoad(sweeps: { id: string; status?: unknown; damaged?: unknown }[],
                             open: Set<string>, collapsed: boolean): string[] {
  return collapsed ? []
    : sweeps.filter(s => open.has(s.id) && sweepDamage(s) === null).map(s => s.id);
}
