"""Adding a document prints the partition key it is stored under (from the document, not its file name), and a
``--partition`` that names a file says which key that file has."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from envfactory_assets.cli import main as cli_main
from envfactory_assets.sources.adding import file_named_partition

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"


def test_adding_a_document_prints_its_partition_key_and_a_file_name_partition_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    mine = tmp_path / "my_api.json"
    shutil.copyfile(FIXTURES / "bookshop.json", mine)  # info.x-providerName: bookshop.example
    assert cli_main(["add", str(mine)]) == 0
    out = capsys.readouterr().out
    assert "partition key: bookshop_example (from its provider 'bookshop.example', not the file name)" in out
    assert "--partition bookshop_example" in out
    stored = tmp_path / "home" / "user_resources" / "my_api.json"
    assert stored.read_bytes() == mine.read_bytes()
    # the file name given where the key belongs: refused before anything runs, naming the key
    assert cli_main(["run", "--select", "environments", "--partition", "my_api"]) == 2
    err = capsys.readouterr().err
    assert "--partition my_api names the file user_resources/my_api.json, not a partition key" in err
    assert "its partition key is bookshop_example" in err
    # a document source_resources would reject is not added, and says why
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"openapi": "3.0.0", "paths": "not an object"}))
    assert cli_main(["add", str(broken)]) == 2
    assert "was not added: source_resources would reject it" in capsys.readouterr().err
    assert not (tmp_path / "home" / "user_resources" / "broken.json").exists()
    # a second file whose key is already taken in the folder is refused, the first one kept
    again = tmp_path / "again.json"
    shutil.copyfile(FIXTURES / "bookshop.json", again)
    assert cli_main(["add", str(again)]) == 2
    assert "duplicate_key" in capsys.readouterr().err and stored.exists()


def test_a_partition_that_is_a_key_or_an_unknown_name_gets_no_file_hint():
    keys = {"user_resources/my_api.json": "acme__billing", "apis/acme/billing.yaml": "acme__billing"}
    assert file_named_partition("acme__billing", keys) is None
    assert file_named_partition("something_else", keys) is None
    assert "its partition key is acme__billing" in file_named_partition("my_api.json", keys)
    assert "names the file apis/acme/billing.yaml" in file_named_partition("billing", keys)
