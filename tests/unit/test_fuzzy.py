"""Fuzzy rulebase (METHODS.md §4.5, §4.7): parser, membership, exact inference oracles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from perfsift.operators.contract.rules import DEFAULT_RULEBASE, FuzzySet, Rulebase, RulebaseError

LITERAL_FIGURE_4 = """
var distance(0, 2)   { set trapez LOW ( 0, .5, 0, .5 );  set trapez HIGH ( 1, 2, .5, 0 ); }
var violation(-1, 2) { set triangle NONE ( 1, 1, 1 );    set triangle TOTAL ( 0, 1, 1 ); }
if ( distance == LOW )  { violation = NONE; }
if ( distance == HIGH ) { violation = TOTAL; }
"""


def closed_form(d: float) -> float:
    s = min(max(2 * d - 1, 0.0), 1.0)
    return s * (3 - s) / (2 * (1 + s - s * s))


@pytest.mark.parametrize(
    ("d", "v"),
    [
        (0.55, 0.133028),
        (0.6, 7 / 29),
        (0.625, 11 / 38),
        (0.7, 13 / 31),
        (0.75, 0.5),
        (0.8, 0.580645),
        (0.875, 0.710526),
        (0.9, 0.758621),
    ],
)
def test_spec_table(d: float, v: float) -> None:
    assert Rulebase.default().evaluate({"distance": d})["violation"] == pytest.approx(v, abs=1e-6)


def test_closed_form_everywhere_and_clamping() -> None:
    rb = Rulebase.default()
    for d in np.linspace(-1, 3, 81):
        assert rb.evaluate({"distance": d})["violation"] == pytest.approx(closed_form(d), abs=1e-9)


def test_symmetry_and_weighted_centroids_are_linear() -> None:
    rb = Rulebase.default()
    for s in (0.1, 0.3, 0.45):
        a = rb.evaluate({"distance": (s + 1) / 2})["violation"]
        b = rb.evaluate({"distance": (2 - s) / 2})["violation"]
        assert a == pytest.approx(1 - b, abs=1e-12)
        assert rb.evaluate({"distance": (s + 1) / 2}, "weighted_centroids")["violation"] == pytest.approx(s)


def test_lookup_table_matches_exact_evaluation() -> None:
    rb = Rulebase.default()
    xs, ys = rb.table()
    probe = np.random.default_rng(0).uniform(0, 2, 300)
    approx = np.interp(probe, xs, ys)
    exact = np.array([closed_form(d) for d in probe])
    assert np.abs(approx - exact).max() < 1e-6


def test_a_rulebases_table_is_computed_once_per_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The table of a rulebase's text is kept in the user's cache folder: a new process (here: the
    per-process cache cleared) reads it back bit for bit instead of computing it; another text, grid
    or defuzzification is another file; an unreadable file is computed and written again."""
    from perfsift.operators.contract import rules

    monkeypatch.delenv("PERFSIFT_CACHE_DIR", raising=False)  # else it, not XDG_CACHE_HOME, names the folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rules._cached_table.cache_clear()
    xs, ys = Rulebase.default().table(points=401)
    want_x, want_y = Rulebase.default()._table(401, "centroid")
    assert np.array_equal(xs, want_x) and np.array_equal(ys, want_y)
    files = list((tmp_path / "perfsift" / "rulebase-tables").glob("*.npy"))
    assert len(files) == 1

    def no_more(self: Rulebase, points: int, defuzz: str) -> None:
        raise AssertionError("computed again")

    real = Rulebase._table
    monkeypatch.setattr(Rulebase, "_table", no_more)
    rules._cached_table.cache_clear()
    again_x, again_y = Rulebase.default().table(points=401)
    assert np.array_equal(again_x, want_x) and np.array_equal(again_y, want_y)
    assert not again_y.flags.writeable
    monkeypatch.setattr(Rulebase, "_table", real)
    Rulebase.parse(LITERAL_FIGURE_4).table(points=401)
    Rulebase.default().table(points=401, defuzz="weighted_centroids")
    assert len(list(files[0].parent.glob("*.npy"))) == 3
    files[0].write_bytes(b"not an array")
    rules._cached_table.cache_clear()
    _, fixed_y = Rulebase.default().table(points=401)
    assert np.array_equal(fixed_y, want_y) and np.load(files[0]).shape == (2, 401)
    rules._cached_table.cache_clear()


def test_literal_figure_text_parses_and_is_inverted() -> None:
    rb = Rulebase.parse(LITERAL_FIGURE_4)
    assert rb.evaluate({"distance": 0.2})["violation"] == pytest.approx(1.0, abs=1e-9)
    assert rb.evaluate({"distance": 1.5})["violation"] == pytest.approx(0.0, abs=1e-9)


def test_membership_vertices() -> None:
    low = FuzzySet("LOW", "trapez", (0, 0.5, 0, 0.5))
    high = FuzzySet("HIGH", "trapez", (1, 2, 0.5, 0))
    none = FuzzySet("NONE", "triangle", (0, 1, 1))
    assert low.mu([0, 0.5, 0.75, 1.0]).tolist() == [1.0, 1.0, 0.5, 0.0]
    assert high.mu([0.5, 0.75, 1.0, 2.0]).tolist() == [0.0, 0.5, 1.0, 1.0]
    assert none.mu([-1, -0.5, 0, 0.5, 1]).tolist() == [0.0, 0.5, 1.0, 0.5, 0.0]
    xs = np.linspace(0, 2, 101)
    np.testing.assert_allclose(low.mu(xs) + high.mu(xs), 1.0)


def test_parser_extensions_numbers_and_comments() -> None:
    text = """/* block */ var x(-1.5e0, +2) { set triangle A (-.5, .5, 1.); set trapez B (0, 1, 0, 0); } // c
    var y(0, 1) { set triangle LO (0, 0, 1); set triangle HI (1, 1, 0); }
    if ((x == A || x == B) && !(x == B)) { y = HI; }
    if (x == B) { y = LO; }"""
    rb = Rulebase.parse(text)
    assert rb.inputs == ("x",) and rb.outputs == ("y",)
    assert rb.evaluate({"x": -0.5})["y"] == pytest.approx(2 / 3)  # only the first rule fires, fully


@pytest.mark.parametrize(
    ("text", "msg", "line"),
    [
        ("var x(0,1) { set triangle A (0,1,1); }\nif (x == B) { x = A; }", "has no set 'B'", 2),
        (
            "var x(0,1) { set triangle A (0,1,1); }\nvar y(0,1) { set triangle A (0,1,1); }\n"
            "if (x == A) { y = A; }\nif (y == A) { x = A; }",
            "both tested and assigned",
            3,
        ),
        ("var x(0,1) {\n  set trapez A (1, 0, 1, 1); }\nif (x == A) { x = A; }", "plateau needs a <= b", 2),
        ("var x(1,0) { }", "lo < hi", 1),
        ("var x(0,1) { set blob A (0,1,1); }", "unknown set shape", 1),
        ("var x(0,1) { set triangle A (0,1); }", "expected ','", 1),
        ("var x(0,1) { set triangle A (0,1,1); }\nif (z == A) { x = A; }", "undeclared variable 'z'", 2),
        ("var x(0,1) { set triangle A (0,1,1); } @", "unexpected character '@'", 1),
    ],
)
def test_parser_rejects_with_line_and_column(text: str, msg: str, line: int) -> None:
    with pytest.raises(RulebaseError, match=msg) as exc:
        Rulebase.parse(text, "rb.txt")
    assert exc.value.line == line and exc.value.col >= 1
    assert str(exc.value).startswith(f"rb.txt:{line}:")


def test_no_rule_fired_gives_nan() -> None:
    rb = Rulebase.parse(
        "var x(0,2) { set triangle A (0,0,0.5); }\nvar y(0,1) { set triangle B (0.5,0.5,0.5); }\nif (x == A) { y = B; }"
    )
    assert np.isnan(rb.evaluate({"x": 1.5})["y"])
    assert Rulebase.parse(DEFAULT_RULEBASE).outputs == ("violation",)


def test_the_image_build_warm_up_fills_the_default_table_where_perfsift_cache_dir_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``python -m perfsift.operators.warm`` (the Dockerfile runs it with PERFSIFT_CACHE_DIR set)
    leaves the default rulebase's table there, which a stage then reads instead of computing."""
    from perfsift.operators import warm
    from perfsift.operators.contract import rules

    for op in ("ProjectionPursuit", "ForecastBank"):
        monkeypatch.setattr(getattr(warm, op), "warm_up", lambda self: None)
    monkeypatch.setattr(warm, "MODES", ())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PERFSIFT_CACHE_DIR", str(tmp_path / "image"))
    rules._cached_table.cache_clear()
    warm.warm()
    (table,) = (tmp_path / "image" / "rulebase-tables").glob("*.npy")
    assert not (tmp_path / "xdg").exists()
    want = Rulebase.default()._table(4001, "centroid")
    assert np.array_equal(np.load(table), np.stack(want))
    rules._cached_table.cache_clear()
