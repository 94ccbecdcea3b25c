-- depends_on: refined_trajectories
-- Diversity of the passed refined trajectories: distinct consecutive tool pairs (environment-qualified),
-- environments and domains, as counts and per 1,000 trajectories.
WITH ok AS (
    SELECT * FROM current_refined_trajectories WHERE status = 'passed'
), calls AS (
    SELECT ok.id, t.pos AS turn_pos, c.pos AS call_pos,
           (c.call->>'env_id') || '.' || (c.call->>'name') AS tool
    FROM ok,
         unnest(CAST(ok.turns AS JSON[])) WITH ORDINALITY AS t(turn, pos),
         unnest(CAST(t.turn->'calls' AS JSON[])) WITH ORDINALITY AS c(call, pos)
), pairs AS (
    SELECT tool, lead(tool) OVER (PARTITION BY id ORDER BY turn_pos, call_pos) AS next_tool FROM calls
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
