"""Approvers approve exactly what will run. A memo with a newline, a tab, an ESC and a
right-to-left override, and a URL with a password: the API shows them rendered (the
password redacted, and said where) and gives a decider the exact ones; the approval form
shows them safely and, submitted untouched, approves exactly the call as asked (the
approval's argumentsHash is the invocation's, the tool receives the original strings); a
redacted value is kept whole (its real value) or replaced whole, never half; exports of
the invocation say what they redacted, and ``oarlock validate`` tells them from a tampered
record."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from decide_kit import (
    ARGUMENTS,
    MEMO,
    SHOWN_URL,
    URL,
    decision_forms,
    run,
    signed_in,
    waiting_memo,
)

from oarlock.server._exact import form_fields, judge_edit, read_form, same
from server_kit import Kit

HASH = "sha256:" + hashlib.sha256(rfc8785.dumps(ARGUMENTS)).hexdigest()  # not oarlock's


async def _ran_with(kit: Kit, run_id: str, call_id: str) -> dict[str, Any]:
    """The run completed: the approval's and the invocation's hashes, and what the tool
    received (its raw result)."""
    await kit.until(run_id, "completed")
    gov = kit.app.state.store.governance()
    approval, invocation_id = await gov.approval_for(run_id, call_id)
    assert invocation_id is not None
    invocation, receipt = await gov.load(invocation_id)
    assert receipt is not None and receipt["status"] == "Succeeded", receipt
    result = await kit.get(f"/v1/receipts/{invocation_id}/result", "approver")
    return {
        "approvalHash": approval.arguments_hash,
        "invocationHash": invocation["argumentsHash"],
        "received": json.loads(result.content),
        "edited": (await kit.app.state.store.load(run_id)).document.decisions[0].edited_arguments,
        "invocationId": invocation_id,
    }


async def _exactly_as_asked(kit: Kit, run_id: str, call_id: str) -> dict[str, Any]:
    ran = await _ran_with(kit, run_id, call_id)
    assert ran["edited"] is None
    assert ran["approvalHash"] == ran["invocationHash"] == HASH
    assert ran["received"] == ARGUMENTS
    return ran


def test_the_api_shows_rendered_and_gives_exact(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await waiting_memo(kit)
        r = await kit.get(f"/v1/approvals/{run_id}/{call_id}", "approver")
        assert "\x1b" not in r.text and "\u202e" not in r.text and ":pw@" not in r.text
        item = r.json()
        assert item["arguments"] == {"memo": MEMO, "url": SHOWN_URL}  # escapes, read back
        assert item["argumentsRedacted"] == ["/url"]
        assert item["argumentsHash"] == HASH
        listed = (await kit.get("/v1/approvals", "viewer")).json()["approvals"]
        assert [a["argumentsRedacted"] for a in listed] == [["/url"]]
        r = await kit.get(f"/v1/approvals/{run_id}/{call_id}/arguments", "approver")
        assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
        assert "\x1b" not in r.text and "\u202e" not in r.text  # JSON escapes, nothing lost
        exact = r.json()
        assert exact["arguments"] == ARGUMENTS and exact["argumentsHash"] == HASH
        assert r.headers["etag"] == f'"{item["version"]}"' == f'"{exact["version"]}"'
        spec = (await kit.client.get("/openapi.json")).json()
        links = spec["paths"]["/v1/approvals/{run_id}/{call_id}"]["get"]["responses"]["200"]
        assert links["links"]["GetExactArguments"]["operationId"] == "getExactArguments"
        # approving with the arguments as shown (the password redacted) is no edit
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "approver",
            headers={"If-Match": item["version"]},
            json={"decision": "approved", "editedArguments": item["arguments"]},
        )
        assert r.status_code == 200, r.text
        await _exactly_as_asked(kit, run_id, call_id)

    run(tmp_path, body)


def test_an_untouched_form_approves_exactly(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await waiting_memo(kit)
        c = await signed_in(kit, "approver")
        page = (await c.get(f"/approvals/{run_id}/{call_id}")).text
        assert "\x1b" not in page and "\u202e" not in page and ":pw@" not in page
        assert HASH in page
        fields = decision_forms(page)["approved"]
        # shown safely: the memo as a JSON string with visible escapes, the URL redacted
        assert fields["arg.memo"] == '"Hello,\\n\\tthanks\\u001b[31m \\u202egnp.exe"'
        assert fields["arg.url"] == f'"{SHOWN_URL}"'
        assert "leave it as it is to keep the real value" in page
        r = await c.post(f"/approvals/{run_id}/{call_id}", data={**fields, "decision": "approved"})
        assert r.status_code == 303, r.text
        await _exactly_as_asked(kit, run_id, call_id)
        await c.aclose()

    run(tmp_path, body)


def test_a_redacted_value_is_kept_or_replaced_whole(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await waiting_memo(kit)
        c = await signed_in(kit, "approver")
        page = (await c.get(f"/approvals/{run_id}/{call_id}")).text
        fields = decision_forms(page)["approved"]
        half = "https://svc:[redacted]@pay.example/inv/8"
        r = await c.post(
            f"/approvals/{run_id}/{call_id}",
            data={**fields, "arg.url": json.dumps(half), "decision": "approved"},
        )
        assert r.status_code == 422 and "invalid_edit" in r.text and "replace it whole" in r.text
        version = await kit.version(run_id, call_id)
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "approver",
            headers={"If-Match": version},
            json={"decision": "approved", "editedArguments": {"memo": MEMO, "url": half}},
        )
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_edit"
        doc = (await kit.get(f"/v1/runs/{run_id}")).json()
        assert doc["status"] == "waiting_approval" and not doc.get("decisions")
        # replaced whole (the memo kept as shown): an edit of the URL alone
        new = "https://pay.example/inv/8"
        r = await c.post(
            f"/approvals/{run_id}/{call_id}",
            data={**fields, "arg.url": json.dumps(new), "decision": "approved"},
        )
        assert r.status_code == 303, r.text
        ran = await _ran_with(kit, run_id, call_id)
        assert ran["received"] == ran["edited"] == {"memo": MEMO, "url": new}
        assert ran["approvalHash"] == ran["invocationHash"] != HASH
        await c.aclose()

    run(tmp_path, body)


def _validate(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout + done.stderr


def test_exports_say_what_they_redacted(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await waiting_memo(kit)
        version = await kit.version(run_id, call_id)
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "approver",
            headers={"If-Match": version},
            json={"decision": "approved"},
        )
        assert r.status_code == 200
        ran = await _exactly_as_asked(kit, run_id, call_id)
        api = (await kit.get(f"/v1/receipts/{ran['invocationId']}", "viewer")).json()
        (tmp_path / "api.json").write_text(json.dumps(api["invocation"]))
        (tmp_path / "id").write_text(ran["invocationId"])

    run(tmp_path, body)
    shown = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(tmp_path / "runs.db"), "receipts",
         "show", (tmp_path / "id").read_text(), "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    cli = json.loads(shown)["invocation"]
    api = json.loads((tmp_path / "api.json").read_text())
    for exported in (cli, api):
        assert exported["arguments"] == {"memo": MEMO, "url": SHOWN_URL}
        assert exported["redacted"] == ["/arguments/url"]
        assert exported["argumentsHash"] == HASH
    (tmp_path / "cli.json").write_text(json.dumps(cli))
    said = _validate(tmp_path / "cli.json")
    assert "argumentsHash cannot be checked" in said and "/arguments/url" in said, said
    assert "does not match" not in said, said
    # a record changed by hand is told as such, with or without the note
    for note in (True, False):
        tampered = {**cli, "arguments": {**cli["arguments"], "memo": "Pay twice"}}
        if not note:
            del tampered["redacted"]
        (tmp_path / "tampered.json").write_text(json.dumps(tampered))
        said = _validate(tmp_path / "tampered.json")
        assert ("cannot be checked" in said) is note and ("does not match" in said) is not note
    # a note naming a value that holds no redaction is no excuse
    (tmp_path / "lie.json").write_text(json.dumps({**cli, "redacted": ["/arguments/memo"]}))
    said = _validate(tmp_path / "lie.json")
    assert "does not match" in said and "not a redaction" in said, said


@pytest.mark.parametrize(
    "arguments",
    [
        ARGUMENTS,
        {"n": 1e20, "x": 0.1, "i": -3, "z": -0.0, "b": False, "none": None},
        {"nested": {"authorization": "Basic c2VjcmV0cw==", "list": [1, "two\u2066"]}},
        {"text": "  spaced  ", "long": "y" * 400, "empty": "", "café": "naïve"},
    ],
)
def test_the_form_reads_back_what_it_shows(arguments: dict[str, Any]) -> None:
    """Each field as a browser submits it untouched reads back as no edit."""
    schema = {"properties": {"absent": {"type": "number"}, "flag": {"type": "boolean"}}}
    fields = form_fields(schema, arguments)
    form = {}
    for f in fields:
        text = f.text
        if f.multiline:  # a textarea: a browser submits its lines with CRLF
            text = text.replace("\n", "\r\n")
        form[f"arg.{f.name}"] = text
    given = read_form(fields, form, arguments)
    assert judge_edit(arguments, given) is None, given
    for f in fields:
        assert "\x1b" not in f.text and "\u202e" not in f.text and "\u2066" not in f.text
        assert "c2VjcmV0cw" not in f.text and ":pw@" not in f.text


def test_edits_are_judged_by_value() -> None:
    original = {"a": 1, "b": {"x": [1, 2]}, "url": URL}
    assert judge_edit(original, {"b": {"x": [1, 2]}, "a": 1.0, "url": SHOWN_URL}) is None
    assert judge_edit(original, {"a": True, "b": {"x": [1, 2]}, "url": URL}) == {
        "a": True, "b": {"x": [1, 2]}, "url": URL,
    }  # fmt: skip
    assert judge_edit(original, {"a": 2, "b": {"x": [1, 2]}, "url": SHOWN_URL}) == {
        "a": 2, "b": {"x": [1, 2]}, "url": URL,
    }  # fmt: skip
    assert same(1, 1.0) and not same(1, True) and not same("1", 1) and not same([1], [1, 1])


def test_a_redacted_receipt_says_so_too() -> None:
    """The same note on a receipt: its receiptHash (over the receipt as stored) cannot be
    checked against a redacted copy, and ``validate`` says so rather than "tampered"."""
    from oarlock.formats._exported import exported
    from oarlock.formats._validate import validate

    receipt: dict[str, Any] = {
        "invocationId": "0b8f4f5e-7d0c-4d43-9a53-2d3c0c3b8d11",
        "status": "Succeeded",
        "startedAt": "2026-01-01T00:00:00Z",
        "finishedAt": "2026-01-01T00:00:01Z",
        "effect": {"kind": "memo", "externalReference": URL},
    }
    receipt["receiptHash"] = "sha256:" + hashlib.sha256(rfc8785.dumps(receipt)).hexdigest()
    assert validate(receipt).valid
    shown = exported(receipt)
    assert shown["redacted"] == ["/effect/externalReference"]
    assert shown["effect"]["externalReference"] == SHOWN_URL
    [problem] = validate(shown).errors
    assert problem.rule == "C1" and "receiptHash cannot be checked" in problem.message
    del shown["redacted"]
    [problem] = validate(shown).errors
    assert "receiptHash does not match the receipt" in problem.message
    assert exported({"a": "nothing secret"}) == {"a": "nothing secret"}  # no note when none


def test_a_field_that_does_not_read_is_refused_by_name() -> None:
    fields = form_fields(None, {"memo": MEMO, "n": 1.5, "obj": {"k": [1]}})
    for form, said in (
        ({"arg.memo": '"two\nlines"'}, "memo: not JSON"),  # a raw newline in a JSON string
        ({"arg.memo": "plain"}, "memo: not JSON"),
        ({"arg.memo": "42"}, "memo: not a JSON string"),
        ({"arg.n": "lots"}, "n: not JSON"),
        ({"arg.n": "true"}, "n: not a number"),
        ({"arg.obj": "{"}, "obj: not JSON"),
        ({"arg.obj": '{"k": 1, "k": 2}'}, "obj: not JSON"),  # a duplicate key
    ):
        with pytest.raises(Exception) as caught:
            read_form(fields, form, {"memo": MEMO, "n": 1.5, "obj": {"k": [1]}})
        assert getattr(caught.value, "code", None) == "invalid_edit", form
        assert said in str(caught.value), (form, str(caught.value))
