-- depends_on: refined_trajectories
-- How the user queries of passed refined trajectories read (same figures as synth.refinement.report.query_statistics).
-- Words are lower-cased [a-z0-9] runs; distinct word 3-grams are counted over the first 1,000 queries (by
-- trajectory id and turn) and scaled to 1,000 queries when there are fewer; a turn "takes an identifier" when
-- one of its calls has a string argument named id or *_id, and quotes it when the query contains that value.
-- Only the fields used are read from the turns (json_transform), never the states they carry.
WITH turns AS (
    SELECT r.id, u.pos, u.turn.query AS query, u.turn.query_raw AS query_raw, u.turn.accuracy AS accuracy,
           u.turn.calls AS calls,
           regexp_extract_all(lower(u.turn.query), '[a-z0-9]+(?:''[a-z]+)?') AS toks,
           row_number() OVER (ORDER BY r.id, u.pos) AS n
    FROM current_refined_trajectories r,
         unnest(json_transform(r.turns, '[{"query": "VARCHAR", "query_raw": "VARCHAR", "accuracy": "DOUBLE",
                                           "calls": [{"arguments": "JSON"}]}]')) WITH ORDINALITY AS u(turn, pos)
    WHERE r.status = 'passed'
), ids AS (
    SELECT DISTINCT t.id, t.pos, (c.call.arguments->>k) AS value
    FROM turns t,
         unnest(t.calls) AS c(call),
         unnest(json_keys(c.call.arguments)) AS x(k)
    WHERE (k = 'id' OR k LIKE '%\_id' ESCAPE '\' OR k LIKE '%Id')
      AND json_type(c.call.arguments->k) = 'VARCHAR' AND (c.call.arguments->>k) <> ''
), id_turns AS (
    SELECT t.id, t.pos, bool_or(strpos(t.query, i.value) > 0) AS literal
    FROM turns t JOIN ids i ON i.id = t.id AND i.pos = t.pos
    GROUP BY t.id, t.pos
), trigrams AS (
    SELECT DISTINCT toks[g] || ' ' || toks[g + 1] || ' ' || toks[g + 2] AS trigram
    FROM turns, unnest(range(1, len(toks) - 1)) AS r(g)
    WHERE n <= 1000 AND len(toks) >= 3
)
SELECT
    (SELECT count(*) FROM turns) AS queries,
    round((SELECT count(*) FROM trigrams) * 1000.0 / nullif(least((SELECT count(*) FROM turns), 1000), 0), 1)
        AS distinct_trigrams_per_1000,
    round((SELECT avg(CAST(literal AS INTEGER)) FROM id_turns), 4) AS literal_identifier_share,
    round((SELECT avg(len(toks)) FROM turns), 2) AS mean_words,
    round((SELECT avg(CAST(query <> coalesce(query_raw, query) AS INTEGER)) FROM turns), 4) AS refined_differs_share,
    round((SELECT avg(CAST(accuracy = 1.0 AS INTEGER)) FROM turns), 4) AS solved_4_of_4_share
