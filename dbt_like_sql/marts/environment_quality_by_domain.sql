-- depends_on: verified_environments, environments
-- Environments built, verified and passed per domain, with tools and checks run.
SELECT
    e.domain,
    count(*) AS environments,
    count(*) FILTER (WHERE v.status = 'passed') AS passed,
    count(*) FILTER (WHERE v.status = 'failed') AS failed,
    round(count(*) FILTER (WHERE v.status = 'passed') / count(*), 3) AS pass_rate,
    sum(e.n_tools) FILTER (WHERE v.status = 'passed') AS tools_in_passed,
    sum(v.n_checks) AS checks_run
FROM current_environments e
LEFT JOIN current_verified_environments v ON v.environment_id = e.id
GROUP BY e.domain
ORDER BY e.domain
