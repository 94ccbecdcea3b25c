"""The gate's paging check: a limit (and an offset where the tool takes one) that cuts the matching rows."""

from envfactory_assets.envgen.verify import paged_arguments

ENV = {"tables": {"t": {"key": "t_id", "fields": {"name": {"type": "string"}}}}}


def _state(n):
    return {"tables": {"t": [{"t_id": f"t{i}", "name": f"Alpha{i} word"} for i in range(n)]}}


def _search(props):
    return {
        "kind": "search",
        "table": "t",
        "input_schema": {"properties": {"query": {}, "limit": {"type": "integer", "maximum": 100}, **props}},
    }


def test_a_search_without_an_offset_parameter_is_paged_by_its_limit_alone():
    for n in (2, 3, 5):
        paged = paged_arguments(ENV, _search({}), _state(n), {"query": "x", "offset": 1, "limit": 5})
        assert "offset" not in paged and paged["limit"] == n - 1  # the window leaves the last row out


def test_a_search_with_an_offset_skips_the_first_row_once_three_match():
    args = {"query": "x", "offset": 1, "limit": 5}
    assert paged_arguments(ENV, _search({"offset": {}}), _state(2), args)["offset"] == 0
    paged = paged_arguments(ENV, _search({"offset": {}}), _state(4), args)
    assert (paged["offset"], paged["limit"]) == (1, 2)
    assert paged_arguments(ENV, _search({"offset": {}}), _state(1), args) is None
