-- depends_on: refined_trajectories
-- Kept turns of passed refined trajectories by refinement operator (applied, not reverted) and by per-turn
-- solve accuracy (passing attempts / k): kind, value, turns and their share of all kept turns.
-- Only the fields used are read from the turns (json_transform), never the states they carry.
WITH turns AS (
    SELECT r.id, u.pos, u.turn AS turn
    FROM current_refined_trajectories r,
         unnest(json_transform(r.turns, '[{"accuracy": "DOUBLE", "operators": "JSON"}]')) WITH ORDINALITY AS u(turn, pos)
    WHERE r.status = 'passed'
), ops AS (
    SELECT DISTINCT t.id, t.pos, o->>'operator' AS operator
    FROM turns t, unnest(CAST(t.turn.operators AS JSON[])) AS x(o)
    WHERE NOT coalesce(CAST(o->>'reverted' AS BOOLEAN), false)
), total AS (SELECT count(*) AS n FROM turns)
SELECT 'operator' AS kind, operator AS value, count(*) AS turns, round(count(*) / any_value(total.n), 4) AS share
FROM ops, total GROUP BY operator
UNION ALL
SELECT 'accuracy', printf('%.2f', turn.accuracy), count(*), round(count(*) / any_value(total.n), 4)
FROM turns, total GROUP BY 2
ORDER BY kind, value
