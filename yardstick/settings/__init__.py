"""What the user configures: the environments file and the measurement profiles (composed
from the settings each family declares).

Read by flows and the CLI; imports storage, tasks and the layers below (see
yardstick/__init__.py)."""
