"""``platoon env list``: the environments by name, with where each comes from."""

from __future__ import annotations

from typer.testing import CliRunner

import platoon
from platoon.cli import app
from platoon.live.envs.catalog import EnvironmentListing, list_environments, listing_table


def test_the_built_in_is_listed_as_core_s() -> None:
    [built_in] = [e for e in list_environments() if e.name == "platoon-number-search"]
    assert (built_in.distribution, built_in.version, built_in.entry_point) == ("platoon", platoon.__version__, None)
    assert built_in.ref == "platoon.live.envs.number_search:NumberSearch"


def test_the_table_aligns_its_columns() -> None:
    rows = [EnvironmentListing("a", "m:A", "dist-a", "1.0", "platoon.extensions:a", True),
            EnvironmentListing("longer-name", "m:B", None, None, None, False)]
    assert listing_table(rows).splitlines() == [
        "NAME         DISTRIBUTION  VERSION  SPEAKS  CLASS",
        "a            dist-a        1.0      text    m:A",
        "longer-name  -             -        tokens  m:B",
    ]


def test_env_list_prints_the_table() -> None:
    result = CliRunner().invoke(app, ["env", "list"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "SPEAKS", "CLASS"]
    assert any(line.split()[:3] == ["platoon-number-search", "platoon", platoon.__version__]
               for line in result.output.splitlines())
