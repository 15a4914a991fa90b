"""Prefect flows: what runs where and in which order; no measurement logic lives here."""
