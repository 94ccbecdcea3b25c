"""Authentic resources: scanning real API descriptions, domain mapping, selection with reasons."""
