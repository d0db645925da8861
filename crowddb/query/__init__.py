"""A query's way through crowddb: ``pipeline.run`` reads it top to bottom (text, plain SQL or the crowd's way:
values bound, refusals, calls bound, the estimate, the run, roles carried)."""
