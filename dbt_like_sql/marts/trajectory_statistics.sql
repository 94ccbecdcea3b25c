-- depends_on: raw_trajectories, refined_trajectories
-- Distribution of turns and calls per trajectory, by status.
SELECT
    status,
    count(*) AS trajectories,
    round(avg(n_turns), 2) AS mean_turns,
    min(n_turns) AS min_turns,
    max(n_turns) AS max_turns,
    round(avg(n_calls), 2) AS mean_calls,
    max(n_calls) AS max_calls,
    count(*) FILTER (WHERE n_turns >= 2) AS multi_turn
FROM current_raw_trajectories
GROUP BY status
ORDER BY status
