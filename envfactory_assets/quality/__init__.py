"""Data-quality suites (Great Expectations on pandas DataFrames) for the datasets."""
