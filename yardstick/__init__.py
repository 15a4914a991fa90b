"""redis-yardstick: nightly Redis measurements whose figures say whether they transfer."""

__version__ = "0.1.0"

# Every connection the tool opens carries this prefix in CLIENT SETNAME, so
# SLOWLOG entries and CLIENT LIST rows it caused can be told apart.
CLIENT_NAME_PREFIX = "yardstick"
