"""The application: the `yardstick` CLI, its project-local Prefect settings and the private
Prefect server it starts for one-off runs.

The top layer: it may import everything, nothing imports it (see yardstick/__init__.py)."""
