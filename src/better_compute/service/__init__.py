"""Use cases: one transaction each, in the order their side effects must happen.

The service layer talks to storage only through the ports in `ports.py`; entrypoints wire the real store.
"""
