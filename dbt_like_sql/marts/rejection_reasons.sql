-- depends_on: source_resources
-- Why documents of the corpus were not used, most frequent first.
SELECT reason, count(*) AS documents
FROM current_rejected_resources
GROUP BY reason
ORDER BY documents DESC, reason
