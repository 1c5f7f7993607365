/**
 * The chart options a run page and a compare page share: the x axis (iteration, epoch or wall
 * time), log y and smoothing. One builder, so that both pages offer the same controls under the
 * same class names (``labkit-x``, ``labkit-logy``, ``labkit-smoothing``).
 */
import { XAxis } from './series';
import { el } from './dom';

export interface IChartOptions {
  xAxis: XAxis;
  logY: boolean;
  /** 0 (none) to 0.99 */
  smoothing: number;
}

/** The controls of ``state`` (changed in place); ``changed`` is called after each change. */
export function chartControls(state: IChartOptions, changed: () => void): HTMLElement {
  const box = el('div', 'labkit-chart-options');
  const x = el('select', 'labkit-x');
  for (const [v, text] of [['iteration', 'iteration'], ['epoch', 'epoch'],
                           ['time', 'wall time']]) {
    x.append(new Option(text, v, false, v === state.xAxis));
  }
  x.onchange = () => {
    state.xAxis = x.value as XAxis;
    changed();
  };
  const xLabel = el('label');
  xLabel.append('x ', x);
  const logY = el('input', 'labkit-logy');
  logY.type = 'checkbox';
  logY.checked = state.logY;
  logY.onchange = () => {
    state.logY = logY.checked;
    changed();
  };
  const logLabel = el('label');
  logLabel.append(logY, ' log y');
  const sm = el('input', 'labkit-smoothing');
  sm.type = 'range';
  sm.min = '0';
  sm.max = '0.99';
  sm.step = '0.01';
  sm.value = String(state.smoothing);
  const shown = el('span', 'labkit-smoothing-value', String(state.smoothing));
  sm.oninput = () => {
    state.smoothing = Number(sm.value);
    shown.textContent = sm.value;
    changed();
  };
  const smLabel = el('label');
  smLabel.append('smoothing ', sm, ' ', shown);
  box.append(xLabel, logLabel, smLabel);
  return box;
}
