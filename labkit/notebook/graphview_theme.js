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
const hooks = (window.labkitThemeHooks = window.labkitThemeHooks || []);
if (!hooks.includes(plots[0].id)) {
  hooks.push(plots[0].id);
  new MutationObserver(apply).observe(document.body, {
    attributes: true, attributeFilter: ["data-jp-theme-light", "data-jp-theme-name"]});
}
