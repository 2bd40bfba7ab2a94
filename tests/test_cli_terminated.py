"""SIGTERM ends a command as a termination, whatever the unwinding it starts raises on its way out."""

from __future__ import annotations

import gc
import signal
import sys
import zipfile

import numpy as np
import pytest

from platoon import cli
from platoon.runs.columnar import npz_bytes


@pytest.fixture
def sigterm_handler_kept():
    kept = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, kept)


def terminated_inside_a_columnar_write(monkeypatch) -> None:
    """The app's run: SIGTERM arrives as a zip member closes, and the zip's own close raises as it unwinds (the
    member still counts as open)."""
    close, signalled = zipfile._ZipWriteFile.close, []

    def terminated_once(member):
        if not signalled:
            signalled.append(True)
            raise cli.Terminated(cli.EXIT_RUNTIME)
        close(member)

    monkeypatch.setattr(zipfile._ZipWriteFile, "close", terminated_once)
    monkeypatch.setattr(cli, "app", lambda standalone_mode: npz_bytes("s.npz", {"columns": {"a": np.zeros(3)}}))


def test_a_sigterm_inside_a_checkpoint_zip_is_a_termination_not_an_internal_error(
        monkeypatch, capsys, sigterm_handler_kept):
    terminated_inside_a_columnar_write(monkeypatch)
    with pytest.raises(SystemExit) as ended:
        cli.main()
    err = capsys.readouterr().err
    assert ended.value.code == cli.EXIT_RUNTIME
    assert "terminated (SIGTERM); a run goes on from its last checkpoint with --resume" in err
    assert "internal error" not in err
    # the half-closed in-memory zip's ``__del__`` raises again when it is collected: Python ignores it, as here
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: None)
    del ended
    gc.collect()


def test_an_error_with_no_termination_behind_it_is_still_an_internal_error(monkeypatch, capsys, sigterm_handler_kept):
    def broken(standalone_mode):
        raise ValueError("a bug")

    monkeypatch.setattr(cli, "app", broken)
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == cli.EXIT_RUNTIME
    assert "internal error: ValueError: a bug" in capsys.readouterr().err
