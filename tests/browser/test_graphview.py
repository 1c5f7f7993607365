"""GraphView in a real browser (tutorial 02): labels drawn on the nodes, one click opens one
level, a parameter's histograms, the shape error's failing op in red with what it expected and
got; screenshots in JupyterLab's light and dark themes. Pixels are read from screenshots, so
"visible" means drawn, not only present in the data."""

import io
import time

import pytest

from .conftest import ARTIFACTS, ROOT, STILL, open_and_run, require_browser, start_lab, wait_for

require_browser()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    import shutil

    tmp = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", tmp / "root")
    with start_lab(tmp, tmp / "root", tmp / "home",
                   extra_env={"LABKIT_TUTORIAL_SECONDS": "120"}) as lab:
        yield lab


# The graph figures' nodes, by the order of the views on the page (0: the loss, 1: the error):
# label, kind and the page position of the node's centre.
NODES = """(which) => {
  const views = Bokeh.index.roots
    .filter((v) => v.model.name === "labkit-graphview" && v.el.isConnected)
    .sort((a, b) => a.el.getBoundingClientRect().y - b.el.getBoundingClientRect().y);
  const v = views[which]; if (!v) return null;
  const box = v.canvas_view.el.getBoundingClientRect();
  for (const r of v.model.renderers) {
    const d = r.data_source && r.data_source.data; if (!d) continue;
    const get = (k) => d instanceof Map ? d.get(k) : d[k];
    if (!get("label") || !get("kind")) continue;
    return Array.from(get("label")).map((label, i) => ({
      label, kind: get("kind")[i], w: get("w")[i],
      x: box.x + v.frame.x_scale.compute(get("x")[i]),
      y: box.y + v.frame.y_scale.compute(get("y")[i])}));
  }
  return null; }"""

THEME_COLORS = """() => { const out = [];
  for (const v of Bokeh.index.roots) {
    if (!v.el.isConnected) continue;
    if (v.model.name === "labkit-graphview") {
      const r = v.model.renderers.find((r) => r.name === "edge shapes");
      out.push(r.glyph.text_color.value ?? r.glyph.text_color);
    }
    for (const f of v.model.children || [])
      if ((f.name || "").startsWith("histogram")) out.push(f.below[0].major_label_text_color);
  }
  return out; }"""


def hist_shown(page):
    return page.evaluate("""() => Bokeh.index.roots.some((v) => v.el.isConnected &&
        v.el.getBoundingClientRect().height > 100 && v.model.children &&
        v.model.children.some((c) => c.name === "histogram value"))""")


def pixels(page):
    from PIL import Image

    return Image.open(io.BytesIO(page.screenshot())).convert("RGB")


def count(img, box, test):
    x0, y0, x1, y1 = (int(v) for v in box)
    return sum(1 for x in range(x0, x1) for y in range(y0, y1) if test(img.getpixel((x, y))))


def white(p):
    return min(p) > 225


def red(p):
    return p[0] > 170 and p[1] < 90 and p[2] < 90


def inside(n, pad=3):
    return (n["x"] - n["w"] / 2 + pad, n["y"] - 12 + pad, n["x"] + n["w"] / 2 - pad,
            n["y"] + 12 - pad)


def below(n):
    """The strip under node ``n`` where what was expected and got is written."""
    return (n["x"] - 200, n["y"] + 16, n["x"] + 200, n["y"] + 50)


def inked(img, n, test, least):
    """Node ``n`` is drawn, with more than ``least`` pixels inside its box passing ``test``."""
    return n is not None and count(img, inside(n), test) > least


def node(page, which, label):
    return next((n for n in page.evaluate(NODES, which) or () if n["label"] == label), None)


def show(page, which):
    """Scroll GraphView ``which`` into view; wait until it stands still, painted (it slept
    0.8 s; the pixels read after it are polled for, see ``drawn``)."""
    view = page.locator(".labkit-graphview").nth(which)
    view.scroll_into_view_if_needed()
    view.evaluate(STILL)


def drawn(page, ok, what):
    """A screenshot of the page once ``ok(img)`` holds, polled (Bokeh paints a figure scrolled
    into view, or redrawn, a moment later), else the last one taken: the caller's assertions
    then run on it as they did on the one screenshot taken after a fixed pause."""
    last = []

    def check():
        last[:] = [pixels(page)]
        return ok(last[0])
    try:
        wait_for(check, timeout=20, what=what)
    except AssertionError:
        pass
    return last[0]


def settled(page, which):
    """The nodes of figure ``which``, once two reads a painted frame apart agree (a redraw
    has finished moving them)."""
    def same():
        a = page.evaluate(NODES, which)
        view = page.locator(".labkit-graphview").nth(which)
        view.evaluate(STILL)
        return a is not None and a == page.evaluate(NODES, which)
    wait_for(same, timeout=20, what="the graph to stand still")


def shot(page, which, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator(".labkit-graphview").nth(which).screenshot(path=str(ARTIFACTS / f"{name}.png"))


def set_theme(page, theme, light):
    page.locator(".lm-MenuBar-itemLabel:text-is('Settings')").click()
    page.locator(".lm-Menu-itemLabel:text-is('Theme')").hover()
    page.locator(f".lm-Menu-itemLabel:text-is('{theme}')").click()
    page.wait_for_selector(f"body[data-jp-theme-light='{str(light).lower()}']", state="attached",
                           timeout=30_000)
    # JupyterLab shows its splash while the theme loads (it used to be a 1 s sleep); the
    # figures' colours are waited for where they are read
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=30_000)


def test_graphview_labels_levels_histograms_and_the_shape_error(browser, lab):
    page = open_and_run(browser, lab, "02_bricks_roles_graphview.ipynb", 8,
                        ".labkit-graphview >> nth=1")
    view = page.locator(".labkit-graphview").first
    show(page, 0)
    wait_for(lambda: node(page, 0, "▸ mlp_1"), what="the collapsed brick drawn")
    # labels: white text drawn inside each node's box
    labels = ("▸ mlp_1", "softmax_cross_entropy", "input", "output")
    img = drawn(page, lambda img: all(inked(img, node(page, 0, label), white, 15)
                                      for label in labels), "the labels drawn")
    for label in labels:
        n = node(page, 0, label)
        assert count(img, inside(n), white) > 15, f"no label drawn on {label}"
    shot(page, 0, "02-graphview-light")

    # one click opens one level: mlp_1's children, each collapsed; no parameter yet
    n = node(page, 0, "▸ mlp_1")
    page.mouse.click(n["x"], n["y"])
    wait_for(lambda: node(page, 0, "▸ linear_0"), what="mlp_1 to open")
    time.sleep(1.5)  # a second level, if a click opened two, would have arrived by now
    kinds = [m["kind"] for m in page.evaluate(NODES, 0)]
    assert "parameter" not in kinds and kinds.count("brick") == 3, kinds
    assert "/classifier/mlp_1" in view.inner_text()
    assert not hist_shown(page)  # a brick's click hides the last parameter's histograms

    # the next level, then a parameter's histograms
    n = node(page, 0, "▸ linear_0")
    page.mouse.click(n["x"], n["y"])
    wait_for(lambda: node(page, 0, "W"), what="linear_0 to open")
    settled(page, 0)  # it slept 1 s

    def details():
        return "gradient" in view.inner_text() and "mean" in view.inner_text()

    def click_weight():
        # NOTE: clicked again until the details show: the first click can land while the
        # opened graph is still being redrawn (it slept 0.7 s after each click)
        n = node(page, 0, "W")
        page.mouse.click(n["x"], n["y"])
        try:
            return wait_for(details, timeout=2, what="the parameter's statistics")
        except AssertionError:
            return False
    wait_for(click_weight, what="the parameter's statistics")
    wait_for(lambda: hist_shown(page), what="the histograms shown")
    view.evaluate(STILL)  # it slept 0.5 s: the histograms laid out and painted
    shot(page, 0, "02-graphview-histograms-light")

    # the shape error: the failing op in red, what it expected and got under it
    show(page, 1)
    wait_for(lambda: node(page, 1, "✗ linear"), what="the failing op drawn")
    error = page.locator(".labkit-graphview").nth(1)
    assert "expected" in error.inner_text() and "W expects 31" in error.inner_text()
    img = drawn(page, lambda img: inked(img, node(page, 1, "✗ linear"), red, 100)
                and inked(img, node(page, 1, "✗ linear"), white, 15)
                and count(img, below(node(page, 1, "✗ linear")), red) > 40,
                "the failing op drawn in red, labelled, with what was expected and got")
    n = node(page, 1, "✗ linear")
    assert count(img, inside(n), red) > 100, "the failing op is not drawn in red"
    assert count(img, inside(n), white) > 15, "the failing op has no label"
    assert count(img, below(n), red) > 40, "what was expected and got is not written"
    shot(page, 1, "02-graphview-shape-error-light")

    # dark theme: text follows the theme (edge labels take --jp-ui-font-color2)
    set_theme(page, "JupyterLab Dark", light=False)
    fg2 = page.evaluate("""() => getComputedStyle(document.body)
        .getPropertyValue("--jp-ui-font-color2").trim()""")
    wait_for(lambda: set(page.evaluate(THEME_COLORS)) == {fg2},
             what="edge labels and histogram ticks in the theme's colour")
    show(page, 1)
    img = drawn(page, lambda img: inked(img, node(page, 1, "✗ linear"), red, 100),
                "the failing op in red")
    n = node(page, 1, "✗ linear")
    assert count(img, inside(n), red) > 100
    shot(page, 1, "02-graphview-shape-error-dark")
    show(page, 0)
    shot(page, 0, "02-graphview-dark")
    # NOTE: the lab stays dark (a user setting): it is this module's, and this its last test
    page.close()
