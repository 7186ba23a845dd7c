"""Usage, GPU-hours, prices, bills, showback and capacity accounting."""
