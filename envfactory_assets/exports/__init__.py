"""Dataset exports (plain Python, no Dagster): verl parquet, LlamaFactory/ShareGPT JSON and Hugging Face
``datasets`` saved to disk, split by environment into train and validation, every row carrying the
licences of the source resources it was made from, with a dataset card listing them.
"""
