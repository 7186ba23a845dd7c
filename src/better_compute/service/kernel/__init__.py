"""What every context may use: ids, names, time windows, errors, the shared value types."""
