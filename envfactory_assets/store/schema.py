"""DuckDB tables of the store, named after the assets that write them (docs/design.md, "Rows and lineage").

Every table has an ``id`` primary key (a content hash, see :func:`envfactory_assets.store.ids.content_id`),
parent-id columns named after the parent table, ``superseded`` (False for the current version) and
``written_at``. Columns typed ``JSON`` hold nested structures.
"""

from __future__ import annotations

COMMON = ["superseded BOOLEAN NOT NULL DEFAULT FALSE", "written_at TIMESTAMP DEFAULT current_timestamp"]

#: The columns of an ``evaluations`` row (one model x benchmark x subset), shared by ``ablation_evaluations``.
EVALUATION_COLUMNS = [
    "id VARCHAR PRIMARY KEY",
    "checkpoint_id VARCHAR",
    "model VARCHAR NOT NULL",
    "stage VARCHAR NOT NULL",
    "model_path VARCHAR",
    "benchmark VARCHAR NOT NULL",
    "subset VARCHAR NOT NULL",
    "n_tasks INTEGER",
    "seeds JSON",
    "mean DOUBLE",
    "std DOUBLE",
    "per_seed JSON",
    "metrics JSON",
    "results JSON",
    "traces JSON",
    "config JSON",
    "task_ids JSON",
]

TABLES: dict[str, list[str]] = {
    "source_resources": [
        "id VARCHAR PRIMARY KEY",
        "resource_key VARCHAR NOT NULL",
        "kind VARCHAR",
        "provider VARCHAR",
        "service VARCHAR",
        "title VARCHAR",
        "version VARCHAR",
        "license_name VARCHAR",
        "license_url VARCHAR",
        "path VARCHAR",
        "corpus_root VARCHAR",
        "sha256 VARCHAR NOT NULL",
        "size_bytes BIGINT",
        "domain VARCHAR NOT NULL",
        "categories JSON",
        "n_paths INTEGER",
        "n_resources INTEGER",
        "resource_names JSON",
        # the document's operations, those that become tools, by kind, and the others by reason
        "n_operations INTEGER",
        "n_mapped_operations INTEGER",
        "operations_by_kind JSON",
        "unmapped_by_reason JSON",
    ],
    "rejected_resources": [
        "id VARCHAR PRIMARY KEY",
        "path VARCHAR",
        "corpus_root VARCHAR",
        "sha256 VARCHAR",
        "reason VARCHAR NOT NULL",
        "detail VARCHAR",
        "n_operations INTEGER",
    ],
    "environments": [
        "id VARCHAR PRIMARY KEY",
        "env_id VARCHAR NOT NULL",
        "source_resource_id VARCHAR NOT NULL",
        "domain VARCHAR NOT NULL",
        "status VARCHAR NOT NULL",
        "reasons JSON",
        "provenance VARCHAR",
        "n_tools INTEGER",
        "tools JSON",
        "tables JSON",
        "state_schema JSON",
        "source VARCHAR",
        "initial_states JSON",
        "seed_data JSON",
        "builder VARCHAR",
        "revisions JSON",
    ],
    "verified_environments": [
        "id VARCHAR PRIMARY KEY",
        "environment_id VARCHAR NOT NULL",
        "env_id VARCHAR NOT NULL",
        "domain VARCHAR NOT NULL",
        "status VARCHAR NOT NULL",
        "reasons JSON",
        "n_checks INTEGER",
        "n_failed INTEGER",
        "checks JSON",
    ],
    "tool_graph_nodes": [
        "id VARCHAR PRIMARY KEY",
        "node_id VARCHAR NOT NULL",
        "verified_environment_id VARCHAR NOT NULL",
        "env_id VARCHAR NOT NULL",
        "domain VARCHAR NOT NULL",
        "tool_name VARCHAR NOT NULL",
        "kind VARCHAR",
        "n_inputs INTEGER",
        "n_outputs INTEGER",
    ],
    "tool_graph_parameters": [
        "id VARCHAR PRIMARY KEY",
        "tool_graph_node_id VARCHAR NOT NULL",
        "node_id VARCHAR NOT NULL",
        "direction VARCHAR",
        "name VARCHAR",
        "path VARCHAR",
        "type VARCHAR",
        "required BOOLEAN",
        "user_providable BOOLEAN",
        "text VARCHAR",
        "user_providable_source VARCHAR",  # rule | model (tool graph second phase)
        "value_kind VARCHAR",  # identifier | email | person_name | ... (graph.parameters.VALUE_KINDS)
    ],
    "tool_graph_edges": [
        "id VARCHAR PRIMARY KEY",
        "src_node_id VARCHAR NOT NULL",
        "dst_node_id VARCHAR NOT NULL",
        "src_param VARCHAR",
        "dst_param VARCHAR",
        "similarity DOUBLE",
        "provenance VARCHAR",
        "value_kind VARCHAR",  # what the edge passes; never identifier between two environments
    ],
    "benchmark_overlap": [
        "id VARCHAR PRIMARY KEY",
        "verified_environment_id VARCHAR NOT NULL",
        "env_id VARCHAR NOT NULL",
        "tool_name VARCHAR",
        "benchmark VARCHAR",
        "suite VARCHAR",
        "benchmark_tool VARCHAR",
        "similarity DOUBLE",
        "match VARCHAR",
    ],
    "tool_chains": [
        "id VARCHAR PRIMARY KEY",
        "chain_key VARCHAR NOT NULL",
        "sampler VARCHAR",
        "seed UBIGINT",
        "tools JSON",
        "env_ids JSON",
        "verified_environment_ids JSON",
        "domains JSON",
        "n_tools INTEGER",
        "n_servers INTEGER",
        "dependency_depth INTEGER",
        "status VARCHAR NOT NULL",
        "reasons JSON",
        "benchmark_overlap JSON",
        # multi-environment chains: {"persona", "goal", "linked_by", "domains"} (synth.sampling.sampler.episode_plan)
        "episode_plan JSON",
    ],
    "raw_trajectories": [
        "id VARCHAR PRIMARY KEY",
        "tool_chain_id VARCHAR NOT NULL",
        "env_ids JSON",
        "domains JSON",
        "status VARCHAR NOT NULL",
        "reasons JSON",
        "n_turns INTEGER",
        "n_calls INTEGER",
        "turns JSON",
        "initial_state JSON",
        "final_state JSON",
        "initial_state_hash VARCHAR",
        "final_state_hash VARCHAR",
        "benchmark_overlap JSON",
    ],
    "refined_trajectories": [
        "id VARCHAR PRIMARY KEY",
        "raw_trajectory_id VARCHAR NOT NULL",
        "tool_chain_id VARCHAR NOT NULL",
        "env_ids JSON",
        "domains JSON",
        "status VARCHAR NOT NULL",
        "reasons JSON",
        "n_turns INTEGER",
        "operators JSON",
        "turns JSON",
        "benchmark_overlap JSON",
    ],
    "sft_dataset": [
        "id VARCHAR PRIMARY KEY",
        "refined_trajectory_id VARCHAR NOT NULL",
        "env_ids JSON",
        "domains JSON",
        "split VARCHAR",
        "messages JSON",
        "tools JSON",
        "n_turns INTEGER",
        "benchmark_overlap JSON",
        # tool names replaced by neutral tokens in messages and tools (function masking, synth.datasets.name_masking)
        "names_masked BOOLEAN",
    ],
    "rl_dataset": [
        "id VARCHAR PRIMARY KEY",
        "refined_trajectory_id VARCHAR NOT NULL",
        "turn_index INTEGER",
        "env_ids JSON",
        "domains JSON",
        "split VARCHAR",
        "prompt JSON",
        "tools JSON",
        "gold_calls JSON",
        "masked_arguments JSON",
        "initial_state JSON",
        "final_state JSON",
        "final_state_hash VARCHAR",
        "benchmark_overlap JSON",
        # every call the turn ran, in order: the reward never charges them (gold_calls leaves out unneeded reads)
        "executed_calls JSON",
        # the turn's closing assistant reply; on a row without gold calls (abstention) it is the whole answer
        "gold_reply VARCHAR",
    ],
    "checkpoints": [
        "id VARCHAR PRIMARY KEY",
        "sft_dataset_version VARCHAR NOT NULL",
        "sft_dataset_ids JSON",
        "base_model VARCHAR",
        "base_model_hash VARCHAR",
        "config JSON",
        "metrics JSON",
        "path VARCHAR",
        # 'sft' | 'grpo' (NULL in rows written before GRPO existed = 'sft'); a GRPO row's parent is its SFT row,
        # so lineage walks from a GRPO checkpoint through its SFT run to both datasets
        "stage VARCHAR",
        "parent_checkpoint_id VARCHAR",
        "rl_dataset_ids JSON",
        "rl_dataset_version VARCHAR",
    ],
    # one row per model x benchmark x subset; checkpoint_id is NULL for the base model, which is evaluated as a
    # baseline and has no checkpoint row
    "evaluations": EVALUATION_COLUMNS,
    # the ablations' evaluations (ablations_report): every evaluated arm's rows and the base model's and the
    # do-nothing baseline's once; `arm` names the arm (NULL for the base model and the baseline)
    "ablation_evaluations": [*EVALUATION_COLUMNS, "arm VARCHAR"],
    # one row per export version (id: the version), written by the exports stage after it measured the written
    # files as verl, LlamaFactory and Hugging Face load them (envfactory_assets.exports.audit)
    "export_audits": [
        "id VARCHAR PRIMARY KEY",
        "path VARCHAR NOT NULL",
        "audit JSON",
    ],
    # one row per Dagster run and asset step of an `envfactory run` (run_token: the CLI's run tag, shared by the
    # runs of one command); written at the command's end and never superseded, so every run's times stay
    "stage_times": [
        "id VARCHAR PRIMARY KEY",
        "run_id VARCHAR NOT NULL",
        "run_token VARCHAR",
        "step_key VARCHAR NOT NULL",
        "started_at TIMESTAMP",
        "wall_seconds DOUBLE",
        "status VARCHAR",
        "peak_rss_mib DOUBLE",
        "load_avg_1m DOUBLE",
    ],
}

#: Each stage's main table and the status of the rows that are its useful output (None: every row is).
#: A write whose rows hold none of them must not silently supersede current rows that do
#: (:meth:`envfactory_assets.store.db.Store.replace_current_tables`). Tables where an empty version is a
#: normal outcome (``rejected_resources``, ``benchmark_overlap``, the graph's parameters and edges) are not listed.
PASSED_STATUS: dict[str, str | None] = {
    "source_resources": None,
    "environments": "built",
    "verified_environments": "passed",
    "tool_graph_nodes": None,
    "tool_chains": "passed",
    "raw_trajectories": "passed",
    "refined_trajectories": "passed",
    "sft_dataset": None,
    "rl_dataset": None,
    "checkpoints": None,
    "evaluations": None,
}

#: Per-item tables: the column naming the item's input. A stored passed row is protected only from a new
#: row made from the *same* input (then only the settings changed); a new input that fails (an edited
#: document that no longer builds or verifies) is a real change and is recorded.
SAME_INPUT_COLUMN: dict[str, str] = {
    "environments": "source_resource_id",
    "verified_environments": "environment_id",
}

JSON_COLUMNS: dict[str, set[str]] = {
    table: {c.split()[0] for c in cols if c.split()[1] == "JSON"} for table, cols in TABLES.items()
}


def ddl() -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` statements for every table, plus ``current_<table>`` views."""
    statements = []
    for table, cols in TABLES.items():
        statements.append(f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(cols + COMMON)})")
        statements.append(f"CREATE OR REPLACE VIEW current_{table} AS SELECT * FROM {table} WHERE NOT superseded")
    return statements


def columns(table: str) -> list[str]:
    """The writable column names of ``table`` (without ``superseded``/``written_at``).

    Raises:
        KeyError: for a table the store does not have.
    """
    if table not in TABLES:
        raise KeyError(f"unknown store table {table!r}; known: {sorted(TABLES)}")
    return [c.split()[0] for c in TABLES[table]]
