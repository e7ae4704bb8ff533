"""The collector writes standard JSON only: a non-finite float is null, never ``Infinity``.

The typed answers say null where no report measured a number; ``collector.jsonout`` is the
net under them for every endpoint (browsers' ``JSON.parse`` refuses ``Infinity`` and ``NaN``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from collector import create_app
from collector.jsonout import finite
from tests.support.server import TOKENS


def strict(text: str) -> Any:
    def refuse(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_are_written_as_null_and_the_rest_as_before(tmp_path: Path) -> None:
    app = create_app({"database": str(tmp_path / "c.db"), **TOKENS})
    body = {"z": math.inf, "a": [math.nan, 1.5, -math.inf], "m": {"k": (2.0, math.nan)}, "s": "x"}
    with app.test_request_context():
        text = app.json.response(body).get_data(as_text=True)
        # A finite body: keys in the answer's order, compact, as before.
        plain = app.json.response({"b": 1, "a": [0.25, "é"]}).get_data(as_text=True)
    assert text == '{"z":null,"a":[null,1.5,null],"m":{"k":[2.0,null]},"s":"x"}\n'
    assert strict(text)["a"] == [None, 1.5, None]
    assert plain == '{"b":1,"a":[0.25,"\\u00e9"]}\n'
    assert strict(app.json.dumps({"x": math.nan})) == {"x": None}


def test_finite_walks_every_container() -> None:
    assert finite([{"a": (math.inf,)}, 1, "s", None, True]) == [{"a": [None]}, 1, "s", None, True]
    assert finite(3.0) == 3.0 and finite(-math.inf) is None
