"""The HTTP routes, one module per resource (plural noun), each owning its conversions both ways.

A route module turns its requests' wire models into the service's typed commands, and the records a
use case returns into its wire answers, field by field; only `api.answers` (pages, direct JSON) is
shared.
"""
