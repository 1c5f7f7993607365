"""What labkit's own HTML and SVG (the sweep view, the Dashboard's static copy, a sweep's trend,
GraphView's details) make of hostile text and extreme numbers: every value shown as text, none
shipped whole when huge, and no number that a run can record crashing the drawing."""

import re
from html.parser import HTMLParser

import pytest

import labkit as lk
from labkit.notebook import _static
from labkit.sweep import space as S
from labkit.sweep.trend import Trend

HUGE = [[1e20], [1e20, 1e20], [1e308, -1e308], [-1.79e308, 1.79e308], [5e-324, 1e-323]]


@pytest.fixture
def store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        yield s


def seed(store, values, space, name="seeded", metric="m"):
    dims = S.check(space)
    params = [S.draw(dims, "random", i) for i in range(len(values))]
    sid = store.create_sweep(name, None, S.to_json(dims),
                             {"metric": metric, "mode": "max", "trials": len(values),
                              "search": "random", "engine": "inprocess"}, params)
    store.update_trials(sid, {i: {"status": "finished", "value": v, "epoch": 2,
                                  "updated": 1000.0 + i} for i, v in enumerate(values)})
    store.update_sweep(sid, status="finished", started=1000.0)
    return lk.sweep.get(sid)


def coordinates(text):
    """Every number of the drawing's points and positions."""
    found = re.findall(r'(?:points|cx|cy|x|y|x1|x2|y1|y2)="([^"]*)"', text)
    return [float(v) for f in found for pair in f.split() for v in pair.split(",")]


@pytest.mark.parametrize("values", HUGE)
def test_the_sweep_view_draws_metric_values_of_any_size(store, values):
    # NOTE: a single trial at 1e20 raised ZeroDivisionError (1e20 + 0.5 is 1e20), ±1e308 a
    # ValueError (NaN to integer, from hi - lo = inf): sw.show() failed
    sw = seed(store, values, {"a": [1, 2]})
    text = sw.show().html()
    assert text.count('<polyline class="trial"') == len(values)
    assert all(-1e6 < c < 1e6 for c in coordinates(text))


@pytest.mark.parametrize("values", [[1e20, 1e20], [-1.5e308, 1.5e308]])
def test_the_sweep_view_draws_parameters_of_any_size(store, values):
    sw = seed(store, [0.1, 0.2], {"a": values[:1] if values[0] == values[1] else values})
    text = sw.show().html()
    assert all(-1e6 < c < 1e6 for c in coordinates(text))


@pytest.mark.parametrize("values", HUGE)
def test_the_dashboards_static_copy_draws_metric_values_of_any_size(values):
    # NOTE: a constant loss of 1e20 raised ZeroDivisionError, ±1e308 OverflowError: the
    # Dashboard's output failed to render and its final copy was never written
    series = {"loss": {"iteration": list(range(len(values))), "value": values}}
    text = _static.render("run", "finished", "info", series)
    points = re.search(r'<polyline points="([^"]+)"', text).group(1)
    assert all(-1e6 < c < 1e6 for c in coordinates(f'points="{points}"'))
    assert _static.ticks(-1e308, 1e308)[0] == -1e308 and _static.ticks(0, 5e-324) == [0]


def test_a_trend_of_a_constant_huge_quantity_draws():
    text = Trend("depth", "time", [(1, 1e20), (2, 1e20)]).svg()
    assert all(-1e6 < c < 1e6 for c in coordinates(text))


HOSTILE = ["</script><script>alert(1)</script>", '"><img src=x onerror=alert(1)>',
           "'); alert(1); //", "${alert(1)}", "line\u2028para\u2029", "</style><!--]]>",
           "nul\x00esc\x1b[2J", "q\"'\\\n\r\t", "\u202eevil.exe", "x" * 100_000]
HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class Tags(HTMLParser):
    def __init__(self, text):
        super().__init__()
        self.tags, self.attrs = set(), set()
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs |= {k for k, _ in attrs}


def assert_text_only(text, tags, longest=200):
    """Only labkit's own elements and attributes, no character that hides or reorders text,
    and no value shipped whole."""
    found = Tags(text)
    assert found.tags <= tags, found.tags - tags
    assert not [a for a in found.attrs if a.startswith("on")]
    assert not HIDDEN.search(text), repr(HIDDEN.search(text).group())
    assert max(len(m) for m in re.findall("x+", text)) < longest


SVG = {"svg", "line", "polyline", "circle", "rect", "text", "tspan", "g"}


def test_the_sweep_view_shows_hostile_names_and_values_as_short_text(store):
    space = {"lr": lk.sweep.loguniform(1e-4, 1e-1), "choice": HOSTILE,
             **{f"p{i}{h[:40]}": [h, 1] for i, h in enumerate(HOSTILE)}}
    sw = seed(store, [0.1 * i for i in range(12)], space,
              name=HOSTILE[8] + HOSTILE[6] + HOSTILE[4] + HOSTILE[-1])
    text = sw.show().html()
    # NOTE: a 100,000-character choice was shipped whole in each row that drew it, and a bidi
    # override in the sweep's name reversed the id and status shown after it
    assert_text_only(text, {"div", "b", "span", "button", "table", "tr", "th", "td", *SVG})
    assert "\\u202eevil.exe" in text and "nul\\x00esc\\x1b[2J" in text
    assert len(text) < 60_000


def test_the_static_copy_shows_hostile_metric_keys_and_names_as_short_text():
    series = {p + h: {"iteration": [1, 2], "epoch": [0, 1], "value": [1.0, 2.0]}
              for h in HOSTILE for p in ("", "valid_")}
    text = _static.render(HOSTILE[8] + " · run x", HOSTILE[6], HOSTILE[4] + HOSTILE[-1], series)
    assert_text_only(text, {"div", "b", "span", "table", "tr", "th", "td", *SVG}, 2000)
    assert len(text) < 120_000


def test_trend_and_graph_details_show_hostile_names_as_short_text():
    from labkit.notebook import _graph_data as gd

    text = Trend(HOSTILE[8] + HOSTILE[-1], HOSTILE[1], [(1, 1.0), (2, 3.0)]).svg()
    assert_text_only(text, SVG)
    node = {"kind": "function", "op": HOSTILE[0], "brick": "/" + HOSTILE[8] + HOSTILE[-1],
            "dtype": HOSTILE[6], "expected": HOSTILE[4]}
    assert_text_only(gd.tip_html(node), {"b", "br"})


def test_the_checkpoint_tables_cells_are_short_text():
    from labkit.notebook.checkpoints_table import metric_keys, table_html

    # NOTE: another writer (or a crafted file) can put any text in a checkpoint's epoch and
    # metrics; a 100,000-character key went whole into the header, its value into each row
    records = [{"id": i, "iteration": i, "epoch": HOSTILE[8] + HOSTILE[-1], "size": 10,
                "metrics": {HOSTILE[6] + HOSTILE[-1]: HOSTILE[4] + HOSTILE[-1], "loss": 0.5},
                "valid": True, "created": 0.0, "path": "/p"} for i in range(5)]
    text = table_html(records, metric_keys(records))
    assert_text_only(text, {"table", "tr", "th", "td"})
    assert "<td>0.5</td>" in text and len(text) < 8000
