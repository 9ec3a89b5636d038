"""The dashboard's files and how they are served, without a node: the page at `/` and every
upstream SPA path, each file with its content type, nothing outside the folder, every module
import resolving to a shipped file, and nothing loaded from another host (the browser test,
tests/integration/test_dashboard.py, drives the page against real nodes)."""

from __future__ import annotations

import re
from pathlib import Path

import falcon
import falcon.testing
import pytest

from skulk.services.api.observe.dashboard import (
    CONTENT_TYPES,
    SPA_PATHS,
    DashboardAssetResource,
    DashboardPageResource,
    asset,
    dashboard_dir,
)

FOLDER = Path(str(dashboard_dir()))


@pytest.fixture
def client() -> falcon.testing.TestClient:
    app = falcon.App()
    page = DashboardPageResource()
    for path in ("/", *SPA_PATHS, *(p + "/" for p in SPA_PATHS)):
        app.add_route(path, page)
    app.add_route("/dashboard/{name}", DashboardAssetResource())
    return falcon.testing.TestClient(app)


def test_the_page_is_served_at_the_root_and_every_spa_path(client):
    for path in ("/", "/cluster", "/cluster/", "/chat", "/model-store/", "/operator"):
        result = client.simulate_get(path)
        assert result.status_code == 200, path
        assert result.headers["content-type"] == "text/html; charset=utf-8"
        assert "default-src 'self'" in result.headers["content-security-policy"]
        assert '<script type="module" src="/dashboard/app.js">' in result.text


def test_every_file_is_served_with_its_content_type(client):
    files = [p for p in FOLDER.iterdir() if p.is_file()]
    assert {p.suffix for p in files} <= set(CONTENT_TYPES)
    for path in files:
        result = client.simulate_get(f"/dashboard/{path.name}")
        assert result.status_code == 200, path.name
        assert result.headers["content-type"] == CONTENT_TYPES[path.suffix]
        assert result.headers["x-content-type-options"] == "nosniff"
        assert result.content == path.read_bytes()


@pytest.mark.parametrize("name", ["..", "../app.py", "..%2Fapp.py", "%2e%2e", ".hidden.js", "app.py",
                                  "missing.js", "App.JS", "a b.js", "__init__.py", "index"])
def test_nothing_outside_the_folder_or_unknown_is_served(client, name):
    result = client.simulate_get(f"/dashboard/{name}")
    assert result.status_code == 404
    assert asset(dashboard_dir(), name.replace("%2F", "/")) is None


def test_a_file_outside_the_folder_cannot_be_named(tmp_path):
    (tmp_path / "inside").mkdir()
    (tmp_path / "secret.js").write_text("x")
    for name in ("../secret.js", "..", "/etc/passwd", "inside/../../secret.js"):
        assert asset(tmp_path / "inside", name) is None


def test_every_module_import_names_a_shipped_file():
    for script in FOLDER.glob("*.js"):
        for target in re.findall(r"""(?:import|from)\s*['"]([^'"]+)['"]""", script.read_text()):
            assert target.startswith("./"), f"{script.name} imports {target!r}: only ./files ship"
            assert (FOLDER / target[2:]).is_file(), f"{script.name} imports a missing {target}"
    page = (FOLDER / "index.html").read_text()
    for ref in re.findall(r'(?:src|href)="([^"]+)"', page):
        assert ref.startswith("/dashboard/") and (FOLDER / ref.removeprefix("/dashboard/")).is_file(), ref


def test_nothing_is_loaded_from_another_host():
    for path in FOLDER.iterdir():
        if path.suffix in (".js", ".css", ".html"):
            assert not re.search(r"""(?:src|href|url|import|from|fetch)\s*[=(]?\s*['"]?(?:https?:)?//""",
                                 path.read_text()), path.name


def test_the_vendored_library_ships_with_its_licences():
    licence = (FOLDER / "preact-htm.LICENSE.txt").read_text()
    assert "MIT License" in licence and "Apache License" in licence
