"""Bookings, reservations, admission and the atom rule."""
