"""The paper's ablations (topology-aware sampler vs random walk; refined vs raw queries) as plain Python:
the arm plan (:mod:`.plan`), the orchestration over a materialize callable (:mod:`.orchestrate`) and the
report (:mod:`.report`). No Dagster here: ``envfactory ablations`` supplies the runner."""
