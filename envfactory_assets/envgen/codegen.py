"""Python source of an environment module (the contract in docs/design.md).

The module holds its table metadata as a literal, generic helpers over the in-memory state (CRUD,
search, count, actions, singletons, relations), and one small function per tool. A relation's table is keyed
in memory by its pair (``_pair_key``) and saved as its rows; deleting a row deletes its pairs. An action's
refused precondition, and the precondition an update, delete or action states in its description (a
ToolSpec's ``precondition``), raise ``PreconditionFailed``, which the sandbox provides to every environment
module. A transfer (``_transfer``) checks the amount and both rows before it writes either: a refused
transfer changes nothing. A side-effect action (``_side_effect``) leaves its row as it is and records one row
in the outbox table. A computed read (``_totals``, ``_figures``) derives its figures from the rows at each call.
Time and ids come from ``state["meta"]`` only, never the clock.
"""

from __future__ import annotations

import pprint
from typing import Any

from envfactory_assets.envgen.tools import KEYED_KINDS, RELATION_KINDS
from envfactory_assets.sources.names import singular

#: the body lines (in a generated helper with ``state``, ``table`` and ``values``) that check the values of a new
#: row: absent ones dropped, each against its field's schema, every required field given, each reference to a row
#: that exists; the row-creating helpers of both templates share them
_NEW_ROW_CHECKS = """    values = {k: v for k, v in values.items() if v is not None}
    for field, value in values.items():
        _check_value(table, field, value)
    for field in TABLES[table]["required"]:
        if field not in values:
            _fail(f"missing required argument {field!r}")
    _check_refs(state, table, values)
"""

_HELPERS = (
    '''
_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}


def _fail(message):
    raise ValueError(message)


def _check_value(table, field, value):
    _check_schema(field, TABLES[table]["fields"][field], value)


def _check_schema(field, schema, value):
    expected = _TYPES[schema["type"]]
    if isinstance(value, bool) and schema["type"] != "boolean":
        _fail(f"{field} must be {schema['type']}, got boolean")
    if not isinstance(value, expected):
        _fail(f"{field} must be {schema['type']}, got {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        _fail(f"{field} must be one of {schema['enum']}, got {value!r}")
    if "minimum" in schema and value < schema["minimum"]:
        _fail(f"{field} must be >= {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        _fail(f"{field} must be <= {schema['maximum']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        _fail(f"{field} must be at most {schema['maxLength']} characters")


def _check_row(table, row):
    meta = TABLES[table]
    if not isinstance(row, dict):
        _fail(f"{table}: row must be an object")
    key = row.get(meta["key"])
    if not isinstance(key, str) or not key:
        _fail(f"{table}: row without a string {meta['key']}")
    if not isinstance(row.get("created_at"), str):
        _fail(f"{table} {key}: created_at must be a string")
    for field, value in row.items():
        if field in (meta["key"], "created_at"):
            continue
        if field not in meta["fields"]:
            _fail(f"{table} {key}: unknown field {field!r}")
        _check_value(table, field, value)
    for field in meta["required"]:
        if field not in row:
            _fail(f"{table} {key}: missing required field {field!r}")


def _pair_key(parent, member):
    # the length prefix keeps two pairs apart whatever their ids hold
    return f"{len(parent)}:{parent}:{member}"


def _check_pair(table, row):
    rel = TABLES[table]["relation"]
    fields = (rel["parent"], rel["member"], "created_at")
    if not isinstance(row, dict) or set(row) != set(fields):
        _fail(f"{table}: a pair must be an object with exactly {list(fields)}")
    for field in fields:
        if not isinstance(row[field], str) or not row[field]:
            _fail(f"{table}: {field} must be a non-empty string")
    return _pair_key(row[rel["parent"]], row[rel["member"]])


def _what(table, row, key):
    relation = TABLES[table].get("relation")
    if relation:
        return f"pair {row[relation['parent']]!r}, {row[relation['member']]!r}"
    return f"{TABLES[table]['key']} {key!r}"


def load(data):
    """Saved state -> in-memory state (tables keyed by row id); raises ValueError if invalid."""
    if not isinstance(data, dict) or set(data) != {"tables", "meta"}:
        _fail("state must be an object with exactly 'tables' and 'meta'")
    meta = data["meta"]
    if not isinstance(meta, dict) or not isinstance(meta.get("now"), str):
        _fail("meta.now must be a string")
    if not isinstance(meta.get("next_id"), int) or isinstance(meta.get("next_id"), bool) or meta["next_id"] < 1:
        _fail("meta.next_id must be a positive integer")
    if not isinstance(meta.get("seed"), int):
        _fail("meta.seed must be an integer")
    tables = data["tables"]
    if not isinstance(tables, dict) or set(tables) != set(TABLES):
        _fail(f"tables must be exactly {sorted(TABLES)}")
    state = {"tables": {}, "meta": dict(meta)}
    for table, rows in tables.items():
        if not isinstance(rows, list):
            _fail(f"{table} must be a list of rows")
        relation = TABLES[table].get("relation")
        keyed = {}
        for row in rows:
            if relation:
                key = _check_pair(table, row)
            else:
                _check_row(table, row)
                key = row[TABLES[table]["key"]]
            if key in keyed:
                _fail(f"{table}: duplicate {_what(table, row, key)}")
            keyed[key] = dict(row)
        if TABLES[table].get("singleton") and len(keyed) != 1:
            _fail(f"{table} must hold exactly one row")
        state["tables"][table] = keyed
    for table, meta_t in TABLES.items():
        for field, target in meta_t["foreign_keys"].items():
            for row in state["tables"][table].values():
                if field in row and row[field] not in state["tables"][target]:
                    _fail(f"{table}: {field} {row[field]!r} references no row of {target}")
    return state


def save(state):
    """In-memory state -> saved state; save(load(x)) == x."""
    return {"tables": {t: [dict(r) for r in rows.values()] for t, rows in state["tables"].items()},
            "meta": dict(state["meta"])}


def _new_id(state, table):
    # an id a loaded state holds already is passed over: a new row never overwrites one
    while True:
        number = state["meta"]["next_id"]
        state["meta"]["next_id"] = number + 1
        key = f"{TABLES[table]['prefix']}_{number:05d}"
        if key not in state["tables"][table]:
            return key


def _row(state, table, key):
    if not isinstance(key, str):
        _fail(f"{TABLES[table]['key']} must be a string")
    row = state["tables"][table].get(key)
    if row is None:
        raise LookupError(f"no {table} row with {TABLES[table]['key']} {key!r}")
    return row


def _check_refs(state, table, values):
    for field, target in TABLES[table]["foreign_keys"].items():
        if values.get(field) is not None and values[field] not in state["tables"][target]:
            raise LookupError(f"{field} {values[field]!r} references no row of {target}")


def _page_size(limit):
    if limit is None:
        return 20
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        _fail("limit must be an integer between 1 and 100")
    return limit


def _filtered(state, table, filters):
    active = {k: v for k, v in filters.items() if v is not None}
    for field, value in active.items():
        _check_value(table, field, value)
    return [r for r in state["tables"][table].values() if all(r.get(k) == v for k, v in active.items())]


def _list(state, table, filters, limit):
    size = _page_size(limit)
    rows = _filtered(state, table, filters)
    return {"items": [dict(r) for r in rows[:size]], "total": len(rows)}


def _get(state, table, key):
    return dict(_row(state, table, key))


def _create(state, table, values):
'''
    + _NEW_ROW_CHECKS
    + """    key = _new_id(state, table)
    row = {TABLES[table]["key"]: key, **values, "created_at": state["meta"]["now"]}
    state["tables"][table][key] = row
    return dict(row)


def _current(table, row, field):
    # an absent flag holds its default, else is off: unarchiving a row never archived is refused
    current = row.get(field)
    if current is None and TABLES[table]["fields"][field]["type"] == "boolean":
        current = TABLES[table]["fields"][field].get("default", False)
    return current


def _require(table, key, row, precondition):
    # the precondition the spec states: (field, values that refuse the call, the row in words, the verb)
    if precondition is None:
        return
    field, refused, thing, verb = precondition
    current = _current(table, row, field)
    if current in refused:
        raise PreconditionFailed(f"cannot {verb} {thing} {key!r} while its {field.replace('_', ' ')} is {current}")


def _update(state, table, key, values, precondition=None):
    row = _row(state, table, key)
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        _fail("nothing to update: give at least one field")
    for field, value in values.items():
        _check_value(table, field, value)
    _check_refs(state, table, values)
    _require(table, key, row, precondition)
    new_row = {**row, **values}
    state["tables"][table][key] = new_row
    return dict(new_row)


def _matches(row, needle):
    return any(isinstance(v, str) and needle in v.casefold() for k, v in row.items()
               if k != "created_at" and not k.endswith("_id"))


def _search(state, table, text, scope, limit, offset):
    if not isinstance(text, str) or not text.strip():
        _fail("query must be a non-empty string")
    if len(text) > 200:
        _fail("query must be at most 200 characters")
    if offset is None:
        offset = 0
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        _fail("offset must be a non-negative integer")
    size = _page_size(limit)
    needle = text.strip().casefold()
    rows = [r for r in _filtered(state, table, scope) if _matches(r, needle)]
    return {"items": [dict(r) for r in rows[offset:offset + size]], "total": len(rows)}


def _count(state, table, filters):
    return {"count": len(_filtered(state, table, filters))}


def _action(state, table, key, field, value, blocked, stamp, words, precondition=None):
    row = _row(state, table, key)
    current = _current(table, row, field)
    if current == value:
        raise PreconditionFailed(f"{words[0]} {key!r} is already {words[1]}")
    if current in blocked:
        raise PreconditionFailed(f"cannot {words[2]} {words[0]} {key!r}: it is {current}")
    _require(table, key, row, precondition)
    new_row = {**row, field: value}
    if stamp is not None:
        new_row[stamp] = state["meta"]["now"]
    state["tables"][table][key] = new_row
    return dict(new_row)


def _the_one(state, table):
    rows = list(state["tables"][table].values())
    if len(rows) != 1:
        raise LookupError(f"{table} holds {len(rows)} rows, not one")
    return rows[0]


def _get_one(state, table):
    return dict(_the_one(state, table))


def _update_one(state, table, values):
    return _update(state, table, _the_one(state, table)[TABLES[table]["key"]], values)


def _delete(state, table, key, precondition=None):
    _require(table, key, _row(state, table, key), precondition)
    pairs = []
    for other, meta_t in TABLES.items():
        for field, target in meta_t["foreign_keys"].items():
            if target != table:
                continue
            refs = [k for k, r in state["tables"][other].items() if r.get(field) == key]
            if refs and not meta_t.get("relation"):
                _fail(f"cannot delete {key!r}: rows of {other} still reference it")
            pairs += [(other, k) for k in refs]
    for other, k in pairs:  # a row's memberships go with it
        del state["tables"][other][k]
    del state["tables"][table][key]
    return {TABLES[table]["key"]: key, "deleted": True}


def _pair_of(state, table, parent, member):
    meta = TABLES[table]
    rel = meta["relation"]
    for field, value in ((rel["parent"], parent), (rel["member"], member)):
        if not isinstance(value, str):
            _fail(f"{field} must be a string")
        target = meta["foreign_keys"][field]
        if value not in state["tables"][target]:
            raise LookupError(f"no {target} row with {TABLES[target]['key']} {value!r}")
    return _pair_key(parent, member)


def _relation_add(state, table, parent, member, idempotent, words):
    key = _pair_of(state, table, parent, member)
    rows = state["tables"][table]
    if key in rows:
        if idempotent:
            return dict(rows[key])
        raise PreconditionFailed(f"{words[1]} {member!r} is already a {words[2]} of {words[0]} {parent!r}")
    rel = TABLES[table]["relation"]
    row = {rel["parent"]: parent, rel["member"]: member, "created_at": state["meta"]["now"]}
    rows[key] = row
    return dict(row)


def _relation_remove(state, table, parent, member, words):
    key = _pair_of(state, table, parent, member)
    rows = state["tables"][table]
    if key not in rows:
        raise LookupError(f"{words[1]} {member!r} is not a {words[2]} of {words[0]} {parent!r}")
    del rows[key]
    rel = TABLES[table]["relation"]
    return {rel["parent"]: parent, rel["member"]: member, "removed": True}


def _amount(table, field, amount):
    typ = TABLES[table]["fields"][field]["type"]
    if isinstance(amount, bool) or not isinstance(amount, _TYPES[typ]):
        _fail(f"amount must be {typ}, got {type(amount).__name__}")
    # amount - amount is not 0 for infinities and NaN
    if amount - amount != 0 or not amount > 0:
        _fail(f"amount must be a finite number greater than 0, got {amount!r}")
    # a balance keeps 9 decimals: a finer amount would be rounded apart on the two rows (the sum drifts) or
    # vanish (1e-10 moves nothing)
    if round(amount, 9) != amount:
        _fail(f"amount may have at most 9 decimals, got {amount!r}")


# 2**53, the largest integer JSON carries exactly (RFC 7493, I-JSON): past it a float balance soon reaches inf
# and an integer one 64 bits, neither of which a state can save, nor can a total over the rows be sent back
_BALANCE_LIMIT = 9007199254740992


def _moved(table, key, row, field, change, words):
    # the row's balance after adding change (negative: taking), refused beyond the field's bounds
    schema = TABLES[table]["fields"][field]
    held = row.get(field)
    held = 0 if held is None else held
    new = held + change
    if isinstance(new, float):
        new = round(new, 9)  # 288.77 - 80.48 is 208.29, not 208.28999999999996
    said = field.replace("_", " ")
    if "minimum" in schema and new < schema["minimum"]:
        move = "withdrawal" if words[1] == "withdraw" else words[1]
        raise PreconditionFailed(
            f"insufficient {said}: {words[0]} {key!r} holds only {held}; a {move} of {abs(change)} would leave {new}"
        )
    if "maximum" in schema and new > schema["maximum"]:
        raise PreconditionFailed(f"{said} limit: {words[0]} {key!r} holds {held}, at most {schema['maximum']}")
    if abs(new) > _BALANCE_LIMIT and abs(new) > abs(held):
        raise PreconditionFailed(f"{said} limit: {words[0]} {key!r} holds {held}, at most {_BALANCE_LIMIT}")
    return new


def _transfer(state, table, key, to, amount, field, words):
    _amount(table, field, amount)
    rows = state["tables"][table]
    source = _row(state, table, key)
    if words[1] == "deposit":
        rows[key] = {**source, field: _moved(table, key, source, field, amount, words)}
        return dict(rows[key])
    if words[1] == "transfer":  # the arguments first: a wrong destination is refused whatever the amount
        if not isinstance(to, str):
            _fail(f"{words[2]} must be a string")
        if to == key:
            _fail(f"cannot transfer from {words[0]} {key!r} to itself")
    left = _moved(table, key, source, field, -amount, words)
    if words[1] == "withdraw":
        rows[key] = {**source, field: left}
        return dict(rows[key])
    target = _row(state, table, to)
    received = _moved(table, to, target, field, amount, words)
    rows[key] = {**source, field: left}
    rows[to] = {**target, field: received}
    return {"source": dict(rows[key]), "destination": dict(rows[to]), "amount": amount}


def _side_effect(state, table, key, verb, outbox, arguments, schemas, required=()):
    _row(state, table, key)
    given = {k: v for k, v in arguments.items() if v is not None}
    for name in required:
        if given.get(name) is None:
            _fail(f"missing required argument {name!r}")
    for name, value in given.items():
        _check_schema(name, schemas[name], value)
    record = _new_id(state, outbox)
    row = {TABLES[outbox]["key"]: record, "verb": verb, "target_table": table, "target_id": key,
           "arguments": repr(sorted(given.items())), "created_at": state["meta"]["now"]}
    state["tables"][outbox][record] = row
    return dict(row)


def _totals(state, table, scope, fields):
    # the rows of one parent: it must be named and be there (no parent's totals are not every parent's)
    for name, value in scope.items():
        if value is None:
            _fail(f"missing required argument {name!r}")
    rows = _filtered(state, table, scope)
    _check_refs(state, table, scope)
    out = {"count": len(rows)}
    for field in fields:
        total = sum(r[field] for r in rows if r.get(field) is not None)
        # 2 rows of 7047.57 sum to 14095.140000000001; the API states the total it holds, 14095.14
        out[f"total_{field}"] = round(total, 9) if isinstance(total, float) else total
    return out


def _figures(state, table, key, fields):
    row = _row(state, table, key)
    return {TABLES[table]["key"]: key, **{f: row[f] for f in fields if row.get(f) is not None}}


def _relation_list(state, table, parent, limit):
    size = _page_size(limit)
    rel = TABLES[table]["relation"]
    refs = TABLES[table]["foreign_keys"]
    _row(state, refs[rel["parent"]], parent)
    members = state["tables"][refs[rel["member"]]]
    found = [members[r[rel["member"]]] for r in state["tables"][table].values() if r[rel["parent"]] == parent]
    return {"items": [dict(r) for r in found[:size]], "total": len(found)}
"""
)

_MCP_HELPERS = (
    """

def _is_json_type(value, kind):
    if kind == "integer":
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        return whole and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "null":
        return value is None
    return True


def _check_schema(schema, value, where):
    # the subset of JSON Schema that MCP servers declare their arguments in; formats and patterns are not checked
    if not isinstance(schema, dict):
        return
    if "const" in schema and value != schema["const"]:
        _fail(f"{where} must be {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        _fail(f"{where} must be one of {schema['enum']}, got {value!r}")
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is_json_type(value, k) for k in kinds):
            _fail(f"{where} must be {' or '.join(kinds)}, got {type(value).__name__}")
    members = schema.get("anyOf") or schema.get("oneOf")
    if members:
        problems = []
        for member in members:
            try:
                _check_schema(member, value, where)
                break
            except ValueError as exc:
                problems.append(str(exc))
        else:
            _fail(problems[0] if len(problems) == 1 else f"{where} matches none of its allowed forms: {problems}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            _fail(f"{where} must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            _fail(f"{where} must be <= {schema['maximum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            _fail(f"{where} must be > {schema['exclusiveMinimum']}")
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            _fail(f"{where} must be < {schema['exclusiveMaximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            _fail(f"{where} must be at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            _fail(f"{where} must be at most {schema['maxLength']} characters")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            _fail(f"{where} must have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            _fail(f"{where} must have at most {schema['maxItems']} items")
        for index, item in enumerate(value):
            _check_schema(schema.get("items"), item, f"{where}[{index}]")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                _fail(f"{where}: missing required property {name!r}")
        for name, item in value.items():
            if name in props:
                _check_schema(props[name], item, f"{where}.{name}")
            elif schema.get("additionalProperties") is False:
                _fail(f"{where}: unknown property {name!r}")
            else:
                _check_schema(schema.get("additionalProperties"), item, f"{where}.{name}")


def _whole(value, name, least):
    number = int(value)
    if number != value or number < least:
        _fail(f"{name} must be a whole number >= {least}")
    return number


def _named(state, table, field, value):
    # a row by its id, or by a field whose value names one row (the table keeps that field unique)
    if field is None:
        return _row(state, table, value)
    for row in state["tables"][table].values():
        if row.get(field) == value:
            return row
    raise LookupError(f"no {table} row with {field} {value!r}")


def _in_scope(table, row, scope):
    for field, value in scope.items():
        if row.get(field) != value:
            key = TABLES[table]["key"]
            raise LookupError(f"{key} {row[key]!r} has {field} {row.get(field)!r}, not {value!r}")


def _creatable(state, table, values, taken):
"""
    + _NEW_ROW_CHECKS
    + """    for field in TABLES[table].get("unique", []):
        if field in values:
            held = taken.setdefault(field, {r.get(field) for r in state["tables"][table].values()})
            if values[field] in held:
                raise PreconditionFailed(f"{table} already has a row with {field} {values[field]!r}")
            held.add(values[field])
    return values


def _mcp(state, name, args):
    # a tool with the real MCP server's signature: every argument is checked against the server's schema, then
    # does what its role in MCP_SIGNATURES says to the tables
    spec = MCP_SIGNATURES[name]
    schema, params, table, kind = spec["schema"], spec["params"], spec["table"], spec["kind"]
    props = schema.get("properties") or {}
    for arg in args:
        if arg not in params:
            _fail(f"unknown argument {arg!r}; {name} takes {sorted(params)}")
    for arg in schema.get("required") or []:
        if args.get(arg) is None:
            _fail(f"missing required argument {arg!r}")
    for arg, value in args.items():
        _check_schema(props.get(arg), value, arg)
    values, scope, named, many, batch = {}, {}, None, None, None
    size, offset, page, text, after, before = None, 0, None, None, None, None
    for arg, value in args.items():
        role, field = params[arg]["role"], params[arg].get("field")
        if value is None or role == "context":
            continue
        if role == "key":
            named = (field, value)
        elif role == "keys":
            many = [(field, v) for v in value]
        elif role == "scope":
            scope[field] = value
        elif role == "field":
            values[field] = value
        elif role == "rows":
            fields = params[arg]["fields"]
            batch = [{fields[k]: v for k, v in item.items() if k in fields} for item in value]
        elif role == "limit":
            size = min(_whole(value, arg, 1), 100)
        elif role == "offset":
            offset = _whole(value, arg, 0)
        elif role == "page":
            page = _whole(value, arg, 1)
        elif role == "query":
            if not value.strip():
                _fail(f"{arg} must not be blank")
            text = value.strip().casefold()
        elif role == "after":
            after = value
        elif role == "before":
            before = value
    key = TABLES[table]["key"]
    if kind in ("list", "search", "count"):
        rows = _filtered(state, table, values)
        if text is not None:
            rows = [r for r in rows if _matches(r, text)]
        if after is not None:
            rows = [r for r in rows if r["created_at"] >= after]
        if before is not None:
            rows = [r for r in rows if r["created_at"] <= before]
        if kind == "count":
            return {"count": len(rows)}
        if size is None:  # the server's own default where its schema states one
            stated = [props.get(a, {}).get("default") for a, p in params.items() if p["role"] == "limit"]
            size = min(stated[0], 100) if stated and isinstance(stated[0], int) and stated[0] >= 1 else 20
        if page is not None:
            offset = (page - 1) * size
        return {"items": [dict(r) for r in rows[offset:offset + size]], "total": len(rows)}
    if kind == "create":
        taken = {}
        items = batch if batch is not None else [{}]
        checked = [_creatable(state, table, {**values, **item}, taken) for item in items]
        created = []
        for row_values in checked:
            new_key = _new_id(state, table)
            row = {key: new_key, **row_values, "created_at": state["meta"]["now"]}
            state["tables"][table][new_key] = row
            created.append(dict(row))
        return {"items": created, "total": len(created)} if batch is not None else created[0]
    if named is None and many is None:
        _fail(f"{name} needs the argument that names the {table} row")
    rows = [_named(state, table, f, v) for f, v in (many if many is not None else [named])]
    for row in rows:
        _in_scope(table, row, scope)
    if kind == "get":
        found = [dict(r) for r in rows]
        return {"items": found, "total": len(found)} if many is not None else found[0]
    if kind == "update":
        return _update(state, table, rows[0][key], values)
    done = [_delete(state, table, k) for k in dict.fromkeys(r[key] for r in rows)]
    return {"items": done, "total": len(done)} if many is not None else done[0]
"""
)


def _signature(tool: dict[str, Any]) -> str:
    schema = tool["input_schema"]
    required = [p for p in schema["properties"] if p in schema.get("required", [])]
    optional = [p for p in schema["properties"] if p not in required]
    return ", ".join(["state", *required, *(f"{p}=None" for p in optional)])


def _precondition(tool: dict[str, Any]) -> str:
    """The ``precondition`` argument of a tool's helper call (empty when the tool states none): ``(field, refused
    values, the row in words, the verb)``."""
    stated = tool.get("precondition")
    if not stated:
        return ""
    act = tool.get("action")
    thing = act["thing"] if act else singular(tool["table"]).replace("_", " ")
    verb = act["verb"] if act else tool["kind"]
    return f", {(stated['field'], tuple(stated['refused']), thing, verb)!r}"


def _body(tool: dict[str, Any], key: str) -> str:
    table, kind = tool["table"], tool["kind"]
    props = list(tool["input_schema"]["properties"])
    pre = _precondition(tool)
    if kind == "list":
        filters = ", ".join(f"{p!r}: {p}" for p in props if p != "limit")
        return f"return _list(state, {table!r}, {{{filters}}}, limit)"
    if kind == "search":
        scope = ", ".join(f"{p!r}: {p}" for p in props if p not in ("query", "limit", "offset"))
        return f"return _search(state, {table!r}, query, {{{scope}}}, limit, offset)"
    if kind == "count":
        filters = ", ".join(f"{p!r}: {p}" for p in props)
        return f"return _count(state, {table!r}, {{{filters}}})"
    if kind == "action":
        act = tool["action"]
        words = (act["thing"], act["state"], act["verb"])
        return (
            f"return _action(state, {table!r}, {key}, {act['field']!r}, {act['value']!r}, "
            f"{tuple(act['blocked'])!r}, {act['stamp']!r}, {words!r}{pre})"
        )
    if kind == "transfer":
        tr = tool["transfer"]
        to = tr["destination"] or "None"
        words = (tr["thing"], tr["verb"], *([tr["destination"]] if tr["destination"] else []))
        return f"return _transfer(state, {table!r}, {key}, {to}, {tr['amount']}, {tr['field']!r}, {words!r})"
    if kind == "computed_read":
        fields = tuple(tool["computed"]["fields"])
        if tool["computed"]["scope"] == "item":
            return f"return _figures(state, {table!r}, {props[0]}, {fields!r})"
        scope = ", ".join(f"{p!r}: {p}" for p in props)
        return f"return _totals(state, {table!r}, {{{scope}}}, {fields!r})"
    if kind == "side_effect":
        se = tool["side_effect"]
        given = ", ".join(f"{p!r}: {p}" for p in se["arguments"])
        required = tuple(p for p in tool["input_schema"].get("required", []) if p in se["arguments"])
        return (
            f"return _side_effect(state, {table!r}, {key}, {se['verb']!r}, {se['outbox']!r}, {{{given}}}, "
            f"{se['arguments']!r}, {required!r})"
        )
    if kind in RELATION_KINDS:
        rel = tool["relation"]
        parent, member = rel["parent_field"], rel["member_field"]
        words = (rel["parent_thing"], rel["member_thing"], rel["role"])
        if kind == "relation_list":
            return f"return _relation_list(state, {table!r}, {parent}, limit)"
        if kind == "relation_add":
            return f"return _relation_add(state, {table!r}, {parent}, {member}, {rel['idempotent']!r}, {words!r})"
        return f"return _relation_remove(state, {table!r}, {parent}, {member}, {words!r})"
    if tool.get("singleton"):
        values = ", ".join(f"{p!r}: {p}" for p in props)
        return (
            f"return _get_one(state, {table!r})"
            if kind == "get"
            else f"return _update_one(state, {table!r}, {{{values}}})"
        )
    if kind == "get":
        return f"return _get(state, {table!r}, {key})"
    if kind == "delete":
        return f"return _delete(state, {table!r}, {key}{pre})"
    values = ", ".join(f"{p!r}: {p}" for p in props if p != key)
    if kind == "create":
        return f"return _create(state, {table!r}, {{{values}}})"
    return f"return _update(state, {table!r}, {key}, {{{values}}}{pre})"


def _mcp_signature(tool: dict[str, Any]) -> dict[str, Any]:
    """What a tool with a real MCP signature needs at run time (:mod:`envfactory_assets.envgen.mcp_signatures`):
    the server's input schema, each parameter's role, its table and kind."""
    binding = tool["mcp_binding"]
    return {"schema": tool["input_schema"], "params": binding["params"], "table": tool["table"], "kind": tool["kind"]}


def generate_source(env_id: str, provenance: str, tables: dict[str, Any], tools: list[dict[str, Any]]) -> str:
    """Render the environment module for ``tools`` over ``tables``.

    ``tables`` maps table name to ``{"key", "prefix", "fields": {name: schema}, "required": [...],
    "foreign_keys": {field: table}}``; ``provenance`` is one line naming the source resource.
    """
    # Spec text (titles, licences, summaries) is untrusted: it enters the source only through repr().
    docstring = (
        f"Environment {env_id}: {provenance}\n\nGenerated by envfactory_assets.envgen (programmatic "
        "builder). State: tables of rows keyed by id; time and ids come from state['meta'], never "
        "from the clock."
    )
    lines = [
        repr(docstring),
        "",
        "TABLES = " + pprint.pformat(tables, width=110, sort_dicts=True),
        _HELPERS,
    ]
    signatures = {t["name"]: _mcp_signature(t) for t in tools if t.get("mcp_binding")}
    if signatures:
        lines += ["MCP_SIGNATURES = " + pprint.pformat(signatures, width=110, sort_dicts=True), _MCP_HELPERS]
    for tool in tools:
        if tool.get("mcp_binding"):
            lines += ["", f"def {tool['name']}(state, **args):", f"    {tool['description']!r}"]
            lines += [f"    return _mcp(state, {tool['name']!r}, args)", ""]
            continue
        keyed = tool["kind"] in KEYED_KINDS and not tool.get("singleton")
        key = next(iter(tool["input_schema"]["properties"])) if keyed else ""
        lines += [
            "",
            f"def {tool['name']}({_signature(tool)}):",
            f"    {tool['description']!r}",
            f"    {_body(tool, key)}",
            "",
        ]
    return "\n".join(lines)
