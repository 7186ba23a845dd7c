"""The HTTP contract shared by the server, the typed client, the CLI and the node daemon.

Field names on the wire are camelCase; Python attributes are snake_case.
"""

API_VERSION = "1"
"""The version of this contract: the `/v1` of every path. Fields may be added to answers within it
(clients ignore what they do not know); anything a deployed client would trip on needs a new one."""

API_VERSION_HEADER = "BC-API-Version"
"""Every answer of the server carries `BC-API-Version: 1`, and the client sends it with every request,
so either side (and anything reading logs between them) can tell which contract the other speaks."""
