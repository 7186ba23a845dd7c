"""The HTTP contract shared by the server, the typed client, the CLI and the node daemon.

Field names on the wire are camelCase; Python attributes are snake_case.
"""

API_VERSION = "v1"
