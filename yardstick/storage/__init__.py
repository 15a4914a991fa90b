"""Storage: table schemas, the Parquet lake (local or S3), compaction, retention, the DuckDB
warehouse and the dbt runner that builds the SQL models in yardstick/sql/.

Imports the measurement families (yardstick/tasks/) for their declared tables, and the layers below
(see yardstick/__init__.py)."""
