import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("TINYGPT_BUILD", ROOT / "build"))


@pytest.fixture(autouse=True, scope="session")
def torch_one_thread():
    """The tests' shapes are tiny: on 2 shared cores torch's spinning second thread made them ~10-40x slower.

    Benchmarks set their own thread count; tests never time anything.
    """
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
