"""What a Spark failure says, for the user: the JVM's own message, not py4j's wrapper.

An exception the JVM throws through a call pyspark does not translate (``persist``, ``collect`` of
some jobs, a MERGE's runtime errors) reaches Python as a ``Py4JJavaError`` whose text starts with
``An error occurred while calling o68.sql.`` — the object and method of the bridge, nothing about the
query — followed by a Java stack trace. The Java exception and its causes carry the real message;
the innermost cause usually says what went wrong, the outermost what Spark was doing.
"""

from __future__ import annotations

from typing import Any

MAX_CAUSES = 20


def readable(error: BaseException) -> str | None:
    """The Java exception's message (and its innermost cause's, when that says something else);
    None for an error that did not come from the JVM through py4j."""
    java = getattr(error, "java_exception", None)
    if java is None:
        return None
    outer = _first_line(java)
    deeper = ""  # the innermost cause that says something the outer message does not
    cause = java.getCause()
    for _ in range(MAX_CAUSES):
        if cause is None:
            break
        line = _first_line(cause)
        if line and line not in outer:
            deeper = line
        cause = cause.getCause()
    if not outer:
        return deeper or None
    return f"{outer}; caused by {deeper}" if deeper else outer


def summary(error: BaseException) -> str:
    """One line that says what failed: the JVM's message, else the error's first line, else its type."""
    text = readable(error) or str(error).strip()
    return (text.splitlines() or [type(error).__name__])[0]


def _first_line(java_exception: Any) -> str:
    text = str(java_exception.toString() or "").strip()
    first = text.splitlines()[0] if text else ""
    return first[:1000]
