-- depends_on: source_resources
-- How much of the scanned OpenAPI corpus becomes tools: per tool kind, the operations mapped to it (within
-- an environment's resource cap); per reason, the operations that are not (a rejected document's operations
-- count under document_<its rejection reason>). Documents over the size limit are not read and not counted.
WITH corpus AS (
    SELECT DISTINCT corpus_root FROM current_source_resources WHERE kind = 'openapi'
),
mapped AS (
    SELECT 'mapped' AS outcome, k.key AS name, sum(CAST(k.value AS BIGINT)) AS operations
    FROM current_source_resources s, json_each(s.operations_by_kind) k
    WHERE s.kind = 'openapi'
    GROUP BY k.key
),
unmapped AS (
    SELECT 'unmapped' AS outcome, u.key AS name, sum(CAST(u.value AS BIGINT)) AS operations
    FROM current_source_resources s, json_each(s.unmapped_by_reason) u
    WHERE s.kind = 'openapi'
    GROUP BY u.key
    UNION ALL
    SELECT 'unmapped', 'document_' || reason, sum(n_operations)
    FROM current_rejected_resources
    WHERE corpus_root IN (SELECT corpus_root FROM corpus) AND reason <> 'too_large' AND n_operations > 0
    GROUP BY reason
),
counted AS (
    SELECT * FROM mapped UNION ALL SELECT * FROM unmapped
)
SELECT outcome, name, operations,
       round(operations / sum(operations) OVER (), 4) AS share_of_operations
FROM counted
ORDER BY outcome, operations DESC, name
