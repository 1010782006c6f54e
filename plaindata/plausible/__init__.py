"""Plausible-deniability synthesis (Bindschaedler, Shokri and Gunter, VLDB 2017)."""
