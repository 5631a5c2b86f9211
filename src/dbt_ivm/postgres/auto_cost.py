"""AUTO's planner evidence on PostgreSQL, for `dbt_ivm.cost`: gathered inside the refresh's
transaction while the batch's delta is built, before anything is applied.

The planner is asked (EXPLAIN, nothing run) what each path computes before it writes. FULL: the new
contents diffed against the stored rows. Differential: every subquery the delta pins into a temp table
(priced just before it is computed, so the work the pins do is counted) plus the consolidated row
delta that reads them. Pins only add cost, so once the differential side alone is clearly dearer than
FULL the delta is abandoned there (`Abandoned`) and the rest of its work is never done. The final
statement is priced under the settings it runs with (`pg_apply.expect_few_rows`), set inside a
savepoint so that a FULL refresh still runs under its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dbt_ivm import cost
from dbt_ivm.layout import Layout
from dbt_ivm.postgres import apply as pg_apply
from dbt_ivm.postgres.db import Db
from dbt_ivm.target import Target


class Abandoned(Exception):
    """The differential refresh priced so far is already clearly dearer than FULL."""

    def __init__(self, choice: cost.Choice) -> None:
        super().__init__(choice.reason)
        self.choice = choice


class PlannerWeighing:
    """The planner's side of AUTO's choice for one batch of `changes`; `history` (recent refreshes,
    which did not measure both paths) turns planner units into seconds."""

    def __init__(
        self,
        db: Db,
        changes: int,
        history: Sequence[cost.PastRefresh],
        layout: Layout,
        target: Target,
        full: exp.Query,
    ) -> None:
        self.db, self.changes, self.history, self.layout, self.target = db, changes, history, layout, target
        self.full = pg_apply.planner_cost(db, pg_apply.StagedRows.of(full, layout, target).sql)
        self.pinned = 0.0  # the planner's cost of the subqueries pinned so far

    def before_pin(self, query: str) -> None:
        """Price a subquery about to be pinned; raises Abandoned when the differential is already lost."""
        self.pinned += pg_apply.planner_cost(self.db, query)
        so_far = cost.choose(self.changes, self.history, cost.PlannerCosts(self.pinned, self.full))
        if so_far.action == "FULL":
            reason = f"{so_far.reason}; the rest of its delta left unpriced"
            raise Abandoned(cost.Choice("FULL", reason, so_far.estimated_differential))

    def choice(self, staged: pg_apply.StagedRows) -> cost.Choice:
        """DIFFERENTIAL or FULL, the `staged` rows of the row delta (pins computed) priced last."""
        self.db.execute("SAVEPOINT __ivm_weigh")
        pg_apply.expect_few_rows(self.db)
        last = pg_apply.planner_cost(self.db, staged.sql)
        self.db.execute("ROLLBACK TO SAVEPOINT __ivm_weigh; RELEASE SAVEPOINT __ivm_weigh")
        return cost.choose(self.changes, self.history, cost.PlannerCosts(self.pinned + last, self.full))
