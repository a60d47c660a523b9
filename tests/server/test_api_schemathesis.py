"""schemathesis against the OpenAPI document of a running ``oarlock serve`` (a process of
its own on 127.0.0.1), with an admin token: no 5xx, every response matches what the
document declares for it (status, content type, schema, headers), and requests the document
rules out are refused. Once operation by operation, once statefully: sequences of calls
that follow the document's links (a new run's id to its events and its cancellation, an
approval's version to the If-Match of a decision, a receipt to its reconciliation)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import checks
from schemathesis.specs.openapi import checks as openapi_checks

from server_kit import Served, serve_process


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_process(tmp_path_factory.mktemp("schemathesis")) as s:
        yield s


@pytest.fixture(scope="module")
def token(served: Served) -> str:
    return served.token("admin", "fuzzer")


def _waiting_run(url: str, headers: dict[str, str]) -> str:
    """A run waiting for an approval, so that the lists hold something to check."""
    import time

    import httpx

    r = httpx.post(f"{url}/v1/runs", headers=headers, json={"agent": "refund-desk", "input": "x"})
    run_id: str = r.json()["id"]
    deadline = time.monotonic() + 20
    while all(
        a["runId"] != run_id
        for a in httpx.get(f"{url}/v1/approvals", headers=headers).json()["approvals"]
    ):
        assert time.monotonic() < deadline, f"run {run_id} never waited"
        time.sleep(0.05)
    return run_id


def test_api_conforms(served: Served, token: str) -> None:
    api = schemathesis.openapi.from_url(f"{served.url}/openapi.json")
    headers = {"Authorization": f"Bearer {token}"}
    _waiting_run(served.url, headers)
    walked = []
    for result in api.get_all_operations():
        operation = result.ok()
        walked.append(operation.label)
        if operation.path.endswith("/stream"):
            continue  # event streams last as long as the server (test_api_live.py)

        @given(case=operation.as_strategy())
        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
        def conforms(case: Any) -> None:
            case.call_and_validate(
                base_url=served.url,
                headers=headers,
                timeout=30,
                # a well-formed request may still break a rule (a cursor this server did not
                # give, a tag without =): refused with 422, as declared
                excluded_checks=[checks.positive_data_acceptance],
            )

        conforms()
        assert served.process.poll() is None
    assert len(walked) == 20


def _links(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every link of the document, by (source operationId, link name)."""
    found = {}
    for item in spec["paths"].values():
        for op in item.values():
            for response in op["responses"].values():
                for name, link in response.get("links", {}).items():
                    found[op["operationId"], name] = link
    return found


def _follow(
    spec: dict[str, Any], link: dict[str, Any], response: Any, path: dict[str, str]
) -> tuple[str, str, dict[str, str]]:
    """A link's target request by hand: (method, path, headers) with each value the link's
    expression takes from ``response`` (or from the path of the request that got it)."""
    values: dict[str, str] = {}
    for key, expression in link["parameters"].items():
        source, _, rest = expression.partition("#")
        if source == "$response.body":
            value = response.json()
            for step in rest.split("/")[1:]:
                value = value[int(step) if isinstance(value, list) else step]
            values[key] = value
        elif source.startswith("$response.header."):
            values[key] = response.headers[source.removeprefix("$response.header.")]
        else:
            values[key] = path[source.removeprefix("$request.path.")]
    ((template, method),) = [
        (template, method)
        for template, item in spec["paths"].items()
        for method, op in item.items()
        if op["operationId"] == link["operationId"]
    ]
    for key, value in values.items():
        template = template.replace("{" + key.removeprefix("path.") + "}", value)
    headers = {k.removeprefix("header."): v for k, v in values.items() if k.startswith("header.")}
    return method, template, headers


def test_links_name_real_operations_and_lead_there(served: Served, token: str) -> None:
    """The document's links name operations it has and parameters those operations take; the
    ones the walk below leans on are there; and a decision made by following a link, with
    the If-Match it gives (the version from the list, the ETag from the approval), is
    taken."""
    import httpx

    spec = httpx.get(f"{served.url}/openapi.json").json()
    operations = {op["operationId"]: op for item in spec["paths"].values() for op in item.values()}
    links = _links(spec)
    for (source, name), link in links.items():
        target = operations[link["operationId"]]
        taken = {f"{p['in']}.{p['name']}" for p in target.get("parameters", [])}
        assert set(link.get("parameters", {})) <= taken, (source, name)
        assert ("requestBody" in link) <= ("requestBody" in target), (source, name)
    expected = {
        ("createRun", "GetRun"): "getRun",
        ("createRun", "GetRunEvents"): "runEvents",
        ("createRun", "CancelRun"): "cancelRun",
        ("createRun", "ListRunReceipts"): "listReceipts",
        ("listRuns", "GetRun"): "getRun",
        ("getRun", "GetApproval"): "getApproval",
        ("listApprovals", "GetApproval"): "getApproval",
        ("listApprovals", "Decide"): "decide",
        ("getApproval", "Decide"): "decide",
        ("decide", "GetRun"): "getRun",
        ("listReceipts", "GetReceipt"): "getReceipt",
        ("listReceipts", "Reconcile"): "reconcile",
        ("getReceipt", "Reconcile"): "reconcile",
        ("getReceipt", "GetResult"): "getArtifact",
        ("listAgents", "GetAgent"): "getAgent",
        ("getAgent", "CreateRun"): "createRun",
    }
    assert {key: links[key]["operationId"] for key in expected if key in links} == expected
    assert "header.If-Match" in links["listApprovals", "Decide"]["parameters"]
    assert links["getApproval", "Decide"]["parameters"]["header.If-Match"] == (
        "$response.header.ETag"
    )

    headers = {"Authorization": f"Bearer {token}"}
    run_id = _waiting_run(served.url, headers)
    page = httpx.get(f"{served.url}/v1/approvals", headers=headers)
    assert page.json()["approvals"][0]["runId"] == run_id  # the newest first
    method, url, extra = _follow(spec, links["listApprovals", "Decide"], page, {})
    decision = {"decision": "denied", "reason": "the link led here"}
    r = httpx.request(method, served.url + url, headers={**headers, **extra}, json=decision)
    assert r.status_code == 200 and r.json()["runId"] == run_id, r.text

    run_id = _waiting_run(served.url, headers)
    page = httpx.get(f"{served.url}/v1/approvals", headers=headers)
    method, url, _ = _follow(spec, links["listApprovals", "GetApproval"], page, {})
    one = httpx.request(method, served.url + url, headers=headers)
    call_id = one.json()["toolCallId"]
    path = {"run_id": run_id, "call_id": call_id}
    method, url, extra = _follow(spec, links["getApproval", "Decide"], one, path)
    assert extra == {"If-Match": one.headers["ETag"]}
    r = httpx.request(method, served.url + url, headers={**headers, **extra}, json=decision)
    assert r.status_code == 200 and r.json()["toolCallId"] == call_id, r.text


# what the stateful walk holds every response to: no 5xx, and the document's word for it
_CONFORMS = [
    checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.response_schema_conformance,
]


@dataclass
class _Step:
    operation: str
    linked: set[str]  # the parameters a link gave ("header.If-Match")
    positive: bool
    status: int
    code: str | None  # a refusal's error code


def test_api_statefully(served: Served, token: str) -> None:
    """Scenarios of up to 8 calls that start where the document's links start (creating a
    run, listing runs, approvals, receipts or agents) and go on by its links, each value
    taken from an earlier response as the link says: no 5xx, and every response as the
    document declares it. A decision gets its If-Match from the link, as the approval's
    ``version`` (from the list) or ``ETag`` (from the approval); a linked If-Match is never
    refused as stale (409 approval_changed), whatever else the walk did to the approval
    before. The approvals it decides are those of the runs waiting when it starts and of
    the runs it creates itself (a worker takes each to its approval in the meantime). Only
    the document's own links are walked (schemathesis' guessed ones are off), and no
    scenario starts by cancelling or resuming a made-up run (test_api_conforms does that).

    Not walked: the two event streams (they last until their run or the server ends;
    test_api_live.py walks them), and /v1/me and /v1/audit/verify, which take nothing from
    another call and give nothing to one, so no link leads to or from them. A
    reconciliation is reached by its links but refused (409 not_uncertain): the walk makes
    no Uncertain receipt, which takes a side effect cut off before its outcome was known.

    Failures are collected, not raised: a live server's state differs from one replay to
    the next, which Hypothesis takes for a flaky test, and a replay would bury the failure;
    for the same reason a walk that Hypothesis stops as flaky is started again, until
    enough scenarios ran."""
    from hypothesis.errors import Flaky
    from schemathesis.core.failures import FailureGroup
    from schemathesis.generation.stateful.state_machine import normalize_name

    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(3):
        _waiting_run(served.url, headers)
    api = schemathesis.openapi.from_url(f"{served.url}/openapi.json").exclude(
        path_regex=r"/stream$"
    )
    api.config.phases.stateful.inference.algorithms = []
    steps: list[_Step] = []
    failures: list[str] = []
    scenarios = [0]

    machine = api.as_state_machine()

    class Walk(machine):  # type: ignore[misc,valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": served.url, "headers": headers, "timeout": 30}

        def step(self, input: Any) -> Any:
            output = super().step(input)
            case, response = input.case, output.response
            body = response.json() if response.status_code >= 400 else {}
            steps.append(
                _Step(
                    operation=case.operation.label,
                    linked={f"{where.value}.{name}" for where, name in input.applied_parameters},
                    positive=case.meta is None or case.meta.generation.mode.is_positive,
                    status=response.status_code,
                    code=body.get("error", {}).get("code") if isinstance(body, dict) else None,
                )
            )
            return output

        def validate_response(
            self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            try:
                case.validate_response(
                    response, checks=_CONFORMS, transport_kwargs=kwargs, recorder=self.recorder
                )
            except (AssertionError, FailureGroup) as exc:
                found = exc.exceptions if isinstance(exc, FailureGroup) else [exc]
                curl = case.as_curl_command(headers=headers)
                failures.append("\n".join([curl, *(str(e) for e in found)]))

        def teardown(self) -> None:
            scenarios[0] += 1
            super().teardown()

    # no scenario starts with a made-up id (a run's, an approval's, a receipt's): all but
    # always a 404, test_api_conforms makes those; ids here come from links
    made_up = [
        normalize_name(f"RANDOM -> {op.label}")
        for op in (result.ok() for result in api.get_all_operations())
        if op.path_parameters
    ]
    hidden = [name for name in made_up if name in machine.root_rules]
    assert hidden, machine.root_rules  # cancelling and resuming a run
    for name in hidden:
        setattr(Walk, name, None)

    want = 40
    for _ in range(5):
        try:
            Walk.run(
                settings=settings(
                    max_examples=want - scenarios[0],
                    stateful_step_count=8,
                    deadline=None,
                    database=None,
                    phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )
            )
        except Flaky:
            if scenarios[0] < want:
                continue
        break
    assert served.process.poll() is None
    assert not failures, "\n\n".join(failures)
    assert scenarios[0] >= want
    assert any(s.linked for s in steps), "no link was followed"
    stale = [
        s
        for s in steps
        if "header.If-Match" in s.linked and s.positive and s.code == "approval_changed"
    ]
    assert not stale, stale
