"""The engine's worked examples (doctests in plan/, delta/, layout, ...) stay true."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import dbt_ivm

ENGINE_MODULES = [
    *sorted(
        m.name
        for m in pkgutil.walk_packages(dbt_ivm.__path__, "dbt_ivm.")
        if (not m.name.startswith(("dbt_ivm.spark", "dbt_ivm.embedded")) and not m.name.endswith("__main__"))
        # pure, unlike the rest of the Spark runtime
        or m.name in ("dbt_ivm.spark.touched_files", "dbt_ivm.spark.carried_columns")
    ),
    "dbt.adapters.ivm_common.stream_table_config",  # the adapters' shared config and messages
    "dbt.adapters.ivm_postgres.indexes",
]


@pytest.mark.parametrize("name", ENGINE_MODULES)
def test_doctests(name: str) -> None:
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert failures == 0
