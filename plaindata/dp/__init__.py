"""Differential-privacy primitives: noise mechanisms, composition theorems and privacy-cost statements."""
