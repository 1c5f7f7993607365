"""GraphView in a real browser (tutorial 02): GraphView draws nodes; hover shows a node's
details, clicks expand a brick and show a parameter's statistics."""

import time

import pytest

from .conftest import ROOT, open_and_run, require_browser, shot, start_lab, wait_for

require_browser()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    import shutil

    tmp = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", tmp / "root")
    with start_lab(tmp, tmp / "root", tmp / "home",
                   extra_env={"LABKIT_TUTORIAL_SECONDS": "120"}) as lab:
        yield lab


NODE = """(kind) => {
  for (const v of Object.values(Bokeh.index)) {
    if (!(v.frame && v.model.title && v.model.title.text === "computational graph")) continue;
    for (const r of v.model.renderers) {
      const d = r.data_source && r.data_source.data; if (!d) continue;
      const get = (k) => d instanceof Map ? d.get(k) : d[k];
      const kinds = get("kind"); if (!kinds) continue;
      const i = Array.from(kinds).indexOf(kind); if (i < 0) return null;
      const box = v.canvas_view.el.getBoundingClientRect();
      return [box.x + v.frame.x_scale.compute(get("x")[i]),
              box.y + v.frame.y_scale.compute(get("y")[i])];
    }
  }
  return null; }"""

TOOLTIP_TEXT = """() => { const out = [];
  const walk = (root) => { for (const el of root.querySelectorAll("*")) {
      if (el.shadowRoot) walk(el.shadowRoot);
      if ((el.className || "").toString().includes("bk-Tooltip") || el.localName === "div" &&
          (el.className || "").toString().includes("tooltip")) out.push(el.innerText || "");
      if (el.shadowRoot && (el.className || "").toString().includes("bk-Tooltip"))
        out.push(el.shadowRoot.textContent || ""); } };
  walk(document); return out.join(" | "); }"""


def test_graphview_draws_hovers_and_clicks(browser, lab):
    page = open_and_run(browser, lab, "02_bricks_roles_graphview.ipynb", 5, ".labkit-graphview")
    view = page.locator(".labkit-graphview").first
    view.scroll_into_view_if_needed()
    wait_for(lambda: page.evaluate(NODE, "brick"), what="nodes drawn")
    x, y = page.evaluate(NODE, "input")
    page.mouse.move(x, y)
    wait_for(lambda: "dtype" in page.evaluate(TOOLTIP_TEXT), what="the hover tooltip")
    assert "shape" in page.evaluate(TOOLTIP_TEXT)
    shot(page, "02-graphview-hover")
    x, y = page.evaluate(NODE, "brick")
    page.mouse.click(x, y)
    wait_for(lambda: "expanded" in view.inner_text(), what="the brick to expand")
    wait_for(lambda: page.evaluate(NODE, "parameter"), what="parameters drawn")

    def click_parameter():
        # NOTE: clicked again until the details show: the first click can land while the
        # expanded graph is still being redrawn
        x, y = page.evaluate(NODE, "parameter")
        page.mouse.click(x, y)
        time.sleep(0.5)
        return "mean" in view.inner_text() and "gradient" in view.inner_text()
    wait_for(click_parameter, what="the parameter's statistics")
    shot(page, "02-graphview-details")
    page.close()
