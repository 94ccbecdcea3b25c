"""Evaluation stage (plain Python, no Dagster): the agent loop, held-out synthetic tasks, BFCL v3
multi-turn base through a safe executor, aggregation over seeds, and the results table.

torch and transformers are imported only when a :class:`~envfactory_assets.evaluation.model_policy.Policy`
is built.
"""
