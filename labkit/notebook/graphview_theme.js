// GraphView's figures follow JupyterLab's theme (light or dark): text, axes and grid take the
// theme's CSS variables, now and whenever the theme changes (JupyterLab sets
// data-jp-theme-light on <body>). Run as a Bokeh CustomJS: `plots` (Plot models) and `texts`
// (Text glyphs drawn on the background) are its arguments. Backgrounds are transparent
// (set in Python), so only the colours of lines and text are set here.
const apply = () => {
  const css = getComputedStyle(document.body);
  const get = (name) => css.getPropertyValue(name).trim();
  const fg = get("--jp-ui-font-color1");
  if (!fg) return;  // not in JupyterLab: keep the neutral colours set in Python
  const fg2 = get("--jp-ui-font-color2") || fg;
  const line = get("--jp-border-color1") || fg2;
  const grid = get("--jp-border-color2") || line;
  for (const p of plots) {
    if (p.title) p.title.text_color = fg;
    for (const a of [...p.left, ...p.below]) {
      a.axis_label_text_color = fg;
      a.major_label_text_color = fg2;
      a.axis_line_color = line;
      a.major_tick_line_color = line;
      a.minor_tick_line_color = line;
    }
    for (const c of p.center) if (c.grid_line_color !== undefined) c.grid_line_color = grid;
  }
  for (const t of texts) t.text_color = fg2;
};
apply();
// one observer for the page; per figure the latest `apply` (a view drawn again gets new
// model objects with the same ids, and the old ones no longer draw)
if (window.labkitThemeApply === undefined) {
  window.labkitThemeApply = new Map();
  // NOTE: the attribute changes before the new theme's CSS has loaded (seen: the light
  // colours applied in the dark theme), so the colours are read again for a few seconds
  const all = () => { for (const f of window.labkitThemeApply.values()) f(); };
  const later = () => { for (let i = 1; i <= 20; i++) setTimeout(all, 150 * i); };
  new MutationObserver(later).observe(document.body, {
    attributes: true, attributeFilter: ["data-jp-theme-light", "data-jp-theme-name"]});
}
window.labkitThemeApply.set(plots[0].id, apply);
