"""The model's settings a refresh needs besides its query, kept with its registration by each `dbt run`,
so a refresh without dbt (`dbt-ivm refresh`, `dbt_ivm.spark.refresh`) behaves as `dbt run` would; and
what changed in them since (`changes`), which `on_configuration_change` applies, continues past or fails on.

>>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1", notify_channel="c")
>>> kept = encoded(of(spec))
>>> kept
'{"dbt_project": null, "full_refresh_threshold": 0.5, "notify_channel": "c", "refresh_mode": "auto", "schedule": null, "table_properties": {}, "target_lag_seconds": null, "user_triggers": "auto"}'
>>> plain = StreamTableSpec(model="m", schema="s", name="m", sql="select 1")
>>> applied(plain, kept).notify_channel
'c'
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast, get_args

from dbt_ivm.spec import RefreshMode, StreamTableSpec, UserTriggers

# Who runs a refresh whose settings are the model's own (and so are kept): only dbt reads the config.
KEEPER = "dbt"


# The dbt project whose run kept them: not a setting of the model (never a configuration change), but
# what lets a later run of that project tell its own registrations from another project's (unused.py).
PROJECT = "dbt_project"


def of(spec: StreamTableSpec) -> dict[str, Any]:
    return {
        PROJECT: spec.dbt_project,
        "full_refresh_threshold": spec.full_refresh_threshold,
        "notify_channel": spec.notify_channel,
        "refresh_mode": spec.refresh_mode,
        "schedule": spec.schedule,
        "table_properties": dict(spec.table_properties),
        "target_lag_seconds": spec.target_lag_seconds,
        "user_triggers": spec.user_triggers,
    }


def encoded(settings: dict[str, Any]) -> str:
    """One text per settings (sorted keys): equal settings compare equal as stored."""
    return json.dumps(settings, sort_keys=True)


def to_keep(spec: StreamTableSpec, kept: str | dict[str, Any] | None) -> str | None:
    """The settings to store for `spec`'s registration, which holds `kept`; None when there is nothing
    to write (they are stored already, or the run was not dbt's: only dbt reads the model's config).

    >>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1")
    >>> to_keep(spec, None) == encoded(of(spec)), to_keep(spec, of(spec))
    (True, None)
    """
    if spec.initiated_by != KEEPER:
        return None
    settings = encoded(of(spec))
    stored = encoded(kept) if isinstance(kept, dict) else kept
    return None if stored == settings else settings


def applied(spec: StreamTableSpec, kept: str | dict[str, Any] | None) -> StreamTableSpec:
    """`spec` with the kept settings (a registration from before they were kept: `spec` as it is)."""
    if not kept:
        return spec
    values = json.loads(kept) if isinstance(kept, str) else kept
    triggers = values.get("user_triggers", spec.user_triggers)
    mode = values.get("refresh_mode", spec.refresh_mode)
    return dataclasses.replace(
        spec,
        refresh_mode=cast(RefreshMode, mode if mode in get_args(RefreshMode) else spec.refresh_mode),
        full_refresh_threshold=float(values.get("full_refresh_threshold", spec.full_refresh_threshold)),
        notify_channel=values.get("notify_channel", spec.notify_channel),
        target_lag_seconds=values.get("target_lag_seconds", spec.target_lag_seconds),
        schedule=values.get("schedule", spec.schedule),
        table_properties=dict(values.get("table_properties", spec.table_properties)),
        user_triggers=cast(
            UserTriggers, triggers if triggers in get_args(UserTriggers) else spec.user_triggers
        ),
    )


def changes(spec: StreamTableSpec, refresh_mode: str, kept: str | dict[str, Any] | None) -> list[str]:
    """The model's settings that differ from those its registration holds (`refresh_mode` and `kept`),
    each as `name: old -> new`; a setting kept by no earlier run is not a change.

    >>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1", refresh_mode="full")
    >>> changes(spec, "auto", '{"full_refresh_threshold": 0.2, "notify_channel": null}')
    ["refresh_mode: 'auto' -> 'full'", 'full_refresh_threshold: 0.2 -> 0.5']
    """
    found = (
        [f"refresh_mode: {refresh_mode!r} -> {spec.refresh_mode!r}"]
        if refresh_mode != spec.refresh_mode
        else []
    )
    stored = (json.loads(kept) if isinstance(kept, str) else kept) or {}
    for name, value in of(spec).items():
        if name not in ("refresh_mode", PROJECT) and name in stored and stored[name] != value:
            found.append(f"{name}: {stored[name]!r} -> {value!r}")
    return found


def kept_project(kept: str | dict[str, Any] | None) -> str | None:
    """The dbt project recorded with a registration's settings (None: none was).

    >>> kept_project('{"dbt_project": "shop"}'), kept_project(None)
    ('shop', None)
    """
    stored = (json.loads(kept) if isinstance(kept, str) else kept) or {}
    project = stored.get(PROJECT)
    return str(project) if project else None


def dropped_properties(spec: StreamTableSpec, kept: str | dict[str, Any] | None) -> list[str]:
    """Table properties the model's last kept config set and its config no longer does.

    >>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1", table_properties={"a": "1"})
    >>> dropped_properties(spec, '{"table_properties": {"a": "1", "b": "2"}}')
    ['b']
    """
    stored = (json.loads(kept) if isinstance(kept, str) else kept) or {}
    return sorted(set(stored.get("table_properties") or {}) - set(spec.table_properties))
