/** Command ids, in one place. */
export namespace CommandIDs {
  export const resume = 'labkit:resume-run';
  export const fork = 'labkit:fork-run';
  export const dashboard = 'labkit:open-dashboard';
  export const open = 'labkit:open-run';
  export const refresh = 'labkit:refresh-runs';
  export const compare = 'labkit:compare-runs';
}
