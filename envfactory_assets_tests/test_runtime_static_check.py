"""Static check, restricted namespace and canonical JSON of envfactory_assets.runtime (no processes)."""

from __future__ import annotations

import datetime

import pytest

from envfactory_assets.runtime import canonical_json, state_hash, static_check
from envfactory_assets.runtime.restricted import restricted_builtins

ACCEPTED_SOURCE = """
import math
import json
import collections.abc
from collections import OrderedDict, abc
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Row:
    task_id: int


class NotFound(LookupError):
    def __init__(self, message):
        super().__init__(message)
        self._message = message


def load(data):
    return dict(data)


def save(state):
    return dict(state)


def due_in(state, task_id, days):
    if not isinstance(days, int):
        raise ValueError(f"days must be int, not {type(days).__name__}")
    now = datetime.fromisoformat(state["meta"]["now"])
    return {"due": (now + timedelta(days=days)).isoformat(), "root": math.sqrt(days), "y": "{0.year}".format(now)}
"""


def test_accepts_ordinary_environment_code() -> None:
    assert static_check(ACCEPTED_SOURCE) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os", "line 1: import of 'os' is not allowed"),
        ("import random", "line 1: import of 'random' is not allowed"),
        ("x = 1\nfrom subprocess import run", "line 2: import from 'subprocess' is not allowed"),
        ("import json.tool", "import of 'json.tool' is not allowed"),
        ("from . import sibling", "relative imports are not allowed"),
        ("from math import *", "'from math import *' is not allowed"),
        ("def f(state):\n    return open('/etc/passwd').read()", "line 2: use of 'open' is not allowed"),
        ("x = ().__class__.__subclasses__()", "line 1: access to dunder attribute '__subclasses__'"),
        ("x = ().__class__.__subclasses__()", "line 1: access to dunder attribute '__class__'"),
        ("import datetime\nx = datetime.datetime.now()", "line 2: clock read '.now' is not allowed"),
        ("from datetime import date\nx = date.today()", "line 2: clock read '.today' is not allowed"),
        ("from datetime import datetime\nx = datetime.utcnow()", "clock read '.utcnow'"),
        ("from datetime import datetime\nx = datetime.fromtimestamp(0)", "clock read '.fromtimestamp'"),
        ("x = eval('1 + 1')", "line 1: use of 'eval' is not allowed"),
        ("exec('x = 1')", "use of 'exec' is not allowed"),
        ("m = __import__('os')", "use of '__import__' is not allowed"),
        ("g = globals()", "use of 'globals' is not allowed"),
        ("def f(o, name):\n    return getattr(o, name)", "line 2: 'getattr' needs a constant string"),
        ("x = getattr((), '__class__')", "getattr(): access to dunder attribute '__class__'"),
        ("import functools\nx = functools.reduce(getattr, ['a'], 1)", "'getattr' may only be called directly"),
        ("n = 0\ndef bump():\n    global n\n    n += 1", "line 3: 'global' statements are not allowed"),
        ("def outer():\n    n = 0\n    def inner():\n        nonlocal n", "line 4: 'nonlocal' statements"),
        ("import collections\nx = collections._sys", "private attribute '_sys'"),
        ("x = __builtins__", "use of dunder name '__builtins__'"),
        ("def g():\n    yield 1\nframe = g().gi_frame", "line 3: access to introspection attribute 'gi_frame'"),
        ("x = type.__dict__", "dunder attribute '__dict__'"),
        ("match ():\n    case object(__class__=c):\n        pass", "line 2: access to dunder attribute '__class__'"),
        ("x = '{0.__class__}'.format(())", "line 1: format field: access to dunder attribute '__class__'"),
        ("import string\nf = string.Formatter()", "'Formatter' is not allowed"),
        ("from typing import get_type_hints", "import of 'typing.get_type_hints' is not allowed"),
        ("from functools import singledispatch", "import of 'functools.singledispatch' is not allowed"),
        ("import json\njson.dumps = len", "line 2: assigning or deleting attributes of imported 'json'"),
        ("def f(:\n    pass", "line 1: syntax error"),
    ],
)
def test_rejects(source: str, expected: str) -> None:
    violations = static_check(source)
    assert any(expected in v for v in violations), violations


def test_violations_name_lines_and_are_sorted() -> None:
    violations = static_check("import math\nimport os\nx = eval('1')\nimport sys\n")
    assert violations == [
        "line 2: import of 'os' is not allowed",
        "line 3: use of 'eval' is not allowed",
        "line 4: import of 'sys' is not allowed",
    ]


def test_static_check_requires_str() -> None:
    with pytest.raises(TypeError):
        static_check(b"import os")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("snippet", "error"),
    [
        ("import os", ImportError),
        ("import collections\nx = collections._sys", AttributeError),
        ("import re\nx = re.enum", AttributeError),  # re.enum.sys would reach sys
        ("x = eval('1')", NameError),
        ("x = open('/etc/hostname')", NameError),
        ("x = getattr((), '__class__')", AttributeError),
        ("from typing import get_type_hints", ImportError),
        ("import json\nsetattr(json, 'dumps', len)", AttributeError),
    ],
)
def test_restricted_namespace_blocks_escapes_even_without_static_check(snippet: str, error: type) -> None:
    namespace = {"__name__": "probe", "__builtins__": restricted_builtins()}
    with pytest.raises(error):
        exec(snippet, namespace)  # noqa: S102 - the point of the test


def test_restricted_namespace_allows_allowlisted_modules() -> None:
    namespace = {"__name__": "probe", "__builtins__": restricted_builtins()}
    exec("import collections.abc\nimport math\nfrom collections import abc\nx = math.sqrt(16)", namespace)  # noqa: S102
    assert namespace["x"] == 4.0


def test_canonical_json_sorts_keys_keeps_utf8_and_has_no_spaces() -> None:
    assert canonical_json({"b": [1, 2.5, None], "a": "é"}) == '{"a":"é","b":[1,2.5,null]}'.encode()


def test_state_hash_ignores_key_order() -> None:
    first = {"tables": {"t": [{"a": 1, "b": 2}]}, "meta": {"next_id": 2, "now": "x"}}
    second = {"meta": {"now": "x", "next_id": 2}, "tables": {"t": [{"b": 2, "a": 1}]}}
    assert state_hash(first) == state_hash(second)
    assert len(state_hash(first)) == 64
    assert state_hash(first) != state_hash({**first, "meta": {"next_id": 3, "now": "x"}})


@pytest.mark.parametrize("value", [{1: "int key"}, {"big": 2**70}, {"when": datetime.date(2024, 1, 1)}])
def test_canonical_json_rejects_non_json(value: object) -> None:
    with pytest.raises(TypeError):
        canonical_json(value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_float_is_refused_never_written_as_null(bad: float) -> None:
    for value in ({"x": bad}, {"t": [{"a": None, "b": [1.5, bad]}]}, [None, (bad,)]):
        with pytest.raises(TypeError, match="is not a JSON number"):
            canonical_json(value)
        with pytest.raises(TypeError, match="is not a JSON number"):
            state_hash(value)
    assert canonical_json({"x": None, "y": [1.5, -0.0]}) == b'{"x":null,"y":[1.5,-0.0]}'
