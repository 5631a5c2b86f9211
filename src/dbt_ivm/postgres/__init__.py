"""PostgreSQL runtime: catalog lookups, capture triggers, exact batches, refresh and apply."""
