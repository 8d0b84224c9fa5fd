from __future__ import annotations

from pathlib import Path

import pytest

from tests.validate.helpers import Workspace


@pytest.fixture
def ws(tmp_path: Path, tiny_model_dir: Path) -> Workspace:
    return Workspace(tmp_path, tiny_model_dir)


@pytest.fixture
def ws_config(ws: Workspace):
    from rlkit.config.resolve import resolve

    return resolve(ws.config(), ws.environ())
