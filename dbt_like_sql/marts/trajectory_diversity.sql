-- depends_on: refined_trajectories
-- Diversity of the passed refined trajectories: distinct consecutive tool pairs (environment-qualified),
-- environments and domains, as counts and per 1,000 trajectories.
-- Only the calls' names and environments are read from the turns (a JSON path), never the turns' states.
WITH ok AS (
    SELECT id, env_ids, domains,
           json_extract_string(turns, '$[*].calls[*].env_id') AS call_envs,
           json_extract_string(turns, '$[*].calls[*].name') AS call_names
    FROM current_refined_trajectories WHERE status = 'passed'
), calls AS (
    SELECT id, g AS call_pos, call_envs[g] || '.' || call_names[g] AS tool
    FROM ok, unnest(range(1, len(call_names) + 1)) AS r(g)
), pairs AS (
    SELECT tool, lead(tool) OVER (PARTITION BY id ORDER BY call_pos) AS next_tool FROM calls
), counts AS (
    SELECT (SELECT count(*) FROM ok) AS trajectories,
           (SELECT count(DISTINCT (tool, next_tool)) FROM pairs WHERE next_tool IS NOT NULL) AS distinct_tool_pairs,
           (SELECT count(DISTINCT e) FROM ok, unnest(CAST(ok.env_ids AS VARCHAR[])) AS u(e)) AS environments,
           (SELECT count(DISTINCT d) FROM ok, unnest(CAST(ok.domains AS VARCHAR[])) AS u(d)) AS domains
)
SELECT trajectories, distinct_tool_pairs, environments, domains,
       round(distinct_tool_pairs * 1000.0 / nullif(trajectories, 0), 2) AS tool_pairs_per_1000,
       round(environments * 1000.0 / nullif(trajectories, 0), 2) AS environments_per_1000,
       round(domains * 1000.0 / nullif(trajectories, 0), 2) AS domains_per_1000
FROM counts
