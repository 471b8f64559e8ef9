"""What people and machines read: rich tables (the only place that imports rich) and the machine formats
(json, jsonl, csv, parquet).
"""
