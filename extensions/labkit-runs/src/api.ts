/**
 * The client of the server's REST API (``labkit/server/handlers.py``), relative to the base URL,
 * through Jupyter's authenticated requests. Ids cross the API, never paths; every value that
 * enters a URL is encoded per path segment.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** A run id as the server accepts it (``labkit.runs.RUN_ID``): the old 6-hex-digit suffix or
 * the new 16-digit one. */
export const RUN_ID = /^[0-9]{8}-[0-9]{6}-(?:[0-9a-f]{16}|[0-9a-f]{6})$/;

export function isRunId(id: unknown): id is string {
  return typeof id === 'string' && RUN_ID.test(id);
}

/** The statuses the server reports (``dead``: running, but its heartbeat stopped). */
export const STATUSES = ['created', 'running', 'paused', 'finished', 'failed', 'interrupted',
                         'dead'];

export interface IRun {
  id: string;
  name: string | null;
  status: string;
  created: number;
  parent_run: string | null;
  /** the id of the checkpoint a fork started from */
  parent_checkpoint: number | null;
  config: Record<string, unknown>;
  progress: {
    epoch?: number;
    iteration?: number;
    epoch_iteration?: number;
    epoch_length?: number | null;
    last?: Record<string, number>;
  };
  children?: string[];
  /** why its row in the store cannot be read (status ``damaged``; in lists and compare) */
  damaged?: string;
}

export interface ISeries {
  iteration: number[];
  value: (number | null)[];
}

export interface ICheckpoint {
  id: number;
  iteration: number;
  epoch: number;
  size: number;
  valid: boolean;
}

/** ``runs/<id>/<segments...>``, each segment encoded. */
export function runPath(id: string, ...segments: (string | number)[]): string {
  return ['runs', id, ...segments].map(s => encodeURIComponent(String(s))).join('/');
}

/** A request to the server extension, relative to the server's base URL. */
export async function api<T>(path: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'labkit', 'api', path);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  let body: { message?: string };
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    throw new Error(`${response.status} ${response.statusText}: the answer is not JSON`);
  }
  if (!response.ok) {
    throw new Error(body.message || `${response.status} ${response.statusText}`);
  }
  return body as T;
}

/** What may be asked of a sweep's driver (``POST sweeps/ID/<request>``, as ``Sweep.pause()``,
 * ``resume()`` and ``stop()`` do): the Runs sidebar's and the notebook view's buttons. */
export const SWEEP_REQUESTS = ['pause', 'resume', 'stop'] as const;
export type SweepRequest = (typeof SWEEP_REQUESTS)[number];

export function isSweepRequest(what: unknown): what is SweepRequest {
  return SWEEP_REQUESTS.includes(what as SweepRequest);
}

/** Ask sweep ``id``'s driver for ``what``. */
export async function askSweep(id: string, what: SweepRequest): Promise<void> {
  await api(`sweeps/${encodeURIComponent(id)}/${what}`, { method: 'POST', body: '{}' });
}
