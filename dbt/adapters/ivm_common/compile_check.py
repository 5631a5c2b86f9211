"""`refresh_mode='differential'` (and 'immediate') is refused at compile time, not only at run time.

`dbt compile`, and the compile step of `dbt run` and `dbt build`, plan every `stream_table` model
whose refresh_mode is 'differential' or 'immediate' (which maintains what 'differential' does;
Spark refuses it outright) and fail naming the construct that cannot be maintained. dbt
compiles a node in its own `Compiler`, which an adapter cannot replace, so `install` wraps
`Compiler.compile_node` once per process; for other adapters and other models it does nothing.
A query whose relations do not exist yet (`dbt compile` before `dbt seed`) is not judged here: the
run reports it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dbt.adapters.factory import get_adapter
from dbt.adapters.ivm_common.stream_table_config import build_spec
from dbt.compilation import Compiler
from dbt.node_types import NodeType
from dbt_common.exceptions import CompilationError

from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.spec import StreamTableSpec

MARK = "__ivm_compile_check__"


def install() -> None:
    original = Compiler.compile_node
    if getattr(original, MARK, False):
        return

    @functools.wraps(original)
    def compile_node(self: Compiler, node: Any, *args: Any, **kwargs: Any) -> Any:
        compiled = original(self, node, *args, **kwargs)
        check_model(self.config, compiled)
        return compiled

    setattr(compile_node, MARK, True)
    Compiler.compile_node = compile_node  # type: ignore[method-assign]


def check_model(config: Any, node: Any) -> None:
    """Refuse a differential stream table model the engine cannot maintain (a no-op otherwise)."""
    if getattr(node, "resource_type", None) != NodeType.Model or not getattr(node, "compiled_code", None):
        return
    if node.config.materialized != "stream_table":
        return
    if str(node.config.get("refresh_mode") or "").strip().lower() not in ("differential", "immediate"):
        return
    check = getattr(get_adapter(config), "ivm_check_differential", None)
    if check is not None:
        check(node)


def spec_for(adapter: Any, node: Any) -> StreamTableSpec:
    """The stream table a model node describes, as the materialization would hand it to the engine."""
    relation = adapter.Relation.create_from(adapter.config, node)
    return build_spec(relation, node.compiled_code, node.config, False, node.name)


def judge(plan: Callable[[], None]) -> None:
    """Run the engine's planning step `plan`; a construct it cannot maintain fails compilation.

    Any other error (a relation not created yet, a connection refused) is left for the run to report:
    compilation judges maintainability only."""
    try:
        plan()
    except UnsupportedQuery as error:
        raise CompilationError(str(error)) from error
    except Exception:
        return
