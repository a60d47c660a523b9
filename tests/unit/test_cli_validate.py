"""``oarlock validate`` and ``oarlock upgrade``: in-process through ``oarlock.cli.main`` and
as a real subprocess (``python -m oarlock.cli``)."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oarlock.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ALL_EXAMPLES = sorted(EXAMPLES.rglob("*.json"))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def subprocess_cli(*argv: str, stdin: bytes | None = None, cwd: Path = ROOT) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "oarlock.cli", *argv],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def feed_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")
    return path


def load(name: str) -> dict[str, Any]:
    value = json.loads((EXAMPLES / name).read_text("utf-8"))
    assert isinstance(value, dict)
    return value


@pytest.fixture
def bad_run(tmp_path: Path) -> Path:
    doc = load("runs/refund-waiting-approval.json")
    doc["turns"] = 7  # R8
    return write_json(tmp_path / "bad-run.json", doc)


# --------------------------------------------------------------------------- validate: exit 0


def test_examples_folder_is_valid(capsys):
    code, out, err = run_cli(capsys, "validate", str(EXAMPLES))
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[-1] == f"{len(ALL_EXAMPLES)} valid, 0 invalid"
    for path in ALL_EXAMPLES:
        assert any(line.startswith(f"{path}: valid (") for line in lines), path
    assert f"{EXAMPLES / 'runs/legacy-oar-0.1.json'}: valid (run, oar/0.1)" in lines
    assert f"{EXAMPLES / 'receipts/lookup-denied.json'}: valid (receipt)" in lines
    assert f"{EXAMPLES / 'invocations/lookup-read.json'}: valid (invocation)" in lines
    assert err == ""


def test_examples_folder_is_valid_in_a_subprocess():
    proc = subprocess_cli("validate", "examples/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.decode().splitlines()[-1] == f"{len(ALL_EXAMPLES)} valid, 0 invalid"


def test_single_file_output_matches_the_readme(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, _ = run_cli(capsys, "validate", "examples/runs/refund-waiting-approval.json")
    assert code == 0
    assert out == (
        "examples/runs/refund-waiting-approval.json: valid (run, oar/0.2)\n1 valid, 0 invalid\n"
    )


def test_several_paths_files_and_folders(capsys):
    code, out, _ = run_cli(
        capsys,
        "validate",
        str(EXAMPLES / "receipts"),
        str(EXAMPLES / "runs/refund-completed.json"),
    )
    assert code == 0
    assert out.splitlines()[-1] == "4 valid, 0 invalid"


# --------------------------------------------------------------------------- validate: exit 1


def test_invalid_file(capsys, bad_run):
    code, out, _ = run_cli(capsys, "validate", str(bad_run))
    assert code == 1
    assert f"{bad_run}: invalid (run, oar/0.2)" in out
    assert "/turns  [R8]  turns is 7 but the document holds 2 assistant messages" in out
    assert out.splitlines()[-1] == "0 valid, 1 invalid"


def test_one_invalid_among_valid_fails_all(capsys, bad_run):
    code, out, _ = run_cli(capsys, "validate", str(EXAMPLES), str(bad_run))
    assert code == 1
    assert out.splitlines()[-1] == f"{len(ALL_EXAMPLES)} valid, 1 invalid"


def test_non_json_file(capsys, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 1
    assert f"{path}: invalid (unknown kind)" in out
    assert "[json]" in out
    assert "not JSON" in out


def test_json_array_file(capsys, tmp_path):
    path = tmp_path / "array.json"
    path.write_text("[1, 2, 3]", encoding="utf-8")
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 1
    assert "[json]" in out
    assert "JSON object" in out


def test_duplicate_keys_file(capsys, tmp_path):
    path = tmp_path / "dup.json"
    path.write_text('{"receiptHash": "a", "receiptHash": "b"}', encoding="utf-8")
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 1
    assert "duplicate" in out


def test_not_utf8_file(capsys, tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"a": "\xe9"}')
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 1
    assert "[json]" in out


def test_unknown_kind_object(capsys, tmp_path):
    path = write_json(tmp_path / "thing.json", {"hello": "world"})
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 1
    assert "[kind]" in out


def test_folder_without_json_documents(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("{}", encoding="utf-8")
    code, _, err = run_cli(capsys, "validate", str(tmp_path))
    assert code == 1
    assert "no *.json" in err


def test_invalid_file_in_a_subprocess(bad_run):
    proc = subprocess_cli("validate", str(bad_run))
    assert proc.returncode == 1
    assert b"[R8]" in proc.stdout


# --------------------------------------------------------------------------- validate: exit 2


def test_no_path_is_a_usage_error(capsys):
    code, out, err = run_cli(capsys, "validate")
    assert code == 2
    assert out == ""
    assert "PATH" in err


def test_unknown_option_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["validate", "--frobnicate", str(EXAMPLES)])
    assert info.value.code == 2
    assert "--frobnicate" in capsys.readouterr().err


def test_unknown_kind_value_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["validate", "--kind", "policy", str(EXAMPLES)])
    assert info.value.code == 2


def test_missing_path_is_a_usage_error(capsys, tmp_path):
    missing = tmp_path / "nope.json"
    code, out, err = run_cli(capsys, "validate", str(EXAMPLES), str(missing))
    assert code == 2
    assert out == ""  # nothing is checked when a path is wrong
    assert str(missing) in err


@pytest.mark.parametrize(
    "argv", [("validate",), ("validate", "--nope", "examples"), ("validate", "no/such/path")]
)
def test_usage_errors_in_a_subprocess(argv):
    proc = subprocess_cli(*argv)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


# --------------------------------------------------------------------------- stdin


def test_dash_reads_stdin(capsys, monkeypatch):
    feed_stdin(monkeypatch, (EXAMPLES / "receipts/refund-uncertain.json").read_bytes())
    code, out, _ = run_cli(capsys, "validate", "-")
    assert code == 0
    assert out.splitlines() == ["-: valid (receipt)", "1 valid, 0 invalid"]


def test_dash_reads_invalid_stdin(capsys, monkeypatch):
    feed_stdin(monkeypatch, b"[]")
    code, out, _ = run_cli(capsys, "validate", "-")
    assert code == 1
    assert "-: invalid" in out


def test_dash_reads_stdin_in_a_subprocess():
    data = (EXAMPLES / "invocations/refund-spend.json").read_bytes()
    proc = subprocess_cli("validate", "--json", "-", stdin=data)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["valid"] is True
    assert report["files"] == [
        {"path": "-", "kind": "invocation", "valid": True, "errors": []}
    ]


# --------------------------------------------------------------------------- folders


def test_folder_recurses_into_json_files_only(capsys, tmp_path):
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    shutil.copy(EXAMPLES / "runs/refund-completed.json", tmp_path / "top.json")
    shutil.copy(EXAMPLES / "receipts/lookup-denied.json", nested / "deep.json")
    (nested / "ignored.txt").write_text("not json", encoding="utf-8")
    (nested / "ignored.json.bak").write_text("not json", encoding="utf-8")
    code, out, _ = run_cli(capsys, "validate", str(tmp_path))
    assert code == 0, out
    assert f"{tmp_path / 'top.json'}: valid (run, oar/0.2)" in out
    assert f"{nested / 'deep.json'}: valid (receipt)" in out
    assert "ignored" not in out
    assert out.splitlines()[-1] == "2 valid, 0 invalid"


def test_folder_finds_invalid_nested_file(capsys, tmp_path, bad_run):
    nested = tmp_path / "deeper" / "still"
    nested.mkdir(parents=True)
    shutil.move(bad_run, nested / "bad.json")
    code, out, _ = run_cli(capsys, "validate", str(tmp_path))
    assert code == 1
    assert f"{nested / 'bad.json'}: invalid" in out


# --------------------------------------------------------------------------- --json


def test_json_report(capsys, tmp_path, bad_run):
    array = tmp_path / "array.json"
    array.write_text("[]", encoding="utf-8")
    good = EXAMPLES / "runs/legacy-oar-0.1.json"
    code, out, _ = run_cli(capsys, "validate", "--json", str(good), str(bad_run), str(array))
    assert code == 1
    report = json.loads(out)  # exactly one JSON document on stdout
    assert report["valid"] is False
    files = report["files"]
    assert [f["path"] for f in files] == [str(good), str(bad_run), str(array)]
    assert files[0] == {
        "path": str(good),
        "kind": "run",
        "valid": True,
        "format": "oar/0.1",
        "errors": [],
    }
    assert files[1]["valid"] is False
    assert files[1]["kind"] == "run"
    assert files[1]["errors"] == [
        {
            "pointer": "/turns",
            "rule": "R8",
            "message": "turns is 7 but the document holds 2 assistant messages",
        }
    ]
    assert files[2]["kind"] is None
    assert [(e["pointer"], e["rule"]) for e in files[2]["errors"]] == [("", "json")]
    for f in files:
        for e in f["errors"]:
            assert set(e) == {"pointer", "rule", "message"}


def test_json_report_all_valid(capsys):
    code, out, _ = run_cli(capsys, "validate", "--json", str(EXAMPLES))
    assert code == 0
    report = json.loads(out)
    assert report["valid"] is True
    assert len(report["files"]) == len(ALL_EXAMPLES)
    assert all(f["valid"] and f["errors"] == [] for f in report["files"])


def test_json_report_keeps_non_ascii(capsys, tmp_path):
    doc = load("runs/refund-completed.json")
    doc["status"] = "épuisé"
    path = write_json(tmp_path / "x.json", doc)
    code, out, _ = run_cli(capsys, "validate", "--json", str(path))
    assert code == 1
    assert "épuisé" in out
    assert json.loads(out)["files"][0]["errors"][0]["pointer"] == "/status"


# --------------------------------------------------------------------------- --schema-only, --kind


def test_schema_only(capsys, bad_run):
    code, out, _ = run_cli(capsys, "validate", "--schema-only", str(bad_run))
    assert code == 0
    assert f"{bad_run}: valid (run, oar/0.2, schema only)" in out


def test_schema_only_still_fails_schema_errors(capsys, tmp_path):
    doc = load("runs/refund-completed.json")
    doc["status"] = "paused"
    path = write_json(tmp_path / "x.json", doc)
    code, out, _ = run_cli(capsys, "validate", "--schema-only", "--json", str(path))
    assert code == 1
    errors = json.loads(out)["files"][0]["errors"]
    assert [(e["pointer"], e["rule"]) for e in errors] == [("/status", "schema")]


def test_kind_forcing(capsys):
    invocation = str(EXAMPLES / "invocations/lookup-read.json")
    code, out, _ = run_cli(capsys, "validate", "--kind", "invocation", invocation)
    assert code == 0
    assert "valid (invocation)" in out
    code, out, _ = run_cli(capsys, "validate", "--kind", "receipt", "--json", invocation)
    assert code == 1
    entry = json.loads(out)["files"][0]
    assert entry["kind"] == "receipt"
    assert {e["rule"] for e in entry["errors"]} == {"schema"}


def test_kind_forcing_makes_an_unrecognisable_object_checkable(capsys, tmp_path):
    doc = load("receipts/lookup-denied.json")
    del doc["receiptHash"]  # no longer detectable as a receipt
    path = write_json(tmp_path / "r.json", doc)
    _, out, _ = run_cli(capsys, "validate", "--json", str(path))
    assert json.loads(out)["files"][0]["errors"][0]["rule"] == "kind"
    code, out, _ = run_cli(capsys, "validate", "--kind", "receipt", "--json", str(path))
    assert code == 1
    errors = json.loads(out)["files"][0]["errors"]
    assert [(e["pointer"], e["rule"]) for e in errors] == [("", "schema")]
    assert '"receiptHash"' in errors[0]["message"]


def test_kind_forcing_applies_to_non_json_too(capsys, tmp_path):
    path = tmp_path / "x.json"
    path.write_text("nope", encoding="utf-8")
    _, out, _ = run_cli(capsys, "validate", "--kind", "run", "--json", str(path))
    assert json.loads(out)["files"][0]["kind"] == "run"


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("oarlock ")


# --------------------------------------------------------------------------- upgrade


LEGACY = EXAMPLES / "runs/legacy-oar-0.1.json"
RESPONDED = EXAMPLES / "runs/responded-oar-0.2.json"


def assert_lossless_upgrade(original: dict[str, Any], upgraded: dict[str, Any]) -> None:
    assert original["format"] == "oar/0.1"
    assert upgraded["format"] == "oar/0.2"
    assert list(upgraded) == list(original)  # member order kept
    for key, value in original.items():
        if key != "format":
            assert upgraded[key] == value, key
            assert json.dumps(upgraded[key]) == json.dumps(value), key  # nested order too


def test_upgrade_to_stdout_is_lossless(capsys):
    original = json.loads(LEGACY.read_text("utf-8"))
    code, out, err = run_cli(capsys, "upgrade", str(LEGACY))
    assert code == 0, err
    assert out.endswith("}\n")
    upgraded = json.loads(out)
    assert_lossless_upgrade(original, upgraded)


def test_upgrade_keeps_unknown_members_and_number_types(capsys, tmp_path):
    doc = load("runs/legacy-oar-0.1.json")
    doc["x-vendor"] = {"nested": [1, 1.0, "é", None]}
    doc["usage"]["inputTokens"] = 1130.0
    doc["messages"][0]["x-note"] = "kept"
    path = write_json(tmp_path / "legacy.json", doc)
    code, out, _ = run_cli(capsys, "upgrade", str(path))
    assert code == 0
    upgraded = json.loads(out)
    assert_lossless_upgrade(doc, upgraded)
    assert isinstance(upgraded["usage"]["inputTokens"], float)
    assert isinstance(upgraded["x-vendor"]["nested"][0], int)
    assert "é" in out  # written as UTF-8, not escaped


def test_upgrade_output_file(capsys, tmp_path):
    source = tmp_path / "legacy.json"
    shutil.copy(LEGACY, source)
    target = tmp_path / "upgraded.json"
    code, out, _ = run_cli(capsys, "upgrade", str(source), "-o", str(target))
    assert code == 0
    assert out == ""
    assert source.read_bytes() == LEGACY.read_bytes()
    assert_lossless_upgrade(json.loads(LEGACY.read_text("utf-8")), json.loads(target.read_text()))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_upgrade_in_place(capsys, tmp_path):
    path = tmp_path / "legacy.json"
    shutil.copy(LEGACY, path)
    code, out, _ = run_cli(capsys, "upgrade", "--in-place", str(path))
    assert code == 0
    assert out == ""
    assert_lossless_upgrade(json.loads(LEGACY.read_text("utf-8")), json.loads(path.read_text()))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["legacy.json"]  # no temp left


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_upgrade_in_place_keeps_the_file_mode(capsys, tmp_path):
    path = tmp_path / "legacy.json"
    shutil.copy(LEGACY, path)
    path.chmod(0o644)
    assert run_cli(capsys, "upgrade", "--in-place", str(path))[0] == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_upgrade_output_file_gets_the_usual_mode(capsys, tmp_path):
    target = tmp_path / "new.json"
    assert run_cli(capsys, "upgrade", str(LEGACY), "-o", str(target))[0] == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_upgrade_in_place_in_a_subprocess(tmp_path):
    path = tmp_path / "legacy.json"
    shutil.copy(LEGACY, path)
    proc = subprocess_cli("upgrade", "--in-place", str(path))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(path.read_text("utf-8"))["format"] == "oar/0.2"
    # and the upgraded file validates
    proc = subprocess_cli("validate", str(path))
    assert proc.returncode == 0
    assert b"valid (run, oar/0.2)" in proc.stdout


def test_upgrade_of_oar_0_2_is_identity(capsys):
    code, out, _ = run_cli(capsys, "upgrade", str(RESPONDED))
    assert code == 0
    assert json.loads(out) == json.loads(RESPONDED.read_text("utf-8"))


def test_downgrade_round_trip(capsys, tmp_path):
    upgraded = tmp_path / "up.json"
    assert run_cli(capsys, "upgrade", str(LEGACY), "-o", str(upgraded))[0] == 0
    code, out, _ = run_cli(capsys, "upgrade", "--to", "oar/0.1", str(upgraded))
    assert code == 0
    back = json.loads(out)
    original = json.loads(LEGACY.read_text("utf-8"))
    assert back == original
    assert list(back) == list(original)


def test_downgrade_of_responded_is_refused(capsys, tmp_path):
    target = tmp_path / "out.json"
    code, out, err = run_cli(
        capsys, "upgrade", "--to", "oar/0.1", str(RESPONDED), "-o", str(target)
    )
    assert code == 1
    assert out == ""
    assert "responded" in err
    assert not target.exists()


def test_downgrade_of_responded_is_refused_in_place(capsys, tmp_path):
    path = tmp_path / "responded.json"
    shutil.copy(RESPONDED, path)
    code, _, err = run_cli(capsys, "upgrade", "--to", "oar/0.1", "--in-place", str(path))
    assert code == 1
    assert "responded" in err
    assert path.read_bytes() == RESPONDED.read_bytes()


def test_upgrade_of_an_invalid_document_is_refused(capsys, tmp_path):
    doc = load("runs/legacy-oar-0.1.json")
    doc["turns"] = 9  # R8
    path = write_json(tmp_path / "bad.json", doc)
    before = path.read_bytes()
    code, out, err = run_cli(capsys, "upgrade", "--in-place", str(path))
    assert code == 1
    assert out == ""
    assert "[R8]" in err
    assert "nothing written" in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]


def test_upgrade_of_an_invalid_document_writes_no_output_file(capsys, tmp_path):
    doc = load("runs/legacy-oar-0.1.json")
    doc["status"] = "paused"
    path = write_json(tmp_path / "bad.json", doc)
    target = tmp_path / "out.json"
    code, _, err = run_cli(capsys, "upgrade", str(path), "-o", str(target))
    assert code == 1
    assert "/status" in err
    assert not target.exists()


def test_upgrade_of_an_invalid_document_in_a_subprocess(tmp_path):
    doc = load("runs/legacy-oar-0.1.json")
    del doc["messages"]
    path = write_json(tmp_path / "bad.json", doc)
    before = path.read_bytes()
    proc = subprocess_cli("upgrade", "--in-place", str(path))
    assert proc.returncode == 1
    assert b"messages" in proc.stderr
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"{oops", "not JSON"), (b"[1, 2]", "JSON object"), (b'{"a": 1, "a": 2}', "duplicate")],
)
def test_upgrade_of_non_documents(capsys, tmp_path, content, needle):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    code, out, err = run_cli(capsys, "upgrade", "--in-place", str(path))
    assert code == 1
    assert out == ""
    assert needle in err
    assert path.read_bytes() == content


def test_upgrade_of_another_kind_is_refused(capsys):
    code, _, err = run_cli(capsys, "upgrade", str(EXAMPLES / "receipts/lookup-denied.json"))
    assert code == 1
    assert "nothing written" in err


def test_upgrade_missing_file_is_a_usage_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "upgrade", str(tmp_path / "nope.json"))
    assert code == 2
    assert "nope.json" in err


def test_upgrade_stdin(capsys, monkeypatch):
    feed_stdin(monkeypatch, LEGACY.read_bytes())
    code, out, _ = run_cli(capsys, "upgrade", "-")
    assert code == 0
    assert_lossless_upgrade(json.loads(LEGACY.read_text("utf-8")), json.loads(out))


def test_upgrade_in_place_needs_a_file(capsys, monkeypatch):
    feed_stdin(monkeypatch, LEGACY.read_bytes())
    code, out, _ = run_cli(capsys, "upgrade", "--in-place", "-")
    assert code == 2
    assert out == ""


def test_upgrade_output_and_in_place_are_exclusive(capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["upgrade", str(LEGACY), "--in-place", "-o", str(tmp_path / "x.json")])
    assert info.value.code == 2


def test_upgrade_to_unknown_format_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["upgrade", "--to", "oar/0.3", str(LEGACY)])
    assert info.value.code == 2


def test_upgrade_into_a_missing_folder_fails_cleanly(capsys, tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "out.json"
    code, out, err = run_cli(capsys, "upgrade", str(LEGACY), "-o", str(target))
    assert code == 1
    assert out == ""
    assert str(target) in err
    assert not target.exists()
