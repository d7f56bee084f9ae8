import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


def real_data_dir():
    from saber_lib.data import resolve_data_dir

    d = resolve_data_dir(None)
    return d if (d / "sources").exists() else None


requires_data = pytest.mark.skipif(real_data_dir() is None, reason="reference data folder not present")
