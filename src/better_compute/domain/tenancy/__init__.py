"""Tenants, their credentials, quotas and IAM policies."""
