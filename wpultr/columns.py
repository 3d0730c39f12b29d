"""The column names of the sessions and annotations tables, and the nodes the causal graph adds to them.

Plain strings with no import: modules that only name columns (reading a graph, the biases read off it) take them
from here without loading pandas and pyarrow, as `wpultr graph show` must start quickly. `wpultr.schema`, the
tables' one definition, re-exports them beside the types and checks.
"""
from __future__ import annotations

# Sessions table (long form: one row per shown result)
SESSION_ID = "session_id"
QUERY_ID = "query_id"
POSITION = "position"
CLICK = "click"
QUERY_TOKENS = "query_tokens"
TITLE_TOKENS = "title_tokens"
ABSTRACT_TOKENS = "abstract_tokens"
FEATURES = "features"
DOC_ID = "doc_id"
LABEL = "label"
BUCKET = "bucket"

# Nodes the causal graph adds to the table's columns.
RELEVANCE_SCORE = "relevance_score"
