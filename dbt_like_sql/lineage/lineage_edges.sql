-- depends_on: checkpoints, sft_dataset, rl_dataset, refined_trajectories, raw_trajectories, tool_chains, verified_environments, environments, source_resources
-- One row per parent -> child link across every stage (all versions, superseded ones included).
SELECT 'sft_dataset' AS child_table, s.id AS child_id, 'refined_trajectories' AS parent_table, s.refined_trajectory_id AS parent_id FROM sft_dataset s
UNION ALL SELECT 'rl_dataset', r.id, 'refined_trajectories', r.refined_trajectory_id FROM rl_dataset r
UNION ALL SELECT 'refined_trajectories', f.id, 'raw_trajectories', f.raw_trajectory_id FROM refined_trajectories f
UNION ALL SELECT 'raw_trajectories', t.id, 'tool_chains', t.tool_chain_id FROM raw_trajectories t
UNION ALL SELECT 'tool_chains', c.id, 'verified_environments', unnest(CAST(c.verified_environment_ids AS VARCHAR[])) FROM tool_chains c
UNION ALL SELECT 'verified_environments', v.id, 'environments', v.environment_id FROM verified_environments v
UNION ALL SELECT 'environments', e.id, 'source_resources', e.source_resource_id FROM environments e
UNION ALL SELECT 'checkpoints', k.id, 'sft_dataset', unnest(CAST(k.sft_dataset_ids AS VARCHAR[])) FROM checkpoints k
UNION ALL SELECT 'checkpoints', k.id, 'rl_dataset', unnest(CAST(k.rl_dataset_ids AS VARCHAR[])) FROM checkpoints k WHERE k.rl_dataset_ids IS NOT NULL
UNION ALL SELECT 'checkpoints', k.id, 'checkpoints', k.parent_checkpoint_id FROM checkpoints k WHERE k.parent_checkpoint_id IS NOT NULL
