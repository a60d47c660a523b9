"""Property: whatever path a model gives, reading and writing a workspace file never
touches anything outside the workspace, planted links included."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oarlock.errors import ToolError
from oarlock.sandbox._workspace import Workspace, confined_parts, read_file, write_file

parts = st.sampled_from(["a", "b", "..", ".", "", "link", "dirlink", "x.txt", "\0", "~", " "])
paths = st.one_of(
    st.lists(parts, min_size=1, max_size=5).map("/".join),
    st.lists(parts, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p)),
    st.text(max_size=40),
)


def _outside_state(outside: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in outside.rglob("*") if p.is_file()}


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=paths)
def test_a_path_never_leads_outside_the_workspace(tmp_path: Path, path: str) -> None:
    outside = tmp_path / "outside"
    root = tmp_path / "ws"
    if not root.exists():
        outside.mkdir()
        (outside / "x.txt").write_bytes(b"outside")
        root.mkdir()
        (root / "a").mkdir()
        os.symlink(outside / "x.txt", root / "link")
        os.symlink(outside, root / "dirlink")
        os.symlink(outside, root / "a" / "b")
    before = _outside_state(outside)
    workspace = Workspace("w", root, None)
    refused: ToolError | None = None
    try:
        write_file(workspace, path, b"written")
    except ToolError as exc:
        refused = exc
    if refused is not None:
        assert refused.code in ("path_refused", "not_found", "io_error"), refused
    else:
        names = confined_parts(path)  # accepted: so it is a plain relative path ...
        written = root.joinpath(*names)
        assert written.resolve().is_relative_to(root.resolve())  # ... and stayed inside
        assert not any(p.is_symlink() for p in [written, *written.parents] if p != tmp_path)
        assert read_file(workspace, path, max_bytes=100) == (b"written", 7)
    assert _outside_state(outside) == before
