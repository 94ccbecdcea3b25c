"""Tool use shared by training and evaluation: the tool chat template, the tool-call parser, the task
episode and its environment class, the paper's hybrid reward, the held-out split, and tool selection.

Plain Python (no Dagster, no torch at import). It sits below ``training``, ``evaluation``, ``synth`` and
``exports``, and above ``runtime`` and ``store``.
"""
