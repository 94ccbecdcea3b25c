-- depends_on: tool_graph
-- Environments whose tools overlap a held-out benchmark's (decontamination tags), with the matching tools.
SELECT env_id, benchmark, count(*) AS overlapping_tools, max(similarity) AS max_similarity,
       string_agg(tool_name || ' ~ ' || suite || '.' || benchmark_tool, '; ' ORDER BY similarity DESC) AS matches
FROM current_benchmark_overlap
GROUP BY env_id, benchmark
ORDER BY overlapping_tools DESC, env_id
