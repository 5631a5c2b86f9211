from dbt_ivm import __version__ as version

__all__ = ["version"]
