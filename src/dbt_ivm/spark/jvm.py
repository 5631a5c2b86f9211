"""Reaching JVM classes and Java collections from Python without Py4J's slow paths.

Two habits of PySpark code cost far more than the call they make, a few hundred times a refresh:

- ``jvm.org.apache.x.Y`` asks the JVM about each dotted prefix in turn, and the JVM tries every
  prefix as a class, searching each jar on the class path before concluding it is a package
  (about 1 ms and a busy core per name). `java_class` names the class directly: no round trip.
- A Python ``for`` over a Java list ends when Java throws ``NoSuchElementException``; PySpark's
  exception hook then classifies that exception with a dozen more JVM calls (about 15 ms per loop).
  `items` reads the list by index instead.
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass


def java_class(spark: Any, name: str) -> Any:
    """The JVM class `name` (fully qualified) of `spark`'s JVM, for its static members."""
    return JavaClass(name, spark.sparkContext._gateway._gateway_client)


def items(java_list: Any) -> list[Any]:
    """The elements of a ``java.util.List``, in order."""
    return [java_list.get(index) for index in range(java_list.size())]


def values_of(java_map: Any, keys: list[str]) -> dict[str, Any]:
    """The entries of a ``java.util.Map`` under `keys` that it holds."""
    return {key: java_map.get(key) for key in keys if java_map.containsKey(key)}
