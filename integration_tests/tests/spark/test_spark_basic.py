"""dbt-tests-adapter suites for `ivm_spark` (method: session): the selection dbt-spark itself runs
for its `spark_session` profile (tests/functional/adapter/test_basic.py, empty/, dbt_show/,
unit_testing/), plus the basic materializations, incremental and timestamp-snapshot suites, which
dbt-spark skips in session mode and which pass here because file_format is iceberg by default (the
check-cols snapshot suite passes too, in 50 s; left out to keep the suite fast)."""

from __future__ import annotations

from typing import Any

import pytest
from dbt.tests.adapter.basic.test_adapter_methods import BaseAdapterMethod
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_empty import BaseEmpty
from dbt.tests.adapter.basic.test_generic_tests import BaseGenericTests
from dbt.tests.adapter.basic.test_incremental import BaseIncremental
from dbt.tests.adapter.basic.test_singular_tests import BaseSingularTests
from dbt.tests.adapter.basic.test_singular_tests_ephemeral import BaseSingularTestsEphemeral
from dbt.tests.adapter.basic.test_snapshot_timestamp import BaseSnapshotTimestamp
from dbt.tests.adapter.dbt_show.test_dbt_show import (
    BaseShowDoesNotHandleDoubleLimit,
    BaseShowLimit,
    BaseShowSqlHeader,
)
from dbt.tests.adapter.empty.test_empty import BaseTestEmpty, BaseTestEmptyInlineSourceRef
from dbt.tests.adapter.unit_testing.test_case_insensitivity import BaseUnitTestCaseInsensivity
from dbt.tests.adapter.unit_testing.test_invalid_input import BaseUnitTestInvalidInput
from dbt.tests.util import run_dbt
from dbt_common.exceptions import DbtRuntimeError

pytestmark = pytest.mark.spark


# dbt-spark's spark_session selection ---------------------------------------------------------


class TestSingularTestsIvmSpark(BaseSingularTests):
    pass


class TestSingularTestsEphemeralIvmSpark(BaseSingularTestsEphemeral):
    pass


class TestEmptyIvmSpark(BaseEmpty):
    pass


class TestGenericTestsIvmSpark(BaseGenericTests):
    pass


class TestAdapterMethodIvmSpark(BaseAdapterMethod):
    pass


class TestEmptyModelsIvmSpark(BaseTestEmpty):
    pass


class TestEmptyInlineSourceRefIvmSpark(BaseTestEmptyInlineSourceRef):
    pass


class TestShowLimitIvmSpark(BaseShowLimit):
    pass


class TestShowSqlHeaderIvmSpark(BaseShowSqlHeader):
    pass


class TestShowDoesNotHandleDoubleLimitIvmSpark(BaseShowDoesNotHandleDoubleLimit):
    def test_double_limit_throws_syntax_error(self, project: Any) -> None:
        # The base class looks for PostgreSQL's wording in a truncated repr; Spark says it so:
        with pytest.raises(DbtRuntimeError, match="Syntax error at or near 'limit'"):
            run_dbt(["show", "--limit", "1", "--inline", "select 1 limit 1"])


class TestUnitTestCaseInsensitivityIvmSpark(BaseUnitTestCaseInsensivity):
    pass


class TestUnitTestInvalidInputIvmSpark(BaseUnitTestInvalidInput):
    pass


# Skipped by dbt-spark in session mode; pass with Iceberg tables -------------------------------


class TestSimpleMaterializationsIvmSpark(BaseSimpleMaterializations):
    pass


class TestIncrementalIvmSpark(BaseIncremental):
    pass


class TestSnapshotTimestampIvmSpark(BaseSnapshotTimestamp):
    pass
