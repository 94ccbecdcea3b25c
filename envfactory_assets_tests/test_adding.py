"""Adding a document prints the partition key it is stored under (from the document, not its file name), and a
``--partition`` that names a file says which key that file has."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from envfactory_assets.cli import main as cli_main
from envfactory_assets.sources.adding import file_named_partition
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.store.db import Store

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


def test_adding_over_a_symbolic_link_in_the_user_folder_is_refused_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    folder = tmp_path / "home" / "user_resources"
    folder.mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text('{"mine": "not a document"}')
    (folder / "link.json").symlink_to(outside)
    new = tmp_path / "src" / "link.json"
    new.parent.mkdir()
    shutil.copyfile(FIXTURES / "bookshop.json", new)
    assert cli_main(["add", str(new)]) == 2
    assert "link.json is a symbolic link" in capsys.readouterr().err
    assert outside.read_text() == '{"mine": "not a document"}'
    assert (folder / "link.json").is_symlink()
    assert sorted(p.name for p in folder.iterdir()) == ["link.json"]


def test_a_folder_or_a_fifo_is_not_a_regular_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    (tmp_path / "dir.json").mkdir()
    os.mkfifo(tmp_path / "pipe.json")
    for name in ("dir.json", "pipe.json"):
        assert cli_main(["add", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert "not a regular file" in err and "no such file" not in err
    assert list((tmp_path / "home" / "user_resources").iterdir()) == []


def test_a_file_over_the_size_limit_is_refused_before_a_byte_is_copied(tmp_path):
    # a sparse 10 MB file under a 1 MB file-size limit: copying it first would fail with "File too large"
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(10_000_000)
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000));"
        "from envfactory_assets.cli import main; sys.exit(main(['add', sys.argv[1]]))"
    )
    env = {**os.environ, "ENVFACTORY_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", code, str(big)], env=env, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "too_large: 10000000 bytes > limit 4000000" in done.stderr
    assert list((tmp_path / "home" / "user_resources").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["user_resources"]  # no staging left behind


def test_a_key_the_corpus_holds_is_refused_naming_the_corpus_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copyfile(FIXTURES / "bookshop.json", corpus / "bookshop.json")
    accepted, _ = scan_rows(corpus)
    assert [r["resource_key"] for r in accepted] == ["bookshop_example"]
    Store(tmp_path / "home" / "envfactory.duckdb").replace_current("source_resources", accepted)
    mine = tmp_path / "mine_dns.json"
    shutil.copyfile(FIXTURES / "bookshop.json", mine)
    assert cli_main(["add", str(mine)]) == 2
    err = capsys.readouterr().err
    assert "duplicate_key: its partition key bookshop_example is already the key of" in err
    assert str(corpus / "bookshop.json") in err
    assert not (tmp_path / "home" / "user_resources" / "mine_dns.json").exists()


def test_a_key_from_the_file_name_is_said_to_come_from_it_and_control_characters_are_escaped(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    document = json.loads((FIXTURES / "bookshop.json").read_text())
    del document["info"]["x-providerName"]
    document["info"].pop("x-serviceName", None)
    mine = tmp_path / "odd\x1bname.json"
    mine.write_text(json.dumps(document))
    assert cli_main(["add", str(mine)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "odd\\x1bname.json" in out
    assert "not the file name" not in out and "(from its file name" in out
