"""Security testing of the runtime from outside it: the hostile-code corpus that the sandbox must contain.

Nothing under ``runtime/`` imports this package; the pipeline never does either."""
