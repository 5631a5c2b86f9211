"""The logical plan: what a defining query computes, as operators the delta rules understand."""

from dbt_ivm.plan.build import build_plan
from dbt_ivm.plan.nodes import AggCall, Aggregate, Filter, Join, Output, Plan, Project, Scan

__all__ = ["AggCall", "Aggregate", "Filter", "Join", "Output", "Plan", "Project", "Scan", "build_plan"]
