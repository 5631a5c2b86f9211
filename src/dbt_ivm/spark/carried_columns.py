"""The source columns a change view carries, and the names it carries them by.

A change view puts a source's columns next to its own (the weight, the order, a data file's path and
position). A source column named like one of those (``__ivm_weight``) would make the view's names
ambiguous, so every column is carried by its internal name (``dbt_ivm.reserved``): its own, or
``__ivm_c<n>`` for one that starts like ours.

>>> carried = Carried((("id", "id"), ("__ivm_weight", "__ivm_c2")))
>>> carried.names, carried.select_list()
(('id', '__ivm_c2'), ['`id`', '`__ivm_weight` AS `__ivm_c2`'])
"""

from __future__ import annotations

from dataclasses import dataclass

from dbt_ivm.spark.iceberg import quote_identifier


@dataclass(frozen=True)
class Carried:
    """(name in the source, name in the view) of each column a change view carries, in order."""

    pairs: tuple[tuple[str, str], ...]

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(source for source, _ in self.pairs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.pairs)

    def select_list(self) -> list[str]:
        """Spark SQL select-list entries reading the source's columns under the view's names."""
        return [
            quote_identifier(source) + ("" if source == name else f" AS {quote_identifier(name)}")
            for source, name in self.pairs
        ]

    def renamed(self) -> str:
        """The select list as one string."""
        return ", ".join(self.select_list())
