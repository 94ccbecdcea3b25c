-- depends_on: tool_chains
-- Topology-aware sampler vs the random-walk baseline: length, servers, validity, tool pairs, dependency depth.
WITH pairs AS (
    SELECT c.sampler, t.tool AS tool, lead(t.tool) OVER (PARTITION BY c.id ORDER BY t.pos) AS next_tool
    FROM current_tool_chains c,
         unnest(CAST(c.tools->'tools' AS VARCHAR[])) WITH ORDINALITY AS t(tool, pos)
)
SELECT c.sampler,
       count(*) AS chains,
       round(avg(c.n_tools), 2) AS mean_tools,
       round(avg(c.n_servers), 2) AS mean_servers,
       round(avg(c.dependency_depth), 2) AS mean_dependency_depth,
       round(count(*) FILTER (WHERE c.status = 'passed') / count(*), 3) AS valid_share,
       (SELECT count(DISTINCT (p.tool, p.next_tool)) FROM pairs p
        WHERE p.sampler = c.sampler AND p.next_tool IS NOT NULL) AS distinct_tool_pairs
FROM current_tool_chains c
GROUP BY c.sampler
ORDER BY c.sampler
