"""Measurement tasks: one module per family; each returns Arrow tables and knows no paths."""
