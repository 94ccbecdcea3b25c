"""The paper's ablations (topology-aware sampler vs random walk; refined vs raw queries) as plain Python:
the arm plan (:mod:`.plan`), each arm's step ledger (:mod:`.steps`) and the report (:mod:`.report`). No
Dagster here: the assets of ``envfactory_assets.defs.ablations`` run the steps."""
