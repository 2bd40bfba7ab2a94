"""Fixtures shared by the live backend's tests."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module: torch ops from a service's worker thread and from the test's thread each start
    an OpenMP team, and on two shared cores their spinning threads slow every small op by an order of magnitude."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
