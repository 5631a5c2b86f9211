"""What the dbt-ivm adapters share: the stream_table config read into a spec, the messages, the
compile-time check and the materialization's calls into the engine (one mixin, `engine_calls`)."""
